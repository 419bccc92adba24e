"""harness: hyperparameter studies for neural rankers (Ray Tune trials, Optuna searchers, seeded
baselines, MLflow records, paired significance tests).

The packages, bottom to top (each imports only those before it; nothing imports ``harness.cli``):
``records`` and the ground floor (``errors``, ``registry``, ``suggest``, ``heap``); ``curriculum``,
``losses`` and ``tracking`` (MLflow records); ``metrics``; ``results``; ``stats``; ``present``;
``analysis``; ``data``; ``config`` (``TrialConfig``); ``model``; ``training``; ``study`` (a study
as data); ``driver`` (the Ray runtime); ``jobs``; ``cli``. Each package's ``__all__`` is its
public face; modules named ``_x`` are internal to their package.

From Python, a study's analysis in one call (harness.analysis; docs/python-api.md):
``harness.load_study(name)`` (its MLflow experiment) or ``harness.compare(path_or_dataframe)`` (a
long results table) give a ``StudyAnalysis``; its ``.table()`` is a ``SignificanceTable`` (a
DataFrame as ``.frame``; ``to_markdown``, ``to_latex``, ``to_html``, ``to_csv``), its ``.power()``
a ``PowerReport``, its ``.runs()`` a DataFrame. A study over several collections gives a
``CollectionsStudy`` instead, whose ``.table()`` is a ``CollectionsSignificanceTable``. Bad input raises a ``HarnessError``; an unknown
name an ``UnknownName``. The names are resolved on first use, so ``import harness`` imports no
MLflow, torch or Ray; ``dir(harness)`` is ``__all__``.
"""

from harness._face import face as _face

__version__ = "0.1.0"

__all__ = [
    "CollectionsSignificanceTable",
    "CollectionsStudy",
    "ConfigError",
    "DataError",
    "HarnessError",
    "PowerReport",
    "SignificanceTable",
    "StudyAnalysis",
    "TrialConfig",
    "UnknownName",
    "__version__",
    "compare",
    "load_study",
]

__getattr__, _ = _face(__name__, {
    "CollectionsSignificanceTable": "present.collections_significance",
    "CollectionsStudy": "analysis",
    "ConfigError": "errors",
    "DataError": "errors",
    "HarnessError": "errors",
    "PowerReport": "present.power_text",
    "SignificanceTable": "present.significance_table",
    "StudyAnalysis": "analysis",
    "TrialConfig": "config",
    "UnknownName": "errors",
    "compare": "analysis",
    "load_study": "analysis",
})


def __dir__() -> list[str]:
    """The public API only (not the helpers and submodules this module's namespace also holds)."""
    return sorted(__all__)
