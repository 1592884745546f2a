"""Small, dependency-free SVG charts for the HTML report (inline, self-contained)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

__all__ = ["bar_chart", "line_chart", "nice_step"]

PALETTE = ("#2563eb", "#dc2626", "#d97706", "#059669", "#7c3aed", "#0891b2")
_W, _H = 760, 280
_L, _R, _T, _B = 64, 16, 36, 48  # margins


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _frame(title: str, y_max: float, unit: str) -> tuple[list[str], float]:
    """The SVG head, title and y axis with grid lines; returns (parts, top of the axis)."""
    step = nice_step(y_max)
    top = step * max(1, math.ceil(y_max / step))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{_L}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    plot_h = _H - _T - _B
    value = 0.0
    while value <= top + step / 2:
        y = _T + plot_h - plot_h * value / top
        parts.append(
            f'<line x1="{_L}" x2="{_W - _R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{_L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(value)}</text>'
        )
        value += step
    parts.append(
        f'<text x="14" y="{_T + plot_h / 2:.0f}" transform="rotate(-90 14 {_T + plot_h / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    return parts, top


def _legend(names: Sequence[str]) -> str:
    items = []
    x = _L
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        items.append(
            f'<rect x="{x}" y="{_H - 16}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{_H - 7}">{escape(name)}</text>'
        )
        x += 24 + 7 * len(name)
    return "".join(items)


def line_chart(
    title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, unit: str
) -> str:
    """Lines of (epoch seconds, value) points, one per series name."""
    points = [p for values in series.values() for p in values]
    if not points:
        return f"<p>{escape(title)}: no data.</p>"
    x_min = min(p[0] for p in points)
    x_max = max(p[0] for p in points)
    parts, top = _frame(title, max(p[1] for p in points), unit)
    plot_w, plot_h = _W - _L - _R, _H - _T - _B
    span = max(x_max - x_min, 1.0)

    def sx(x: float) -> float:
        return _L + plot_w * (x - x_min) / span

    def sy(y: float) -> float:
        return _T + plot_h - plot_h * y / top

    for i in range(5):
        x = x_min + span * i / 4
        label = datetime.fromtimestamp(x, UTC).strftime(
            "%H:%M:%S" if span < 86_400 else "%m-%d %H:%M"
        )
        anchor = ("start", "middle", "middle", "middle", "end")[i]  # keep the ends inside
        parts.append(
            f'<text x="{sx(x):.1f}" y="{_H - _B + 16}" text-anchor="{anchor}">{label}</text>'
        )
    for i, (name, values) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(values))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}">'
            f"<title>{escape(name)}</title></polyline>"
        )
    parts.append(_legend(list(series)))
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    title: str, groups: Sequence[tuple[str, Mapping[str, float | None]]], *, unit: str
) -> str:
    """Grouped bars: for each group label, one bar per measure (e.g. p50/p95/p99)."""
    measures = list(dict.fromkeys(m for _, values in groups for m in values))
    numbers = [v for _, values in groups for v in values.values() if v is not None]
    if not groups or not numbers:
        return f"<p>{escape(title)}: no data.</p>"
    parts, top = _frame(title, max(numbers), unit)
    plot_w, plot_h = _W - _L - _R, _H - _T - _B
    slot = plot_w / len(groups)
    bar = min(28.0, slot * 0.8 / max(1, len(measures)))
    for g, (label, values) in enumerate(groups):
        left = _L + g * slot + (slot - bar * len(measures)) / 2
        for m, measure in enumerate(measures):
            value = values.get(measure)
            if value is None:
                continue
            height = plot_h * value / top
            parts.append(
                f'<rect x="{left + m * bar:.1f}" y="{_T + plot_h - height:.1f}" '
                f'width="{bar - 1:.1f}" height="{height:.1f}" fill="{PALETTE[m % len(PALETTE)]}">'
                f"<title>{escape(label)} {escape(measure)}: {_fmt(value)} {escape(unit)}</title>"
                "</rect>"
            )
        parts.append(
            f'<text x="{_L + g * slot + slot / 2:.1f}" y="{_H - _B + 16}" '
            f'text-anchor="middle">{escape(label[:18])}</text>'
        )
    parts.append(_legend(measures))
    parts.append("</svg>")
    return "".join(parts)
