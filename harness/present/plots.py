"""One figure per metric: each configuration's per-seed values (points), their mean with its
confidence interval over seeds (t-interval, the analysis' confidence level), the baseline mean as a
dashed line, and the marker of each comparison above its configuration. PNG through matplotlib's
Agg canvas, created per figure (no pyplot, no global backend state).

A study over several collections gets the same figure per collection and metric
(``write_collection_plots``): ``<directory>/<collection>/<metric>.png``, one folder per collection
as `harness runs export` writes them, each figure titled with its collection and marked by the
whole table's family (harness.stats.across).

Every file and folder name is a metric's or a collection's made safe (``safe_names``): it stays
inside the directory whatever the name holds (``/``, ``..``) and is never too long for the file
system.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import DataError, HarnessError
from harness.present.panels import literal
from harness.present.table import display_name
from harness.stats import distributions as dist
from harness.stats.significance import Analysis

if TYPE_CHECKING:
    from harness.stats.across import CollectionsAnalysis

# A collection name (a study file's, or any text in a long CSV's collection column) as a folder name.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@#-]")


def metric_figure(analysis: Analysis, metric: str, collection: str = "") -> Any:
    """The matplotlib ``Figure`` of ``metric`` for every configuration (module docstring), on an
    Agg canvas; ``collection`` names the collection in the title."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise HarnessError("plots need matplotlib: pip install 'matplotlib>=3.8'") from None
    res = analysis.results
    configs = res.configs
    fig = Figure(figsize=(max(4.0, 1.1 * len(configs) + 1.5), 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, config in enumerate(configs):
        values = res.seed_values(config, metric)
        n = len(values)  # the study's seeds, or those a seed schedule gave this configuration
        offsets = np.linspace(-0.15, 0.15, n) if n > 1 else np.zeros(1)
        tcrit = float(dist.t.ppf((1 + analysis.options.confidence) / 2, n - 1)) if n > 1 else math.nan
        ax.scatter(i + offsets, values, s=14, color="0.55", zorder=2,
                   label="per seed" if i == 0 else None)
        half = tcrit * values.std(ddof=1) / math.sqrt(n) if n > 1 else 0.0
        ax.errorbar([i], [values.mean()], yerr=[[half], [half]], fmt="o", color="C0" if i else "C1",
                    capsize=4, zorder=3, label=f"mean, {analysis.options.confidence:.0%} CI" if i == 0 else None)
        marker = analysis.marker(analysis.get(config, metric))
        if marker:
            top = max(float(values.max()), float(values.mean()) + half)
            ax.annotate(marker, (i, top), textcoords="offset points", xytext=(0, 4),
                        ha="center", fontsize=12)
    ax.axhline(float(res.seed_values(res.baseline, metric).mean()), color="C1", ls="--", lw=1,
               label=f"baseline ({literal(res.baseline)})")
    ax.set_xticks(range(len(configs)), [literal(c) for c in configs], rotation=30 if len(configs) > 4 else 0, ha="right"
                  if len(configs) > 4 else "center")
    ax.set_ylabel(literal(display_name(metric)))
    where = f" on {literal(collection)}" if collection else ""
    ax.set_title(f"{literal(display_name(metric))}{where}: {len(configs) - 1} configurations vs {literal(res.baseline)}, "
                 f"{len(res.seeds)} seeds ({analysis.test} test)", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return fig


def plot_metric(analysis: Analysis, metric: str, path: str | Path, collection: str = "") -> Path:
    """Draw ``metric`` for every configuration into the PNG ``path``."""
    import io

    from harness.textfile import write_atomic

    png = io.BytesIO()
    metric_figure(analysis, metric, collection).savefig(png, format="png", dpi=120)
    return write_atomic(path, png.getvalue(), "plot")


# The longest name ``safe_names`` gives (a file system's limit is 255 bytes): a longer one is cut,
# with 8 hex digits of the whole name's SHA-256 after the cut.
_LONGEST = 120


def safe_names(names: Iterable[str]) -> dict[str, str]:
    """Each name (a metric's, a collection's: any text a results CSV holds) as a file or folder name
    that stays inside its directory: ``harness runs export``'s folder names
    (harness.results.trec_export.collection_folders: every character outside ``A-Z a-z 0-9 . _ + =
    @ # -`` as ``_``, a name of dots only or one that another's would share, also on a
    case-insensitive file system, with 8 hex digits of its SHA-256), cut to ``_LONGEST`` characters.
    A metric named ``../escape`` wrote its plot beside the directory, ``a/b`` into a subfolder, and
    one of 300 characters failed, "File name too long".

    >>> safe_names(["../escape", "a/b", "..", "map"])
    {'../escape': '.._escape', 'a/b': 'a_b', '..': '__-5ec1f7e7', 'map': 'map'}
    >>> long = safe_names(["x" * 300])["x" * 300]
    >>> len(long), long[-12:]
    (120, 'xxx-0d4e2ca9')
    """
    import hashlib

    from harness.results.trec_export import collection_folders as export_folders

    return {name: folder if len(folder) <= _LONGEST
            else f"{folder[:_LONGEST - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
            for name, folder in export_folders(list(names)).items()}


def metric_files(metrics: Iterable[str]) -> dict[str, str]:
    """Each metric's PNG file name, ``<metric>.png`` made safe (``safe_names``)."""
    return {m: f"{name}.png" for m, name in safe_names(metrics).items()}


def write_plots(analysis: Analysis, directory: str | Path) -> list[Path]:
    """One PNG per analysed metric, ``<directory>/<metric>.png`` (its name made safe: ``safe_names``)."""
    files = metric_files(analysis.metrics)
    return [plot_metric(analysis, m, Path(directory) / files[m]) for m in analysis.metrics]


def collection_folders(collections: tuple[str, ...]) -> dict[str, str]:
    """Each collection's folder name (``safe_names``: unsafe characters as ``_``, a name of dots
    only hashed, a long one cut; ``..`` wrote beside the directory); two collections whose names
    would share a folder are refused, naming both."""
    folders: dict[str, str] = {}
    for name in collections:
        folder = _UNSAFE.sub("_", name) or "_"
        clash = next((c for c, f in folders.items() if f == folder), None)
        if clash is not None:
            raise DataError(f"collections {clash!r} and {name!r} would share the plot folder {folder!r}; "
                            "rename one")
        folders[name] = folder
    return safe_names(collections)


def write_collection_plots(analysis: CollectionsAnalysis, directory: str | Path) -> list[Path]:
    """One PNG per collection and analysed metric, ``<directory>/<collection>/<metric>.png``
    (module docstring; both names made safe), in the table's order: collection by collection."""
    folders = collection_folders(analysis.collections)
    return [plot_metric(a, m, Path(directory) / folders[name] / file, collection=name)
            for name, a in analysis.analyses.items() for m, file in metric_files(a.metrics).items()]
