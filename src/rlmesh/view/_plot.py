"""The page's line plots as SVG text, drawn in Python (unit-testable, no browser needed).

:func:`line_plot_svg` draws series against the step with both axes (tick labels at the
ends, a zero line when zero is in range, the axis names) and a legend with one colour
swatch per series. The pump thread builds the reward and action plots at the page's
refresh rate (4 Hz) and ships them in the ``series`` document; the page only inserts
them. :func:`flatten_action` turns any action (a scalar, an array, a Dict/Tuple of them)
into the numbers the action plot shows, with a name per number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import numpy as np

__all__ = ["MAX_DIMS", "PALETTE", "flatten_action", "line_plot_svg"]

#: Series colours (the legend's swatches), in order.
PALETTE = ("#5fa8f5", "#f5a65f", "#7bd86b", "#e06bd8", "#e5d65a", "#6be0d8", "#d86b6b", "#b0b0b0")
#: Action dimensions plotted at most.
MAX_DIMS = len(PALETTE)

_W, _H = 240, 120
_LEFT, _RIGHT, _BOTTOM = 36, 6, 16
_LEGEND_ROW = 11
_PER_ROW = 4


def _tick(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-2:
        return f"{x:.1e}"
    return f"{x:.3g}"


def flatten_action(action: Any, limit: int = MAX_DIMS) -> tuple[list[float], list[str]]:
    """The first ``limit`` numbers of an action and their names (``a[0]``, ``arm[1]``, ``grip``).

    >>> flatten_action({"arm": [0.5, -1.0], "grip": 1})
    ([0.5, -1.0, 1.0], ['arm[0]', 'arm[1]', 'grip'])
    >>> flatten_action(2)
    ([2.0], ['a'])
    """
    values: list[float] = []
    names: list[str] = []

    def leaf(value: Any, name: str) -> None:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
        if arr.size == 1 and np.ndim(value) == 0:
            values.append(float(arr[0]))
            names.append(name)
            return
        for i, x in enumerate(arr[: max(0, limit - len(values))].tolist()):
            values.append(float(x))
            names.append(f"{name}[{i}]")

    def walk(value: Any, name: str) -> None:
        if len(values) >= limit:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k) if not name or name == "a" else f"{name}.{k}")
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                walk(v, f"{name}.{i}" if name != "a" else str(i))
        else:
            leaf(value, name)

    walk(action, "a")
    return values[:limit], names[:limit]


def line_plot_svg(
    series: Sequence[Sequence[float]],
    names: Sequence[str],
    *,
    x0: int = 0,
    x_label: str = "step",
    y_label: str = "",
    title: str = "",
) -> str:
    """An ``<svg>`` plot of ``series`` (equal lengths) against steps ``x0, x0 + 1, ...``.

    Axes: a y axis with the range's ends (and 0 when inside) as tick labels, an x axis
    with the first and last step; the legend names each series beside its colour.
    Non-finite values are left out of the range and drawn as gaps.

    >>> svg = line_plot_svg([[0.0, 1.0, 0.5]], ["reward"], x0=10)
    >>> 'class="legend"' in svg and ">reward<" in svg and ">12<" in svg
    True
    """
    names = [str(n) for n in names][: len(PALETTE)]
    series = [list(s) for s in series][: len(names)]
    rows = max(1, math.ceil(len(names) / _PER_ROW))
    top = rows * _LEGEND_ROW + 4
    x1, y1 = _W - _RIGHT, _H - _BOTTOM  # plot area: [_LEFT, x1] x [top, y1]
    label = escape(title or y_label or ", ".join(names), quote=True)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" role="img" aria-label="{label}" '
        'font-family="ui-monospace, monospace" font-size="8">'
    ]
    # legend
    out.append('<g class="legend">')
    for i, name in enumerate(names):
        lx = 4 + (i % _PER_ROW) * ((_W - 8) // _PER_ROW)
        ly = 2 + (i // _PER_ROW) * _LEGEND_ROW
        out.append(f'<rect x="{lx}" y="{ly + 2}" width="8" height="4" fill="{PALETTE[i]}"/>')
        out.append(f'<text x="{lx + 11}" y="{ly + 7}" fill="#c8d0d8">{escape(name)}</text>')
    out.append("</g>")
    finite = [v for s in series for v in s if isinstance(v, (int, float)) and math.isfinite(v)]
    n = max((len(s) for s in series), default=0)
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    span = hi - lo

    def sy(v: float) -> float:
        return y1 - (v - lo) / span * (y1 - top)

    # axes
    out.append('<g class="axes" stroke="#6b7580" stroke-width="0.8">')
    out.append(f'<line x1="{_LEFT}" y1="{top}" x2="{_LEFT}" y2="{y1}"/>')
    out.append(f'<line x1="{_LEFT}" y1="{y1}" x2="{x1}" y2="{y1}"/>')
    if lo < 0 < hi:
        out.append(
            f'<line x1="{_LEFT}" y1="{sy(0):.1f}" x2="{x1}" y2="{sy(0):.1f}" stroke-dasharray="2,2"/>'
        )
    out.append("</g>")
    out.append('<g class="ticks" fill="#9aa5b1">')
    ticks = [hi, lo] + ([0.0] if lo < 0 < hi else [])
    for v in ticks:
        out.append(f'<text x="{_LEFT - 3}" y="{sy(v) + 3:.1f}" text-anchor="end">{_tick(v)}</text>')
    if n:
        out.append(f'<text x="{_LEFT}" y="{_H - 5}" text-anchor="start">{x0}</text>')
        out.append(f'<text x="{x1}" y="{_H - 5}" text-anchor="end">{x0 + n - 1}</text>')
    out.append(
        f'<text x="{(_LEFT + x1) / 2:.0f}" y="{_H - 5}" text-anchor="middle">{escape(x_label)}</text>'
    )
    if y_label:
        out.append(
            f'<text x="8" y="{(top + y1) / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 8 {(top + y1) / 2:.0f})">{escape(y_label)}</text>'
        )
    if not n:
        out.append(
            f'<text x="{(_LEFT + x1) / 2:.0f}" y="{(top + y1) / 2:.0f}" text-anchor="middle">no data yet</text>'
        )
    out.append("</g>")
    # lines
    step = (x1 - _LEFT) / max(1, n - 1)
    for i, s in enumerate(series):
        pts: list[str] = []
        runs: list[str] = []
        for j, v in enumerate(s):
            if isinstance(v, (int, float)) and math.isfinite(v):
                pts.append(f"{_LEFT + j * step:.1f},{sy(v):.1f}")
            elif pts:
                runs.append(" ".join(pts))
                pts = []
        if pts:
            runs.append(" ".join(pts))
        for run in runs:
            if " " not in run:  # a single point: a dot
                cx, cy = run.split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="1.2" fill="{PALETTE[i]}"/>')
            else:
                out.append(
                    f'<polyline fill="none" stroke="{PALETTE[i]}" stroke-width="1.3" points="{run}"/>'
                )
    out.append("</svg>")
    return "".join(out)
