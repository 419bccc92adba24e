"""harness.present.panels: a grid placed by measured margins, drawn by matplotlib's Agg canvas, keeps
every panel's decorations (tick labels, axis labels, titles) and the legend inside the figure and
apart from each other, whatever the labels' lengths."""

from __future__ import annotations

import itertools

import pytest

from harness.present import panels


def _grid(rows: int, cols: int, label: str, *, legend: bool, shared: bool = False):
    fig = panels.figure(3.2 * cols + 0.6, 2.5 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=shared, sharey=shared)
    for k, ax in enumerate(axes.flat):
        ax.plot([0.0, 1000.0], [0.001, 0.0375 * (k + 1)], label="mean over seeds")
        ax.plot([0.0, 1000.0], [0.02, 0.01], label=f"{label} (mean)")
        panels.title(ax, f"{label} {k}", 10)
        ax.set_yticks([0.0, 0.01, 0.02], [label, "b", "c"] if k % cols == 0 else ["", "", ""])
        ax.set_xlabel("difference to the baseline", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel("dev MAP", fontsize=8)
        ax.tick_params(labelsize=8)
    axes.flat[-1].set_visible(False)
    panels.place(fig, axes, panels.legend_above(fig, axes) if legend else None)
    return fig, axes


@pytest.mark.parametrize(("rows", "cols", "label", "legend", "shared"), [
    (1, 3, "curriculum", False, False),
    (2, 3, "a-much-longer-configuration-name", False, False),
    (2, 4, "baseline", True, True),
])
def test_decorations_stay_inside_the_figure_and_apart(rows, cols, label, legend, shared):
    fig, axes = _grid(rows, cols, label, legend=legend, shared=shared)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    boxes = [ax.get_tightbbox(renderer) for ax in axes.flat if ax.get_visible()]
    if legend:
        boxes.append(fig.legends[0].get_window_extent(renderer))
    for box in boxes:  # inside the figure, to the pixel
        assert box.x0 >= page.x0 - 1 and box.y0 >= page.y0 - 1
        assert box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1
    for a, b in itertools.combinations(boxes, 2):  # no two overlap
        assert not a.overlaps(b), (a, b)


def test_the_panels_fill_the_figure():
    """The margins are the decorations' and a few points, not matplotlib's defaults."""
    fig, _ = _grid(1, 3, "curriculum", legend=False)
    params = fig.subplotpars
    assert params.left < 0.12 and params.right > 0.97 and params.top > 0.85
