"""Per job class metrics: executions, failures and execution times, per minute and per hour.

Workers record every run (a Python-side extra: Ruby processes neither write nor read these
keys). The bookkeeper sums the runs (``Tallies``) and adds them to three hashes in its
existing pipeline, one script call at most once a second (and when the minute turns): the
minute's and the ten minutes' (kept two hours) and the hour's (kept 26 hours), one field per
job class (so the dashboard is about a second behind). The dashboard's Metrics tab reads
them back, the current minute or hour included: ``summaries`` for every class (the last hour
from at most 9 minute hashes and 6 ten-minute ones, the last day from 24 hour hashes),
``detail`` for one class per point (60 minutes or 24 hours).

A field's value is its tally, "executions failures total_us max_us" followed by "bucket count"
pairs. Execution time (perform through the server middleware, as the "done" log line gives it)
falls in fixed buckets: bucket 0 is under 0.1 ms, bucket ``i`` >= 1 holds
[0.1 ms * 2^((i-1)/4), 0.1 ms * 2^(i/4)). A percentile reports the geometric middle of the
bucket holding the nearest-rank sample, capped at the exact maximum, so it is within
``RELATIVE_ERROR`` (9.1 %) of the true value, or within 0.05 ms below 0.1 ms. A hash holds at
most ``MOST_CLASSES`` classes (a flood of made-up class names can't grow it without bound):
further classes are counted together under ``OTHER_CLASSES``.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

import redis

from cogworker import keys, scripts

STEPS_PER_DOUBLING = 4
FLOOR_US = 100  # bucket 0: anything under 0.1 ms
TOP_BUCKET = 160  # 0.1 ms * 2^(159/4): about 17 years
RELATIVE_ERROR = 2 ** (1 / (2 * STEPS_PER_DOUBLING)) - 1  # half a bucket, geometrically
MOST_CLASSES = 1_000
OTHER_CLASSES = "(other classes)"

_record = scripts.load(__file__, "by_class")


def bucket_of(micros: int) -> int:
    """The histogram bucket of an execution time in microseconds."""
    if micros < FLOOR_US:
        return 0
    return min(TOP_BUCKET, 1 + int(STEPS_PER_DOUBLING * math.log2(micros / FLOOR_US)))


def bucket_middle(bucket: int) -> float:
    """The value (microseconds) a percentile falling in ``bucket`` reports."""
    if bucket <= 0:
        return FLOOR_US / 2
    return FLOOR_US * 2 ** ((bucket - 0.5) / STEPS_PER_DOUBLING)


def field_of(job_class: str) -> bytes:
    """A class name as its hash field: UTF-8, the way the dashboard's client decodes it back
    (surrogate escapes), and any other lone surrogate (JSON allows them) as its backslash
    escape rather than failing the batch's whole pipeline."""
    try:
        return job_class.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return job_class.encode("utf-8", "backslashreplace")


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The execution times (microseconds) ``bucket`` holds: [low, high)."""
    if bucket <= 0:
        return 0.0, float(FLOOR_US)
    return (
        FLOOR_US * 2 ** ((bucket - 1) / STEPS_PER_DOUBLING),
        FLOOR_US * 2 ** (bucket / STEPS_PER_DOUBLING),
    )


@dataclass
class Tally:
    """The runs of one class in one span of time."""

    executions: int = 0
    failures: int = 0
    total_us: int = 0
    max_us: int = 0
    buckets: dict[int, int] = field(default_factory=dict)  # bucket -> runs

    def add_run(self, seconds: float, failed: bool) -> None:
        micros = max(0, int(seconds * 1_000_000))
        self.executions += 1
        self.failures += failed
        self.total_us += micros
        if micros > self.max_us:
            self.max_us = micros
        bucket = bucket_of(micros)
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1

    def add(self, other: Tally) -> None:
        self.executions += other.executions
        self.failures += other.failures
        self.total_us += other.total_us
        self.max_us = max(self.max_us, other.max_us)
        for bucket, count in other.buckets.items():
            self.buckets[bucket] = self.buckets.get(bucket, 0) + count

    def encode(self) -> str:
        head = f"{self.executions} {self.failures} {self.total_us} {self.max_us}"
        pairs = " ".join(f"{b} {c}" for b, c in sorted(self.buckets.items()))
        return f"{head} {pairs}" if pairs else head

    @classmethod
    def decode(cls, text: str | bytes) -> Tally | None:
        """A stored tally, or None when it isn't one (written by something else)."""
        try:
            numbers = [int(word) for word in text.split()]
        except ValueError:
            return None
        if len(numbers) < 4 or len(numbers) % 2:
            return None
        pairs = numbers[4:]
        buckets = dict(zip(pairs[::2], pairs[1::2], strict=True))
        return cls(numbers[0], numbers[1], numbers[2], numbers[3], buckets)

    def percentile(self, fraction: float) -> float:
        """The execution time (seconds) below which ``fraction`` of the runs fall: the
        nearest-rank sample's bucket (see the module's docstring for its error); 0 if none."""
        if not 0 < fraction <= 1:
            raise ValueError(f"a percentile is a fraction in (0, 1], got {fraction!r}")
        rank = max(1, math.ceil(fraction * sum(self.buckets.values())))
        seen = 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                return min(bucket_middle(bucket), self.max_us) / 1_000_000
        return 0.0

    @property
    def p50(self) -> float:
        return self.percentile(0.5)

    @property
    def p95(self) -> float:
        return self.percentile(0.95)

    @property
    def max(self) -> float:
        return self.max_us / 1_000_000

    @property
    def total(self) -> float:
        return self.total_us / 1_000_000

    @property
    def mean(self) -> float:
        return self.total_us / self.executions / 1_000_000 if self.executions else 0.0


