"""Reading a trainer checkpoint (``trainer.pt``: ``harness train --resume``, a retried trial,
``harness export``) without running anything in it.

A checkpoint is a pickle, and a pickle may name any callable to run as it loads; a checkpoint
can come from someone else's storage or a shared file system. So it is read with
``torch.load(weights_only=True)``, which rebuilds only tensors, dicts, lists, tuples, numbers,
strings and None: all that ``harness.training.loop.Trainer`` writes (the model's, the optimizer's
and the scheduler's state dicts, the step counters, the best-dev metrics and run, the curve, the
configuration id and the seed). A file holding anything else is refused in one line.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from harness.errors import HarnessError


def read_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The state dict in the checkpoint file ``path`` (module docstring), its tensors on
    ``map_location``; a ``HarnessError`` naming the file where it is missing, unreadable or holds
    more than plain data."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"{path}: no checkpoint there")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        why = next((ln.strip() for ln in str(exc).splitlines() if "WeightsUnpickler error" in ln), "")
        raise HarnessError(f"{path}: refused: not a checkpoint of plain tensors and values (what the "
                           f"harness writes); loading it could run code{f' ({why})' if why else ''}") from None
    except EOFError:
        raise HarnessError(f"{path}: not a readable checkpoint (it ends early: cut short or empty)") from None
    except (RuntimeError, OSError, ValueError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise HarnessError(f"{path}: not a readable checkpoint ({why})") from None
    if not isinstance(state, dict):
        raise HarnessError(f"{path}: not a harness checkpoint (a {type(state).__name__}, not a mapping)")
    return state
