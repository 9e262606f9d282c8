"""The geometry of the console's line charts: memories over time and a playground query's score curve.

Pure functions from numbers to coordinates in an SVG's user space; ``templates/_pictures.html`` draws them,
so every label reaches the page through the template's autoescaping, and nothing here writes markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from proxy.core.inspection import Timeline

__all__ = [
    "Chart",
    "CutLine",
    "Dot",
    "Line",
    "Scale",
    "Tick",
    "nice_ticks",
    "score_curve",
    "timeline_chart",
]

WIDTH, HEIGHT = 720, 260
# Room for the y axis' labels on the left and the x axis' below.
# RIGHT leaves room for half of the last x tick's label (a date is ~60 units wide), centred on the last point.
LEFT, RIGHT, TOP, BOTTOM = 60, 40, 14, 44
SERIES_CLASSES = 6  # console.css colours series s0 … s5


@dataclass(frozen=True)
class Scale:
    """A linear map from a domain (data) to a range (user-space coordinates)."""

    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, value: float) -> float:
        if self.d1 == self.d0:
            return (self.r0 + self.r1) / 2
        return self.r0 + (value - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round values (steps of 1, 2 or 5 times a power of ten) that cover ``lo``…``hi``;
    the first is at or below ``lo`` and the last at or above ``hi``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("ticks need finite bounds")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    # The round step nearest the raw one (on a log scale), so the count stays near ``count``.
    error = raw / magnitude
    factor = (
        10 if error >= math.sqrt(50) else 5 if error >= math.sqrt(10) else 2 if error >= math.sqrt(2) else 1
    )
    step = factor * magnitude
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    n = 0
    while True:
        value = first + n * step
        ticks.append(round(value, 12))
        if value >= hi - 1e-9 * step:
            return ticks
        n += 1


@dataclass(frozen=True)
class Tick:
    at: float  # the coordinate along its axis
    label: str


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    title: str  # the tooltip
    css: str = ""


@dataclass(frozen=True)
class Line:
    """One series: its legend name, its colour class and its vertices."""

    name: str
    css: str
    dots: list[Dot]

    @property
    def points(self) -> str:
        return " ".join(f"{d.x:.1f},{d.y:.1f}" for d in self.dots)


@dataclass(frozen=True)
class CutLine:
    """A horizontal rule at ``value`` (a ``min_score`` or a relevance threshold) and what it is."""

    y: float
    value: float
    label: str


@dataclass(frozen=True)
class Chart:
    x_label: str
    y_label: str
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    lines: list[Line]
    cut: CutLine | None = None
    width: int = WIDTH
    height: int = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    top: float = TOP
    bottom: float = HEIGHT - BOTTOM
    notes: list[str] = field(default_factory=list)


def _number(value: float) -> str:
    return f"{value:g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.1e}"


def _time_format(interval_ms: int) -> str:
    if interval_ms >= 24 * 3_600_000:
        return "%Y-%m-%d"
    if interval_ms >= 60_000:
        return "%m-%d %H:%M"
    return "%H:%M:%S"


def _interval_name(interval_ms: int) -> str:
    for unit, ms in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if interval_ms % ms == 0:
            n = interval_ms // ms
            return f"{unit}" if n == 1 else f"{n} {unit}s"
    return f"{interval_ms} ms"


def timeline_chart(timeline: Timeline, *, max_x_ticks: int = 6) -> Chart:
    """One line per series over the buckets' starts; the y axis counts from 0."""
    n = len(timeline.starts)
    x = Scale(0, max(n - 1, 1), LEFT, WIDTH - RIGHT) if n > 1 else Scale(0, 0, LEFT, WIDTH - RIGHT)
    top_count = max((c for s in timeline.series for c in s.counts), default=0)
    ticks = nice_ticks(0, max(top_count, 1), 5)
    y = Scale(0, ticks[-1], HEIGHT - BOTTOM, TOP)
    fmt = _time_format(timeline.interval_ms)

    def when(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(fmt)

    every = max(1, math.ceil(n / max_x_ticks))
    x_ticks = [Tick(x(i), when(timeline.starts[i])) for i in range(0, n, every)]
    lines = [
        Line(
            name=s.name,
            css=f"s{k % SERIES_CLASSES}",
            dots=[
                Dot(
                    x(i),
                    y(c),
                    f"{s.name}: {c} created in the {_interval_name(timeline.interval_ms)} "
                    f"from {when(timeline.starts[i])} UTC",
                )
                for i, c in enumerate(s.counts)
            ],
        )
        for k, s in enumerate(timeline.series)
    ]
    return Chart(
        x_label=f"created_time (UTC), one point per {_interval_name(timeline.interval_ms)}",
        y_label="memories created",
        x_ticks=x_ticks,
        y_ticks=[Tick(y(v), _number(v)) for v in ticks],
        lines=lines,
    )


def score_curve(
    scores: Sequence[float], cut: float | None = None, cut_name: str = "min_score", y_label: str = "score"
) -> Chart:
    """The hits' scores by rank (1 = best), and a rule where ``cut`` lies; hits below it are drawn as cut.
    The y axis spans the scores and the cut, so the rule is always inside the plot."""
    values = [float(s) for s in scores]
    lo = min([*values, *([cut] if cut is not None else [])], default=0.0)
    hi = max([*values, *([cut] if cut is not None else [])], default=1.0)
    ticks = nice_ticks(lo, hi, 5)
    y = Scale(ticks[0], ticks[-1], HEIGHT - BOTTOM, TOP)
    n = len(values)
    x = Scale(1, n, LEFT + 12, WIDTH - RIGHT - 12) if n > 1 else Scale(1, 1, LEFT, WIDTH - RIGHT)
    dots = [
        Dot(
            x(rank),
            y(score),
            f"rank {rank}: {y_label} {score:.6f}",
            css="cut" if cut is not None and score < cut else "kept",
        )
        for rank, score in enumerate(values, 1)
    ]
    every = max(1, math.ceil(n / 10))
    x_ticks = [Tick(x(r), str(r)) for r in range(1, n + 1, every)]
    line = CutLine(y(cut), cut, f"{cut_name} {_number(cut)}") if cut is not None else None
    notes = []
    if cut is not None:
        below = sum(1 for d in dots if d.css == "cut")
        notes.append(f"{n - below} of {n} hits at or above {cut_name} {_number(cut)}")
    return Chart(
        x_label="rank",
        y_label=y_label,
        x_ticks=x_ticks,
        y_ticks=[Tick(y(v), _number(v)) for v in ticks],
        lines=[Line("score", "s0", dots)],
        cut=line,
        notes=notes,
    )
