"""The fixed column types of the Python API's DataFrames (a table's ``frame``, a power report's
``to_frame()``, a study's ``runs()``): a frame's dtypes depend on its kind, never on its rows, so a
one-seed study (no SD, no test), a table where nothing is significant (no marker) and a full study
give frames that round, filter and concatenate alike.

- ``FLOAT``: float64, NaN where missing (a one-seed study's SD, the baseline's difference);
- ``INT``: int64, never missing; ``NULLABLE_INT``: pandas' Int64, ``<NA>`` where a row has none (a
  family size on the baseline's row, the seeds a combined verdict is not over);
- ``BOOL``: bool;
- ``TEXT``: pandas' string dtype with NaN as its missing value (pandas 3's ``str``): a missing
  seed, direction or marker ``isna()``, and ``frame["marker"].str.contains("†")`` is False there, so
  it filters without ``na=False``. pandas before 2.3 has no such dtype: there text stays object.

pandas is imported when a frame is made, not with this module (``import harness`` stays light).
The modules that return frames annotate them ``pd.DataFrame`` with ``pd`` this module's
``lazy_pandas``, so ``typing.get_type_hints`` resolves their signatures (importing pandas then)::

    if TYPE_CHECKING:
        import pandas as pd
    else:
        from harness.present.frames import lazy_pandas as pd
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

FLOAT, INT, NULLABLE_INT, BOOL, TEXT = "float64", "int64", "Int64", "bool", "text"


class _LazyPandas:
    """The pandas module, imported at the first attribute read: a name an annotation can refer to
    at run time (``pd.DataFrame`` in a signature) without importing pandas with the module."""

    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)

    def __repr__(self) -> str:
        return "<pandas, imported on first use>"


lazy_pandas = _LazyPandas()


def typed_frame(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    """``rows`` as a DataFrame whose columns are ``schema``'s keys, each of its type (module
    docstring); a missing value (None, NaN) is the type's missing value.

    >>> frame = typed_frame([{"seed": None, "sd": None}], {"seed": TEXT, "sd": FLOAT})
    >>> [str(t) for t in frame.dtypes], bool(frame["seed"].isna().all())
    (['str', 'float64'], True)
    """
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(schema))
    text = text_dtype()
    return frame.astype({column: text if kind == TEXT else kind for column, kind in schema.items()})


def text_dtype() -> Any:
    """pandas' string dtype whose missing value is NaN (module docstring), or object before pandas 2.3."""
    import pandas as pd

    try:
        return pd.StringDtype(na_value=float("nan"))
    except TypeError:  # pandas < 2.3: no na_value; its "string" dtype's <NA> would not filter
        return object
