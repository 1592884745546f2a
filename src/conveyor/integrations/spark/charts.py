"""The report's charts, drawn by matplotlib as inline SVG (no pyplot state, no files).

Time axes show UTC dates and times; a series is drawn over every bucket of its window, so
an empty bucket is a zero on the line, never a straight line across the gap.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import UTC
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["bar_chart", "line_chart"]

PALETTE = ("#2563eb", "#dc2626", "#d97706", "#059669", "#7c3aed", "#0891b2")
_SIZE = (7.6, 2.8)  # inches: 760 x 280 px at 100 dpi


def _figure(title: str, unit: str) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=_SIZE, dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title, loc="left", fontsize=11, fontweight="bold")
    axes.set_ylabel(unit)
    axes.grid(axis="y", color="#e5e7eb")
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def _svg(figure: Figure) -> str:
    import matplotlib

    buffer = io.StringIO()
    # text stays text (searchable, small), not glyph outlines
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # inline: no XML declaration or doctype


def line_chart(
    title: str,
    times: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    unit: str,
) -> str:
    """One line per series over `times` (epoch seconds, one value per time)."""
    if not times or not any(any(v for v in values) for values in series.values()):
        return f'<p class="muted">{escape(title)}: no data.</p>'
    from matplotlib import dates

    figure, axes = _figure(title, unit)
    moments = [t / 86_400 for t in times]  # matplotlib's dates: days since its 1970 epoch
    for i, (name, values) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        axes.plot(moments, list(values), label=name, color=color, linewidth=1.6)
    locator = dates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left", fontsize=8, frameon=False)
    return _svg(figure)


def bar_chart(
    title: str, groups: Sequence[tuple[str, Mapping[str, float | None]]], *, unit: str
) -> str:
    """Grouped bars: for each group label, one bar per measure (e.g. p50/p95/p99)."""
    measures = list(dict.fromkeys(m for _, values in groups for m in values))
    if not any(v is not None for _, values in groups for v in values.values()):
        return f'<p class="muted">{escape(title)}: no data.</p>'
    figure, axes = _figure(title, unit)
    width = 0.8 / max(1, len(measures))
    for m, measure in enumerate(measures):
        xs = [g + (m - (len(measures) - 1) / 2) * width for g in range(len(groups))]
        heights = [values.get(measure) or 0.0 for _, values in groups]
        color = PALETTE[m % len(PALETTE)]
        axes.bar(xs, heights, width=width * 0.95, label=measure, color=color)
    axes.set_xticks(range(len(groups)), [label[:18] for label, _ in groups])
    axes.legend(loc="upper left", fontsize=8, frameon=False)
    return _svg(figure)