# -- recording (the bookkeeper) ------------------------------------------------------------


class Tallies(dict[str, Tally]):
    """One batch's runs by job class, as the bookkeeper collects them between round trips."""

    def add_run(self, job_class: str, seconds: float, failed: bool) -> None:
        tally = self.get(job_class)
        if tally is None:
            tally = self[job_class] = Tally()
        tally.add_run(seconds, failed)

    def queue(self, batch: scripts.Batch, now: float | None = None) -> int | None:
        """Queue the write of these runs on ``batch`` (one script call); the position of its
        reply, or None when there is nothing to write."""
        if not self:
            return None
        stamp = int(time.time() if now is None else now)
        args: list[str | int | bytes] = [
            keys.CLASS_METRICS_MINUTE_TTL,
            keys.CLASS_METRICS_HOUR_TTL,
            MOST_CLASSES,
            OTHER_CLASSES,
        ]
        for job_class, tally in self.items():
            args += (field_of(job_class), tally.encode())
        spans = [
            keys.class_metrics_minute(stamp // 60),
            keys.class_metrics_ten_minutes(stamp // 600),
            keys.class_metrics_hour(stamp // 3600),
        ]
        return batch.script(_record, spans, args)

    def write(self, client: redis.Redis, now: float | None = None) -> None:
        """Write these runs as finished at ``now`` in a round trip of their own (a seeder's
        or a test's; workers queue them in their bookkeeping batch instead)."""
        batch = scripts.Batch(client)
        at = self.queue(batch, now)
        if at is not None:
            reply = batch.execute()[at]
            if isinstance(reply, Exception):
                raise reply


# -- reading (the dashboard) ---------------------------------------------------------------


class Period(enum.Enum):
    """The span the Metrics tab shows: its points are minutes or hours, the current one last."""

    HOUR = "hour"
    DAY = "day"

    @property
    def step(self) -> int:
        return 60 if self is Period.HOUR else 3600

    @property
    def points(self) -> int:
        return 60 if self is Period.HOUR else 24

    def starts(self, now: float | None = None) -> list[int]:
        """The epoch second each point starts at, oldest first."""
        current = int(time.time() if now is None else now) // self.step
        return [(current - back) * self.step for back in range(self.points - 1, -1, -1)]

    def key(self, start: int) -> str:
        if self is Period.HOUR:
            return keys.class_metrics_minute(start // 60)
        return keys.class_metrics_hour(start // 3600)

    def total_keys(self, now: float | None = None) -> list[str]:
        """The hashes that sum to the whole period: for the hour, the minutes before the
        first ten-minute boundary in it, then ten-minute hashes (the last one is the
        current); for the day, its hours."""
        if self is Period.DAY:
            return [self.key(start) for start in self.starts(now)]
        first = self.starts(now)[0] // 60
        boundary = -(-first // 10)  # the first whole ten minutes in the hour
        current = int(time.time() if now is None else now) // 600
        return [keys.class_metrics_minute(m) for m in range(first, boundary * 10)] + [
            keys.class_metrics_ten_minutes(block) for block in range(boundary, current + 1)
        ]


@dataclass(frozen=True)
class Summary:
    """Every class's runs over a period, and how many stored values weren't tallies."""

    classes: dict[str, Tally]
    unreadable: int = 0


@dataclass(frozen=True)
class Detail:
    """One class over a period: its tally per point (oldest first) and in all."""

    job_class: str
    starts: list[int]
    points: list[Tally]
    total: Tally
    unreadable: int = 0


def summaries(client: redis.Redis, period: Period, now: float | None = None) -> Summary:
    """Every class's tally over ``period`` (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for key in period.total_keys(now):
        pipe.hgetall(key)
    classes: dict[str, Tally] = {}
    unreadable = 0
    for bucket in pipe.execute():
        for name, text in bucket.items():
            if not _add_text(classes, name, text):
                unreadable += 1
    return Summary(classes, unreadable)


def _add_text(classes: dict[str, Tally], name: str, text: str) -> bool:
    """Add a stored tally to ``classes[name]``; False if it isn't one. (The tab's hot loop:
    12,000 of these for 200 classes over an hour, so no intermediate Tally.)"""
    try:
        numbers = list(map(int, text.split()))
    except ValueError:
        return False
    if len(numbers) < 4 or len(numbers) % 2:
        return False
    known = classes.get(name)
    if known is None:
        buckets = dict(zip(numbers[4::2], numbers[5::2], strict=True))
        classes[name] = Tally(numbers[0], numbers[1], numbers[2], numbers[3], buckets)
        return True
    known.executions += numbers[0]
    known.failures += numbers[1]
    known.total_us += numbers[2]
    if numbers[3] > known.max_us:
        known.max_us = numbers[3]
    held = known.buckets
    for bucket, count in zip(numbers[4::2], numbers[5::2], strict=True):
        held[bucket] = held.get(bucket, 0) + count
    return True


def detail(client: redis.Redis, job_class: str, period: Period, now: float | None = None) -> Detail:
    """``job_class``'s tally per point of ``period`` (one round trip)."""
    starts = period.starts(now)
    pipe = client.pipeline(transaction=False)
    for start in starts:
        pipe.hget(period.key(start), field_of(job_class))
    points: list[Tally] = []
    total = Tally()
    unreadable = 0
    for text in pipe.execute():
        tally = Tally.decode(text) if text is not None else Tally()
        if tally is None:
            unreadable += 1
            tally = Tally()
        points.append(tally)
        total.add(tally)
    return Detail(job_class, starts, points, total, unreadable)
