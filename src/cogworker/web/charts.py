"""Line charts drawn on the server as SVG: no chart library and no script, readable as they
come, light or dark through the stylesheet's classes.

``line_chart`` lays out the numbers: the y axis from 0 to a round maximum, with whole-number
ticks; one column per x value; a polyline per series. The template (``chart.html``)
draws it. Each column has a ``<title>`` that names the moment and every series' value, so a
hover shows them. A table lists the same values for screen readers and for copying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH = 640
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 26  # room for the axis labels
MAX_TICKS = 5
MAX_X_LABELS = 8
DOTS_UP_TO = 31  # points drawn as dots up to this many per series (more would be a smudge)


@dataclass(frozen=True)
class Series:
    name: str  # "Processed"
    tone: str  # the stylesheet class suffix: chart-line-<tone>
    values: list[int]

    @property
    def total(self) -> int:
        return sum(self.values)


@dataclass(frozen=True)
class Line:
    series: Series
    points: list[tuple[float, float]]

    @property
    def path(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.points)


@dataclass(frozen=True)
class Column:
    left: float
    width: float
    tooltip: str


@dataclass(frozen=True)
class Chart:
    """A laid-out chart: every coordinate the template draws, in the SVG's own units."""

    key: str  # the id stem of its elements
    labels: list[str]  # short x labels ("14:00", "06-15")
    moments: list[str]  # what each x stands for, in full ("2026-06-15 14:00 UTC")
    series: list[Series]
    height: int
    y_max: int
    ticks: list[tuple[int, float]]  # (value, y)
    x_labels: list[tuple[float, str]]  # (x, text)
    lines: list[Line]
    columns: list[Column]

    width: int = WIDTH
    plot_left: int = LEFT
    plot_top: int = TOP

    @property
    def plot_bottom(self) -> int:
        return self.height - BOTTOM

    @property
    def plot_right(self) -> int:
        return self.width - RIGHT

    @property
    def dots(self) -> bool:
        return len(self.labels) <= DOTS_UP_TO

    @property
    def empty(self) -> bool:
        return all(series.total == 0 for series in self.series)

    def rows(self) -> list[tuple[str, list[int]]]:
        """(moment, values of every series) per x, for the table."""
        return [
            (moment, [series.values[index] for series in self.series])
            for index, moment in enumerate(self.moments)
        ]


def axis_max(peak: int) -> tuple[int, int]:
    """(top of the y axis, step between ticks): whole numbers, at most ``MAX_TICKS`` steps,
    each 1, 2 or 5 times a power of ten."""
    if peak <= MAX_TICKS:
        return max(peak, 1), 1
    rough = peak / MAX_TICKS
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    return math.ceil(peak / step) * step, step


def line_chart(
    key: str, labels: list[str], moments: list[str], series: list[Series], height: int = 200
) -> Chart:
    count = len(labels)
    if count == 0 or len(moments) != count or any(len(s.values) != count for s in series):
        raise ValueError(f"chart {key}: every series needs one value per label")
    top, step = axis_max(max((max(s.values) for s in series), default=0))
    bottom = height - BOTTOM
    band = (WIDTH - LEFT - RIGHT) / count

    def x(index: int) -> float:
        return LEFT + (index + 0.5) * band

    def y(value: int) -> float:
        return bottom - value / top * (bottom - TOP)

    label_every = math.ceil(count / MAX_X_LABELS)
    return Chart(
        key=key,
        labels=labels,
        moments=moments,
        series=series,
        height=height,
        y_max=top,
        ticks=[(value, y(value)) for value in range(0, top + 1, step)],
        x_labels=[(x(i), labels[i]) for i in range(count - 1, -1, -label_every)][::-1],
        lines=[Line(s, [(x(i), y(v)) for i, v in enumerate(s.values)]) for s in series],
        columns=[
            Column(LEFT + i * band, band, _tooltip(moments[i], series, i)) for i in range(count)
        ],
    )


def _tooltip(moment: str, series: list[Series], index: int) -> str:
    values = ", ".join(f"{s.name.lower()} {s.values[index]:,}" for s in series)
    return f"{moment}: {values}"
