"""What the Metrics tab shows, read through ``cogworker.metrics.by_class``: every class's row
over the period (sorted as asked), and one class's cards, charts and histogram."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import RELATIVE_ERROR, Period, Tally
from cogworker.web import urls
from cogworker.web.charts import Chart, Series, line_chart

PERIOD_LABELS = {Period.HOUR: "Last hour", Period.DAY: "Last day"}
SORTS = ("class", "executions", "failures", "p50", "p95", "max", "total")
DEFAULT_SORT = "total"
ERROR_TEXT = f"within {RELATIVE_ERROR * 100:.1f} % (0.05 ms below 0.1 ms)"


def period_of(text: object) -> Period:
    value = str(text or Period.HOUR.value)
    try:
        return Period(value)
    except ValueError:
        raise urls.BadParameter(f"period must be hour or day (got {value!r})") from None


def sort_of(text: object) -> str:
    value = str(text or DEFAULT_SORT)
    if value not in SORTS:
        raise urls.BadParameter(f"sort must be one of {', '.join(SORTS)} (got {value!r})")
    return value


def took(seconds: float) -> str:
    """An execution time, to about three significant digits: ``0.42 ms``, ``12.3 ms``,
    ``4.56 s``, ``2.5 min``."""
    if seconds <= 0:
        return "0"
    if seconds < 0.001:
        return f"{seconds * 1000:.3f} ms"
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"
    if seconds < 100:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.1f} min"


Row = tuple[str, Tally]  # (job class, its tally)


@dataclass(frozen=True)
class Overview:
    """Every class over the period."""

    period: Period
    sort: str
    rows: list[Row]
    total: Tally
    unreadable: int


def _sort_key(sort: str) -> Callable[[Row], Any]:
    if sort == "class":
        return lambda row: row[0]
    picks: dict[str, Callable[[Tally], float]] = {
        "executions": lambda t: t.executions,
        "failures": lambda t: t.failures,
        "p50": lambda t: t.p50,
        "p95": lambda t: t.p95,
        "max": lambda t: t.max_us,
        "total": lambda t: t.total_us,
    }
    pick = picks[sort]
    return lambda row: (-pick(row[1]), row[0])


def overview(client: redis.Redis, period: Period, sort: str) -> Overview:
    summary = metrics_by_class.summaries(client, period)
    total = Tally()
    for tally in summary.classes.values():
        total.add(tally)
    rows = sorted(summary.classes.items(), key=_sort_key(sort))
    return Overview(period, sort, rows, total, summary.unreadable)


@dataclass(frozen=True)
class ClassPage:
    """One class over the period: its totals, two charts and its histogram's buckets."""

    job_class: str
    period: Period
    total: Tally
    runs: Chart
    times: Chart
    time_unit: str  # of the times chart's values: "ms" or "µs"
    buckets: list[tuple[str, int]]  # (range, runs), fastest first
    unreadable: int


def class_page(client: redis.Redis, job_class: str, period: Period) -> ClassPage:
    found = metrics_by_class.detail(client, job_class, period)
    stamps = [datetime.fromtimestamp(start, UTC) for start in found.starts]
    step = "%H:%M"
    moments = [s.strftime("%Y-%m-%d %H:%M UTC") for s in stamps]
    labels = [s.strftime(step) for s in stamps]
    runs = line_chart(
        "class-runs",
        labels,
        moments,
        [
            Series("Executions", "processed", [p.executions for p in found.points]),
            Series("Failures", "failed", [p.failures for p in found.points]),
        ],
        height=180,
    )
    slowest = max((p.p95 for p in found.points), default=0.0)
    scale, unit = (1_000_000, "µs") if slowest < 0.01 else (1_000, "ms")
    times = line_chart(
        "class-times",
        labels,
        moments,
        [
            Series(f"p95 ({unit})", "processed", [round(p.p95 * scale) for p in found.points]),
            Series(f"p50 ({unit})", "success", [round(p.p50 * scale) for p in found.points]),
        ],
        height=180,
    )
    return ClassPage(
        job_class, period, found.total, runs, times, unit, _buckets(found.total), found.unreadable
    )


def _buckets(total: Tally) -> list[tuple[str, int]]:
    rows = []
    for bucket in sorted(total.buckets):
        low, high = metrics_by_class.bucket_bounds(bucket)
        low_text, high_text = took(low / 1e6), took(high / 1e6)
        span = f"under {high_text}" if bucket == 0 else f"{low_text} to {high_text}"
        rows.append((span, total.buckets[bucket]))
    return rows
