"""The machine a benchmark ran on, recorded beside its results."""

from __future__ import annotations

import importlib
import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def in_words() -> str:
    """The machine as a results file's header says it: CPU model, cores and Python."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def describe(*packages: str) -> dict[str, Any]:
    """CPU model, cores, Python, the versions of ``packages`` and the GPU (torch's view), if any."""
    info: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                            "platform": platform.platform()}
    for name in packages:
        info[name] = importlib.import_module(name).__version__
    import torch

    info["torch_threads"] = torch.get_num_threads()
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else False
    return info
