"""The one "did you mean" of every message that refuses a name (config keys, registry names, study
keys, searchers, ir_datasets ids).

>>> did_you_mean("curriculum.delt", ["curriculum.delta", "train.steps"])
' (did you mean curriculum.delta?)'
>>> did_you_mean("x", ["curriculum.delta"], style="; ", otherwise="; valid: curriculum.delta")
'; valid: curriculum.delta'
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, valid: Iterable[str], *, n: int = 3, style: str = " (",
                 otherwise: str = "") -> str:
    """The close matches of ``name`` among ``valid`` as a hint to append to a message: `` (did you
    mean a, b?)`` with ``style=" ("``, ``; did you mean a, b?`` with ``style="; "``; ``otherwise``
    where nothing is close."""
    close = difflib.get_close_matches(str(name), list(valid), n=n)
    if not close:
        return otherwise
    text = f"did you mean {', '.join(close)}?"
    return f" ({text})" if style == " (" else f"{style}{text}"
