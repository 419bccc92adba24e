"""System metrics (CPU, memory, disk, network; GPU where available) sampled into one MLflow run.

A thin wrapper over MLflow's own ``mlflow.system_metrics.system_metrics_monitor.SystemMetricsMonitor``
(a daemon thread that samples every ``interval_s`` seconds and logs ``system/*`` metrics, e.g.
``system/cpu_utilization_percentage``, ``system/system_memory_usage_megabytes`` and, with
nvidia-ml-py and an NVIDIA GPU, ``system/gpu_0_utilization_percentage``), bound to an explicit run id
and tracking URI so the study driver can point it at the study run without a global active run.

It never fails a study: if psutil (needed by MLflow's CPU monitor) is missing, or the monitor cannot
start, it logs one line and does nothing. MLflow's monitor stops by itself once the run is no longer
RUNNING (the study writer ends the study run last), and ``stop()`` flushes what was sampled,
the last partial window included::

    with SystemMetrics(study_run, uri, progress=log):
        ...  # the study
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

DEFAULT_INTERVAL_S = 10.0


class SystemMetrics:
    """Context manager that samples system metrics into ``run_id`` every ``interval_s`` seconds."""

    def __init__(self, run_id: str, tracking_uri: str, *, interval_s: float = DEFAULT_INTERVAL_S,
                 progress: Callable[[str], None] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self.interval_s = interval_s
        self.progress = progress or _stderr
        self._monitor: Any = None

    @property
    def active(self) -> bool:
        return self._monitor is not None

    def start(self) -> Self:
        if self._monitor is not None:
            return self
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError as exc:
            self.progress(f"system metrics: off ({exc}; pip install psutil)")
            return self
        quiet = logging.getLogger("mlflow.system_metrics")
        if quiet.level == logging.NOTSET:  # our one line replaces MLflow's four INFO lines; warnings stay
            quiet.setLevel(logging.WARNING)
        try:
            # resume_logging: a resumed study continues the system/* step axis instead of restarting it.
            monitor = SystemMetricsMonitor(self.run_id, sampling_interval=self.interval_s,
                                           resume_logging=True, tracking_uri=self.tracking_uri)
            monitor.start()
        except Exception as exc:  # noqa: BLE001 -- a monitoring failure must never cost the study
            self.progress(f"system metrics: off ({_brief(exc)})")
            return self
        self._monitor = monitor
        kinds = {type(m).__name__ for m in monitor.monitors}
        if kinds & {"GPUMonitor", "ROCMMonitor"}:
            gpu = "GPU included"
        elif importlib.util.find_spec("pynvml") is None:
            gpu = "no GPU metrics (pip install nvidia-ml-py for NVIDIA GPUs)"
        else:
            gpu = "no GPU metrics (no GPU visible to NVML)"
        self.progress(f"system metrics: every {monitor.sampling_interval:g}s to run {self.run_id}; {gpu}")
        return self

    def stop(self) -> None:
        """Stop sampling and flush what was sampled; safe to call twice and after the run ended."""
        monitor, self._monitor = self._monitor, None
        if monitor is None:
            return
        try:
            monitor.finish()
            # MLflow publishes a window only after a full interval; the samples of the last, partial
            # window (all of them, for a study shorter than one interval) would be dropped.
            if any(m.metrics for m in monitor.monitors):
                monitor.publish_metrics(monitor.aggregate_metrics())
                monitor.mlflow_logger.flush()
        except Exception as exc:  # noqa: BLE001 -- nor may its shutdown
            self.progress(f"system metrics: stop failed ({_brief(exc)})")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _brief(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}"


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
