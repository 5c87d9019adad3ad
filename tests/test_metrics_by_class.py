"""Per job class metrics: the histogram's buckets and percentiles (no Redis), and the
recording script and the readers on the real Redis."""

from __future__ import annotations

import math
import random

import pytest
import redis

from cogworker import keys
from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import (
    MOST_CLASSES,
    OTHER_CLASSES,
    RELATIVE_ERROR,
    Period,
    Tallies,
    Tally,
)
from cogworker.scripts import Batch

NOW = 1_780_000_000.0  # a fixed moment: minute and hour keys are derived from it


def nearest_rank(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def within_error(reported: float, true: float) -> bool:
    """The documented bound: RELATIVE_ERROR, or 0.05 ms for times under 0.1 ms."""
    return abs(reported - true) <= max(true * RELATIVE_ERROR, 0.000_050) + 1e-9


# -- the histogram -------------------------------------------------------------------------


def test_buckets_start_at_a_tenth_of_a_millisecond_and_grow_by_a_fourth_doubling() -> None:
    assert metrics_by_class.bucket_of(0) == 0
    assert metrics_by_class.bucket_of(99) == 0
    assert metrics_by_class.bucket_of(100) == 1
    assert metrics_by_class.bucket_of(200) == 5  # one doubling: four buckets on
    assert metrics_by_class.bucket_of(10**15) == metrics_by_class.TOP_BUCKET
    assert pytest.approx(0.0905, abs=0.0001) == RELATIVE_ERROR


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_stay_within_the_stated_error_of_the_true_ones(seed: int) -> None:
    rng = random.Random(seed)
    samples = [rng.lognormvariate(-4, 1.5) for _ in range(5_000)]  # ~0.1 ms .. seconds
    samples += [rng.uniform(0, 0.0001) for _ in range(200)]  # some under the floor
    tally = Tally()
    for seconds in samples:
        tally.add_run(seconds, failed=False)
    for fraction in (0.01, 0.5, 0.9, 0.95, 0.99, 1.0):
        true = nearest_rank([int(s * 1e6) / 1e6 for s in samples], fraction)
        assert within_error(tally.percentile(fraction), true), (fraction, true)
    assert tally.max == pytest.approx(max(samples), abs=1e-6)
    assert tally.executions == len(samples)


def test_a_tally_round_trips_through_its_text_and_refuses_what_is_not_one() -> None:
    tally = Tally()
    for seconds, failed in [(0.002, False), (0.5, True), (0.002, False)]:
        tally.add_run(seconds, failed)
    again = Tally.decode(tally.encode())
    assert again == tally
    assert (again.executions, again.failures, again.max_us) == (3, 1, 500_000)
    for junk in ["", "1 2 3", "a b c d", "1 2 3 4 5", "1 2 3 4 5 x"]:
        assert Tally.decode(junk) is None, junk
    with pytest.raises(ValueError, match="fraction"):
        tally.percentile(0)


def test_an_empty_tally_reports_zero() -> None:
    assert (Tally().p50, Tally().p95, Tally().max, Tally().mean) == (0, 0, 0, 0)


# -- the recording script ------------------------------------------------------------------


def record(r: redis.Redis, tallies: Tallies, now: float = NOW) -> int:
    batch = Batch(r)
    at = tallies.queue(batch, now)
    assert at is not None
    reply = batch.execute()[at]
    assert not isinstance(reply, Exception), reply
    return int(reply)


def test_two_batches_merge_in_the_minute_and_the_hour_with_their_ttls(r: redis.Redis) -> None:
    first, second, expected = Tallies(), Tallies(), Tally()
    for at, seconds in enumerate([0.001, 0.003, 0.25, 0.003, 0.04]):
        (first if at % 2 else second).add_run("Report", seconds, failed=at == 2)
        expected.add_run(seconds, failed=at == 2)
    second.add_run("Other", 0.01, failed=False)
    assert record(r, first) == 1
    assert record(r, second) == 2
    minute = keys.class_metrics_minute(int(NOW) // 60)
    hour = keys.class_metrics_hour(int(NOW) // 3600)
    for key in (minute, hour):
        stored = Tally.decode(r.hget(key, "Report") or b"")
        assert stored == expected
        assert (stored.executions, stored.failures, stored.max_us) == (5, 1, 250_000)
    assert 0 < r.ttl(minute) <= keys.CLASS_METRICS_MINUTE_TTL
    assert keys.CLASS_METRICS_MINUTE_TTL < r.ttl(hour) <= keys.CLASS_METRICS_HOUR_TTL


def test_an_empty_batch_queues_nothing(r: redis.Redis) -> None:
    batch = Batch(r)
    assert Tallies().queue(batch, NOW) is None
    assert len(batch) == 0


def test_classes_beyond_the_limit_share_one_field(r: redis.Redis) -> None:
    many = Tallies()
    for number in range(MOST_CLASSES + 3):
        many.add_run(f"Job{number}", 0.001, failed=False)
    record(r, many)
    minute = keys.class_metrics_minute(int(NOW) // 60)
    assert r.hlen(minute) == MOST_CLASSES + 1
    other = Tally.decode(r.hget(minute, OTHER_CLASSES) or b"")
    assert other is not None and other.executions == 3
    again = Tallies()
    again.add_run("Job0", 0.001, failed=False)  # a class already there keeps its own field
    record(r, again)
    job0 = Tally.decode(r.hget(minute, "Job0") or b"")
    assert job0 is not None and job0.executions == 2


def test_hostile_class_names_are_stored_as_given_and_a_lone_surrogate_as_its_escape(
    r: redis.Redis,
) -> None:
    tallies = Tallies()
    hostile = '<script>alert("x")</script> 1 2 3 4'
    tallies.add_run(hostile, 0.001, failed=True)
    tallies.add_run("bad\ud800name", 0.001, failed=False)
    record(r, tallies)
    found = metrics_by_class.summaries(r, Period.HOUR, NOW).classes
    assert found[hostile].failures == 1
    assert found["bad\\ud800name"].executions == 1
    assert metrics_by_class.detail(r, "bad\ud800name", Period.HOUR, NOW).total.executions == 1


# -- reading -------------------------------------------------------------------------------


def test_the_hour_sums_sixty_minutes_and_the_day_twenty_four_hours(r: redis.Redis) -> None:
    for back in (0, 59, 60):  # the current minute, the oldest one shown, one too old
        tallies = Tallies()
        tallies.add_run("Report", 0.01 * (back + 1), failed=False)
        record(r, tallies, NOW - back * 60)
    hour = metrics_by_class.summaries(r, Period.HOUR, NOW)
    assert hour.classes["Report"].executions == 2
    assert hour.classes["Report"].max_us == 600_000
    detail = metrics_by_class.detail(r, "Report", Period.HOUR, NOW)
    assert len(detail.points) == 60 and detail.starts[-1] == int(NOW) // 60 * 60
    assert [p.executions for p in detail.points][::59] == [1, 1]
    assert metrics_by_class.summaries(r, Period.DAY, NOW).classes["Report"].executions == 3
    day = metrics_by_class.detail(r, "Report", Period.DAY, NOW)
    assert len(day.points) == 24 and day.total.executions == 3


@pytest.mark.parametrize("offset", [0, 1, 9, 10, 59])
def test_the_hours_total_is_exactly_its_sixty_minutes_wherever_the_ten_minutes_fall(
    r: redis.Redis, offset: int
) -> None:
    now = (int(NOW) // 600 * 600) + offset * 60 + 30  # ``offset`` minutes past a boundary
    for back in range(75):
        tallies = Tallies()
        tallies.add_run("Report", 0.001 * (back + 1), failed=back % 2 == 0)
        record(r, tallies, now - back * 60)
    total = metrics_by_class.summaries(r, Period.HOUR, now).classes["Report"]
    assert (total.executions, total.failures) == (60, 30)
    assert total.max_us == 60_000  # the oldest minute in the hour, not the one before it
    detail = metrics_by_class.detail(r, "Report", Period.HOUR, now).total
    assert detail == total
    assert len(Period.HOUR.total_keys(now)) <= 15


def test_a_value_that_is_not_a_tally_is_counted_as_unreadable_not_raised(r: redis.Redis) -> None:
    for key in (keys.class_metrics_minute(int(NOW) // 60), Period.HOUR.total_keys(NOW)[-1]):
        r.hset(key, mapping={"Broken": "not a tally", "Fine": "2 0 300 200 5 2"})
    summary = metrics_by_class.summaries(r, Period.HOUR, NOW)
    assert summary.unreadable == 1 and set(summary.classes) == {"Fine"}
    assert metrics_by_class.detail(r, "Broken", Period.HOUR, NOW).unreadable == 1
