"""User-facing errors: the CLI prints their message on one line and exits non-zero."""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable

from harness.suggest import did_you_mean


class HarnessError(Exception):
    """Bad input or an unusable environment, described in words a user can act on."""


class ConfigError(HarnessError, ValueError):
    """A configuration value is missing, unknown or out of range; the message names the key, and
    ``key`` holds it where one key is at fault (None otherwise)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class UnknownName(ConfigError, KeyError):
    """A name that is not among the valid ones: a metric, configuration or seed of a study, a test,
    correction, table form or format, a registry's entry. ``kind``, ``name`` and ``valid`` hold what
    was asked and what exists; the message (``unknown_name``) adds the close matches and lists the
    valid names. Also a KeyError, as a lookup that fails.

    >>> raise UnknownName("metric", "mapp", ["map", "mrr"], where="results.csv")
    Traceback (most recent call last):
    ...
    harness.errors.UnknownName: unknown metric 'mapp' in results.csv (did you mean map?); valid: map, mrr
    """

    def __init__(self, kind: str, name: object, valid: Iterable[str], *, where: str | None = None,
                 also: str = "", key: str | None = None) -> None:
        self.kind, self.name, self.valid = kind, name, tuple(valid)
        super().__init__(unknown_name(kind, name, self.valid, where=where, also=also), key=key)

    # KeyError's str() is the repr of its argument; the message is meant to be read as it is.
    __str__ = Exception.__str__


def prefixed(exc: HarnessError, prefix: str) -> HarnessError:
    """``exc`` with its message after ``prefix`` ("collection 'x'"): the same class and attributes
    (an ``UnknownName``'s kind, name and valid names, a ``ConfigError``'s key), to be raised in its
    place. ``type(exc)(message)`` would not do: ``UnknownName`` is not made from a message.

    >>> str(prefixed(UnknownName("metric", "mapp", ["map"]), "collection 'x'"))
    "collection 'x': metric: unknown name 'mapp' (did you mean map?); valid: map"
    >>> prefixed(ConfigError("bad", key="train.lr"), "collection 'x'").key
    'train.lr'
    >>> str(prefixed(DataError("no map in collection 'x' of a.csv"), "collection 'x'"))
    "no map in collection 'x' of a.csv"
    """
    if str(exc).startswith(f"{prefix}:") or f" {prefix} " in f" {exc} ":
        return exc  # the message names it already
    new = type(exc).__new__(type(exc))
    new.__dict__.update(exc.__dict__)
    new.args = (f"{prefix}: {exc}",)
    return new


def unknown_name(kind: str, name: object, valid: Iterable[str], *, where: str | None = None,
                 also: str = "") -> str:
    """The one wording of an unknown name: ``{kind}: unknown name 'x' (did you mean y?); valid: ...``
    for an option or a registry's entry, ``unknown {kind} 'x' in {where} (...); valid: ...`` for a
    name looked up in ``where`` (a study, a results file); ``also`` follows the list.

    >>> unknown_name("evaluation.format", "tex", ["csv", "html", "latex", "md"])
    "evaluation.format: unknown name 'tex' (did you mean latex?); valid: csv, html, latex, md"
    """
    valid = list(valid)
    head = f"unknown {kind} {name!r} in {where}" if where else f"{kind}: unknown name {name!r}"
    return f"{head}{did_you_mean(name, valid)}; valid: {', '.join(valid)}{also}"


class DataError(HarnessError):
    """A data file is missing or malformed; the message names the file and, where known, the line."""


# A refused value is shown, never echoed whole: a 10,000-element list or a 1 MB string stays one
# short line (reprlib abbreviates with "...").
class _Shown(reprlib.Repr):
    # Python refuses to write an integer of more than 4300 digits (sys.set_int_max_str_digits),
    # which YAML's hex and binary forms (0x..., 0b...) produce without that limit: its size instead.
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 10_000:
            return f"<an integer of {int(x.bit_length() * math.log10(2)) + 1} digits>"
        return super().repr_int(x, level)


_SHOWN = _Shown()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 8
_SHOWN.maxlong = 40


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, abbreviated past about 80 characters.

    >>> shown(1.5), shown(list(range(100))), shown(16 ** 5000)
    ('1.5', '[0, 1, 2, 3, 4, 5, 6, 7, ...]', '<an integer of 6021 digits>')
    """
    return _SHOWN.repr(value)


def refuse(key: str, value: object, rule: str, *, why: str = "", where: str = "") -> ConfigError:
    """The one wording of a refused value: ``[where: ]{key} must be {rule}, got {value}[; {why}]``.

    ``key`` is the name as the user wrote it (``curriculum.delta``, ``seeds.max``, ``--port``),
    ``rule`` what a valid value is, ``why`` (optional) the reason or the way out, ``where`` the
    file and line where known (``study.yaml:5``; a study file's loader adds it from ``key``).
    Returned, to be raised: ``raise refuse(...)``.

    >>> str(refuse("curriculum.delta", 1.5, "in (0, 1]"))
    'curriculum.delta must be in (0, 1], got 1.5'
    >>> str(refuse("seeds.max", 10**9, "at most 1000", why="a study trains every seed", where="s.yaml:5"))
    's.yaml:5: seeds.max must be at most 1000, got 1000000000; a study trains every seed'
    """
    head = f"{where}: " if where else ""
    tail = f"; {why}" if why else ""
    return ConfigError(f"{head}{key} must be {rule}, got {shown(value)}{tail}", key=key)


def is_integer(value: object) -> bool:
    """An integer (Python's or numpy's), not a bool: what an option that counts takes.

    >>> is_integer(3), is_integer(3.0), is_integer(True), is_integer("3")
    (True, False, False, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A real number (Python's or numpy's), not a bool or a string.

    >>> is_number(0.05), is_number(1), is_number("0.05"), is_number(None)
    (True, True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require(cond: bool, key: str, rule: str, value: object) -> None:
    """Refuse a config value (``refuse``) unless ``cond``.

    >>> require(0.5 <= 1.0, "curriculum.delta", "in (0, 1]", 0.5)
    >>> require(1.5 <= 1.0, "curriculum.delta", "in (0, 1]", 1.5)
    Traceback (most recent call last):
    ...
    harness.errors.ConfigError: curriculum.delta must be in (0, 1], got 1.5
    """
    if not cond:
        raise refuse(key, value, rule)
