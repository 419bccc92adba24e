"""``harness pacing``: print or plot pacing functions (Penha & Hauff 2020, Table 3 and Figure 2).

    harness pacing root_10 geom_progression --delta 0.33 --T 1000 --at 125 800
    harness pacing linear root_2 root_10 geom_progression step --plot pacing.png

``root_N`` names set n (root_10 is root_n with n = 10); other names use ``--n``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from harness.curriculum.pacing import PACING, parse_pacing_name
from harness.errors import ConfigError, HarnessError

DEFAULT_POINTS = 10  # default --at: 0, T/10, ..., T


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "pacing", help="show the fraction of the sorted training set each pacing function makes "
        "available per step",
        description="Print (or plot, as the paper's Figure 2) the fraction of the difficulty-sorted "
        f"training set available at each step. Functions: {', '.join(PACING.names())}; "
        "root_N (e.g. root_10) is root_n with n=N.")
    p.add_argument("functions", nargs="+", metavar="FN", help="pacing function names")
    p.add_argument("--delta", type=float, default=0.33, help="initial fraction f(0) (default 0.33)")
    p.add_argument("--T", type=float, default=1000.0, dest="T",
                   help="step at which all data is available (default 1000)")
    p.add_argument("--n", type=float, default=2.0, help="n of root_n (default 2)")
    p.add_argument("--at", type=float, nargs="+", metavar="STEP",
                   help="steps to print (default: 0, T/10, ..., T)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the curves into this file instead (.png, .pdf or .svg)")
    p.set_defaults(func=run)


def _curves(names: list[str], n_default: float) -> list[tuple[str, str, float]]:
    """(label, registered name, n) per requested function; refuses unknown names."""
    out = []
    for label in names:
        name, n = parse_pacing_name(label)
        out.append((label, name, n_default if n is None else n))
    return out


def _fmt_step(s: float) -> str:
    """A step as printed: a whole number as an int up to 10^15 (past it, 1e+308 rather than its 309
    digits), else its shortest %g form."""
    return str(int(s)) if float(s).is_integer() and abs(s) < 1e15 else f"{s:g}"


# The formats --plot writes, by the file's suffix (matplotlib's names).
PLOT_FORMATS = ("png", "pdf", "svg")


def run(args: argparse.Namespace) -> int:
    for option, value in (("--delta", args.delta), ("--T", args.T), ("--n", args.n)):
        if not math.isfinite(value):  # inf * 0 made the first step NaN: a traceback in the loop
            raise ConfigError(f"{option} must be a finite number, got {value}")
    # Only the steps at fault: "got -1 1e+300" for --at -1 1e300 blamed the good one too.
    if bad := [s for s in (args.at or ()) if not (math.isfinite(s) and s >= 0)]:
        more = f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""
        raise ConfigError(f"--at steps must be finite numbers >= 0, got {' '.join(map(_fmt_step, bad[:8]))}{more}")
    curves = _curves(args.functions, args.n)
    delta, T = args.delta, args.T
    PACING.get(curves[0][1])(0, delta=delta, T=T, n=curves[0][2])  # validates delta and T once
    if args.plot is not None:
        suffix = args.plot.rpartition(".")[2].lower() if "." in args.plot else ""
        if suffix not in PLOT_FORMATS:  # a .pdf got PNG bytes, and --plot "" printed the table
            raise ConfigError(f"--plot {args.plot!r}: name a file ending in {', '.join('.' + f for f in PLOT_FORMATS)}")
        _plot(curves, delta, T, args.plot, suffix)
        print(f"wrote {args.plot}")
        return 0
    # T times a fraction: T * i overflowed to inf for T near the float's maximum (1e308)
    steps = args.at if args.at else [T * (i / DEFAULT_POINTS) for i in range(DEFAULT_POINTS + 1)]
    width = max(len("step"), *(len(_fmt_step(s)) for s in steps))
    cols = [max(len(label), 6) for label, _, _ in curves]
    print("  ".join(["step".rjust(width)] + [label.rjust(c) for (label, _, _), c in zip(curves, cols)]))
    for s in steps:
        values = [PACING.get(name)(s, delta=delta, T=T, n=n) for _, name, n in curves]
        print("  ".join([_fmt_step(s).rjust(width)]
                        + [f"{v:.4f}".rjust(c) for v, c in zip(values, cols)]))
    return 0


def _plot(curves: list[tuple[str, str, float]], delta: float, T: float, path: str, fmt: str) -> None:
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise HarnessError("plotting needs matplotlib; install it with `pip install matplotlib`") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [T * (1.1 * i / 500) for i in range(501)]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, name, n in curves:
        fn = PACING.get(name)
        ax.plot(xs, [fn(x, delta=delta, T=T, n=n) for x in xs], label=label)
    ax.axvline(T, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("training step s")
    ax.set_ylabel("fraction of training data available")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Pacing functions (delta = {delta:g}, T = {_fmt_step(T)})")
    ax.legend()
    fig.tight_layout()
    import io

    from harness.textfile import write_atomic

    out = io.BytesIO()
    try:
        fig.savefig(out, format=fmt)
    finally:
        plt.close(fig)
    write_atomic(path, out.getvalue(), "plot")  # whole or not at all; errors in one line
