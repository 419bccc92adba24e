"""mkdocs hook: the parts of the docs that are generated from the code at build time.

Registered in mkdocs.yml (``hooks:``); mkdocs calls ``on_page_markdown`` for every page. A marker in
a page is replaced by text built from the code the docs describe, so the docs cannot drift from it:

- ``<!-- config-keys -->`` (study-file.md): every flat config key of a trial, section by section,
  from the frozen dataclasses of ``harness.config.TrialConfig``: key, type, default and the rule its
  validation enforces (the message ``TrialConfig.from_flat`` gives for an invalid value), under the
  section class's docstring. The keys are checked against ``TrialConfig.keys()``.
- ``<!-- metric-names -->`` (statistics.md): the metric names table from
  ``harness.metrics.measures.METRIC_TABLE`` (harness key, ir-measures name, table label).
- ``<!-- study-keys:begin -->`` ... ``<!-- study-keys:end -->`` (study-file.md): a hand-written
  table of the study file's top-level keys; the build fails unless its first column names exactly
  ``harness.study.spec.TOP_KEYS``.

The harness imported is the one in this repository (its root goes first on ``sys.path``), whatever
else is installed.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
CONFIG_KEYS = "<!-- config-keys -->"
METRIC_NAMES = "<!-- metric-names -->"
STUDY_KEYS = re.compile(r"<!-- study-keys:begin -->(.*?)<!-- study-keys:end -->", re.DOTALL)


def _harness() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CONFIG_KEYS in markdown:
        markdown = markdown.replace(CONFIG_KEYS, config_keys_markdown())
    if METRIC_NAMES in markdown:
        markdown = markdown.replace(METRIC_NAMES, metric_names_markdown())
    match = STUDY_KEYS.search(markdown)
    if match:
        check_study_keys(match.group(1), page.file.src_path)
    return markdown


# -- config keys --------------------------------------------------------------------------------

def _yaml(value: Any) -> str:
    """A default as a study file writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value else '""'
    return repr(value)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise PluginError(f"config field {f.name} has no default")


def _probe(hint: Any) -> Any:
    """A value the field's type accepts but its rule, if it has one, refuses."""
    args = set(get_args(hint)) or {hint}
    if get_origin(hint) is tuple or any(get_origin(a) is tuple for a in args):
        return [-1]
    if str in args:
        return ""
    if bool in args:
        return None
    if int in args:
        return -10**9
    if float in args:
        return -1e9
    return None


def _rule(key: str, hint: Any) -> str:
    """What validation accepts for ``key``: the rule in the message an invalid value gets."""
    from harness.config import TrialConfig
    from harness.errors import HarnessError

    probe = _probe(hint)
    if probe is None:
        return "true or false" if bool in (set(get_args(hint)) or {hint}) else ""
    try:
        TrialConfig.from_flat({key: probe})
    except HarnessError as exc:  # the config's own error (ConfigError); its words are the rule
        msg = str(exc)
        if "; valid: " in msg:
            return "one of " + msg.split("; valid: ", 1)[1]
        prefix = f"{key} must be "
        if msg.startswith(prefix):
            return msg[len(prefix):].rsplit(", got ", 1)[0]
        raise PluginError(f"docs hook: unexpected message for {key}={probe!r}: {msg}") from None
    args = set(get_args(hint)) or {hint}
    return "any text" if str in args else "any integer"  # a path, a model name; a seed


def _type_name(annotation: Any) -> str:
    """A field's annotation as the docs show it: ``int | None`` -> ``int or null``."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return " or ".join("null" if part.strip() == "None" else part.strip() for part in text.split("|"))


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


def _doc(cls: type) -> str:
    """A class docstring as Markdown: reST literals (``x``) become code spans."""
    text = inspect.getdoc(cls) or ""
    return re.sub(r"``(.+?)``", r"`\1`", text)


def config_keys_markdown() -> str:
    _harness()
    from harness.config import TrialConfig

    lines: list[str] = []
    keys: list[str] = []
    for section in dataclasses.fields(TrialConfig):
        cls = type(_default(section))
        hints = get_type_hints(cls)
        lines += [f"### `{section.name}`", "", _doc(cls), "",
                  "| key | type | default | accepted |", "|:--|:--|:--|:--|"]
        for f in dataclasses.fields(cls):
            key = f"{section.name}.{f.name}"
            keys.append(key)
            kind = _type_name(f.type)
            help_text = f.metadata.get("help") if f.metadata else None
            rule = _rule(key, hints[f.name])
            if help_text:
                rule = f"{rule}; {help_text}" if rule else str(help_text)
            lines.append(f"| `{key}` | {_cell(kind)} | `{_cell(_yaml(_default(f)))}` | {_cell(rule)} |")
        lines.append("")
    if keys != list(TrialConfig.keys()):
        raise PluginError("docs hook: the sections' fields do not give TrialConfig.keys(): "
                          f"{sorted(set(keys) ^ set(TrialConfig.keys()))}")
    return "\n".join(lines)


# -- metric names -------------------------------------------------------------------------------

def metric_names_markdown() -> str:
    _harness()
    from harness.metrics.measures import METRIC_TABLE

    lines = ["| harness key | ir-measures | table label |", "|:--|:--|:--|"]
    lines += [f"| `{m.key}` | `{m.canonical}` | {m.label} |" for m in METRIC_TABLE]
    return "\n".join(lines) + "\n"


# -- study-file top-level keys ------------------------------------------------------------------

def check_study_keys(block: str, page: str) -> None:
    _harness()
    from harness.study.spec import TOP_KEYS

    documented = re.findall(r"^\|\s*`([A-Za-z_]+)`\s*\|", block, re.MULTILINE)
    missing = [k for k in TOP_KEYS if k not in documented]
    unknown = [k for k in documented if k not in TOP_KEYS]
    if missing or unknown or len(documented) != len(set(documented)):
        raise PluginError(f"{page}: the study-keys table must name each of harness.study.spec.TOP_KEYS "
                          f"once; missing {missing}, not study keys {unknown}")
