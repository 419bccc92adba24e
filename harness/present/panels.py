"""A grid of panels on an Agg figure, placed by margins measured from the panels' own text.

matplotlib's constrained layout places panels by drawing the whole figure once without rendering
and measuring every artist; saving the PNG then draws it again, so a report figure is drawn twice.
The report's figures are regular grids whose decorations are known: a title above each panel,
tick labels and an x label below it, tick labels and a y label left of it, and at most one legend
above the grid. ``place`` measures those texts alone (their sizes, not a draw) and sets the
figure's subplot parameters, so the figure is drawn once, when it is saved. The panels, axes,
labels and colours are those a constrained layout shows; only the spacing is computed here.

    fig = figure(8.0, 3.0)
    axes = fig.subplots(1, 2, squeeze=False)
    ...                                  # draw, title and label the panels
    place(fig, axes, legend_above(fig, axes))
    png(fig)
"""

from __future__ import annotations

import io
from typing import Any

from harness.errors import HarnessError

PAD = 3.0  # points: around each panel's decorations and inside the figure's edge
SPACE = 0.02  # of the figure's width (height), shared out between its columns (rows)
COLUMNS_MAX = 5  # legend entries per row above the grid


def figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` of ``width`` x ``height`` inches on an Agg canvas, no layout engine
    (``place`` sets its margins)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise HarnessError("the study report needs matplotlib: pip install 'matplotlib>=3.8'") from None
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def literal(text: str) -> str:
    """``text`` as matplotlib draws it as written: an even number of ``$`` makes a text mathtext,
    where a name ``a$_$b`` fails to draw and ``$5 to $10`` is drawn in italics without its dollars;
    ``\\$`` is a literal dollar. Every name a figure shows (configurations, collections, metrics)
    passes through here."""
    return text.replace("$", r"\$")


def title(ax: Any, text: str, size: float) -> None:
    """The panel's title at its top edge, ``text`` drawn as written (``literal``): placed, not
    searched for (no tick labels are above a panel, so matplotlib's search for them finds nothing
    and costs a measure of every tick)."""
    ax.set_title(literal(text), fontsize=size, y=1.0)


def legend_above(fig: Any, axes: Any) -> Any:
    """One legend above the panels, every labelled line once in the order first drawn; None when
    nothing is labelled."""
    entries: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return None
    return fig.legend(list(entries.values()), list(entries), loc="upper center",
                      bbox_to_anchor=(0.5, 1.0), ncols=min(len(entries), COLUMNS_MAX), fontsize=8,
                      frameon=False)


def place(fig: Any, axes: Any, legend: Any = None) -> None:
    """Set ``fig``'s subplot parameters so that the grid ``axes`` (rows x columns, as
    ``Figure.subplots(squeeze=False)`` returns it) and its decorations fit the figure below
    ``legend`` (from ``legend_above``): PAD points around each panel's decorations, and SPACE of
    the figure more between panels (a constrained layout's defaults). The tick labels depend on
    the panels' size, so where the placed panels tick elsewhere they are measured again."""
    for _ in range(2):
        ticked = _ticks(axes)
        _adjust(fig, axes, legend)
        if _ticks(axes) == ticked:
            return


def png(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (drawn once, here)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _adjust(fig: Any, axes: Any, legend: Any) -> None:
    renderer = fig.canvas.get_renderer()
    per_point = fig.dpi / 72.0
    rows, cols = axes.shape
    left, right = [0.0] * cols, [0.0] * cols
    top, bottom = [0.0] * rows, [0.0] * rows
    for (r, c), ax in _visible(axes):
        sides = _decorations(ax, renderer, per_point)
        left[c], right[c] = max(left[c], sides[0]), max(right[c], sides[1])
        bottom[r], top[r] = max(bottom[r], sides[2]), max(top[r], sides[3])
    width, height = (float(v) * 72.0 for v in fig.get_size_inches())
    above = 0.0
    if legend is not None:
        above = legend.get_window_extent(renderer).height / per_point + PAD
    x0, x1 = PAD + left[0] + PAD, width - PAD - right[-1] - PAD
    y1, y0 = height - PAD - above - top[0] - PAD, PAD + bottom[-1] + PAD
    gap_x = max((right[c - 1] + left[c] + 2 * PAD + SPACE * width / (cols - 1) for c in range(1, cols)),
                default=0.0)
    gap_y = max((bottom[r - 1] + top[r] + 2 * PAD + SPACE * height / (rows - 1) for r in range(1, rows)),
                default=0.0)
    panel_w = (x1 - x0 - gap_x * (cols - 1)) / cols
    panel_h = (y1 - y0 - gap_y * (rows - 1)) / rows
    if panel_w <= 0 or panel_h <= 0:
        return  # decorations larger than the figure: leave matplotlib's defaults
    fig.subplots_adjust(left=x0 / width, right=x1 / width, bottom=y0 / height, top=y1 / height,
                        wspace=gap_x / panel_w, hspace=gap_y / panel_h)


def _ticks(axes: Any) -> list[tuple[float, ...]]:
    """Where every visible panel's major ticks are (what its tick labels say follows from it)."""
    return [tuple(axis.get_majorticklocs()) for _, ax in _visible(axes) for axis in (ax.xaxis, ax.yaxis)]


def _visible(axes: Any) -> list[tuple[tuple[int, int], Any]]:
    rows, cols = axes.shape
    return [((r, c), axes[r, c]) for r in range(rows) for c in range(cols) if axes[r, c].get_visible()]


def _decorations(ax: Any, renderer: Any, per_point: float) -> tuple[float, float, float, float]:
    """How far (points) a panel's decorations reach beyond it: left, right, below, above."""
    xs = _tick_labels(ax.xaxis, renderer, per_point)
    ys = _tick_labels(ax.yaxis, renderer, per_point)
    # A tick label centred on a tick near a side reaches past it by what is left of its half width.
    span = ax.get_position().width * float(ax.figure.get_size_inches()[0]) * 72.0
    right = max((w / 2 - (1 - f) * span for f, w, _ in xs), default=0.0)
    overhang = max((w / 2 - f * span for f, w, _ in xs), default=0.0)
    # Tick marks reach out of the panel by their length, tick labels start their pad beyond.
    left = ax.yaxis.get_tick_padding() + (_label_pad(ax.yaxis) + max(w for _, w, _ in ys) if ys else 0.0)
    left = max(left, overhang)
    if ax.yaxis.label.get_text():
        left += ax.yaxis.labelpad + ax.yaxis.label.get_window_extent(renderer).width / per_point
    below = ax.xaxis.get_tick_padding() + (_label_pad(ax.xaxis) + max(h for _, _, h in xs) if xs else 0.0)
    if ax.xaxis.label.get_text():
        below += ax.xaxis.labelpad + ax.xaxis.label.get_window_extent(renderer).height / per_point
    above = 0.0
    if ax.title.get_text():
        # The title's baseline sits its pad above the panel; the text rises by its height less
        # its descent.
        pad = ax.title.get_transform().transform((0.5, 1.0))[1] - ax.transAxes.transform((0.5, 1.0))[1]
        height = ax.title.get_window_extent(renderer).height
        descent = renderer.get_text_width_height_descent("lp", ax.title.get_fontproperties(), ismath=False)[2]
        above = float(pad + height - descent) / per_point
    return max(left, 0.0), max(right, 0.0), below, above


def _label_pad(axis: Any) -> float:
    """Points between a tick mark's end and its label."""
    return float(axis.majorTicks[0].get_pad())


def _tick_labels(axis: Any, renderer: Any, per_point: float) -> list[tuple[float, float, float]]:
    """(position along the axis as a fraction of it, width, height in points) of each major tick
    label the axis will draw: those with text, inside its view, horizontal. The texts are the
    axis formatter's for its locator's ticks, as the draw makes them, measured with the labels'
    font, without making a tick per label (the draw makes them)."""
    from matplotlib import cbook

    label = axis.majorTicks[0].label1  # the first tick: the labels' font and visibility
    if not label.get_visible():  # labels hidden (a shared axis's inner panels)
        return []
    locs = axis.get_majorticklocs()
    texts = axis.get_major_formatter().format_ticks(locs)
    prop = label.get_fontproperties()
    # A line of text is at least as tall as "lp", as matplotlib lays out a label.
    _, line, _ = renderer.get_text_width_height_descent("lp", prop, ismath=False)
    scale = axis.get_transform()
    lo, hi = sorted(axis.get_view_interval())
    t_lo, t_hi = (float(v) for v in scale.transform([lo, hi]))
    slack = 1e-9 * (hi - lo)
    out = []
    for loc, text in zip(locs, texts, strict=True):
        if not text or not lo - slack <= loc <= hi + slack:
            continue
        frac = (float(scale.transform([loc])[0]) - t_lo) / (t_hi - t_lo) if t_hi > t_lo else 0.5
        # As matplotlib draws a tick label: mathtext only where its dollars pair up (``literal``).
        math = cbook.is_math_text(text)
        width, height, _ = renderer.get_text_width_height_descent(text if math else text.replace(r"\$", "$"),
                                                                  prop, ismath=math)
        out.append((frac, width / per_point, max(height, line) / per_point))
    return out
