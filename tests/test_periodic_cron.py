"""Cron entries: parsing (5 and 6 fields, aliases, zone suffix), registration errors, the
pjid shared with the Ruby gem, and the slot an entry has at a moment, DST changes included.

A slot is the latest fire time not after now. Across a DST change a fixed time inside a
repeated hour fires once (its first occurrence) and one inside a skipped hour fires at the
jump; the DST cases walk minute by minute, passing the previous slot as the hint the way the
ticker does, and check the stateless computation agrees at every step.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from runtime_support import RUBY_VECTORS

import cogworker
from cogworker import periodic
from cogworker.periodic import Entry, PeriodicError, PeriodicSchedule, Schedule
from cogworker.periodic.cron import CronError

VECTORS = json.loads(RUBY_VECTORS.read_text(encoding="utf-8"))["vectors"]

T0 = 1_800_000_000  # 2027-01-15T08:00:00Z: a multiple of 3600


class ReportJob(cogworker.Job):
    name = "PCron::Report"

    def perform(self, *args: Any) -> None:
        pass


@cogworker.job(name="PCron::report_fn")
def report_fn() -> None:
    pass


def utc(text: str) -> float:
    """Epoch seconds of an ISO time (offset included)."""
    return datetime.fromisoformat(text).timestamp()


def local(epoch: float, zone: str) -> str:
    return datetime.fromtimestamp(epoch, ZoneInfo(zone)).isoformat()


# -- the expressions accepted --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "now", "slot"),
    [
        ("*/5 * * * * UTC", T0 + 299, T0 + 0),
        ("*/5 * * * * UTC", T0 + 300, T0 + 300),
        ("7 * * * * UTC", T0 + 5 * 60, T0 - 3600 + 7 * 60),
        ("0 9 * * 1-5 UTC", utc("2027-01-16T12:00:00+00:00"), utc("2027-01-15T09:00:00+00:00")),
        # six fields: seconds first
        ("*/2 * * * * * UTC", T0 + 3.5, T0 + 2),
        ("30 * * * * * UTC", T0 + 29, T0 - 30),
        ("15 10 8 * * * UTC", T0 + 3600, T0 + 10 * 60 + 15),
        # aliases, any case
        ("@hourly UTC", T0 + 3599, T0),
        ("@HOURLY UTC", T0 + 3599.9, T0),
        ("@daily UTC", T0 + 3600, utc("2027-01-15T00:00:00+00:00")),
        ("@midnight UTC", T0, utc("2027-01-15T00:00:00+00:00")),
        ("@weekly UTC", T0, utc("2027-01-10T00:00:00+00:00")),  # the Sunday before
        ("@monthly UTC", T0, utc("2027-01-01T00:00:00+00:00")),
        ("@yearly UTC", T0, utc("2027-01-01T00:00:00+00:00")),
        ("@annually UTC", T0, utc("2027-01-01T00:00:00+00:00")),
        # zone suffix
        ("0 9 * * * Europe/Berlin", utc("2027-07-01T12:00:00+00:00"), utc("2027-07-01T07:00:00Z")),
        ("0 9 * * * Europe/Berlin", utc("2027-01-15T12:00:00+00:00"), utc("2027-01-15T08:00:00Z")),
        ("0 9 * * * America/New_York", utc("2027-07-01T12:00:00Z"), utc("2027-06-30T13:00:00Z")),
        ("@daily Asia/Tokyo", utc("2027-01-15T12:00:00Z"), utc("2027-01-14T15:00:00Z")),
    ],
)
def test_slot_is_the_latest_fire_time_not_after_now(cron: str, now: float, slot: float) -> None:
    assert Schedule(cron).slot(now) == int(slot)


@pytest.mark.parametrize(
    "cron", ["*/5 * * * * UTC", "*/2 * * * * * UTC", "0 9 * * * Europe/Berlin"]
)
def test_at_exactly_a_fire_time_the_slot_is_that_time(cron: str) -> None:
    schedule = Schedule(cron)
    fire = schedule.next_after(T0 + 17)
    assert fire > T0 + 17
    assert schedule.slot(fire) == fire
    assert schedule.slot(fire, hint=schedule.slot(fire - 0.001)) == fire
    assert schedule.slot(fire - 0.001) < fire
    assert schedule.next_after(schedule.slot(fire - 0.001)) == fire
    assert schedule.next_after(fire) > fire  # strictly after


def test_hint_only_shortens_the_walk() -> None:
    schedule = Schedule("*/5 * * * * UTC")
    now = T0 + 3 * 3600 + 61
    assert schedule.slot(now, hint=T0) == schedule.slot(now) == T0 + 3 * 3600
    assert schedule.slot(now, hint=now + 600) == T0 + 3 * 3600  # a hint from the future is ignored


def test_a_zone_suffix_is_part_of_the_cron_and_the_pjid() -> None:
    plain = Entry(cron="0 9 * * *", job="ReportJob")
    zoned = Entry(cron="0 9 * * * Europe/Berlin", job="ReportJob")
    assert zoned.schedule.zone == ZoneInfo("Europe/Berlin")
    assert zoned.pjid == hashlib.sha1(b"0 9 * * * Europe/Berlin|ReportJob|[]").hexdigest()
    assert plain.pjid != zoned.pjid


@pytest.fixture
def berlin_host() -> Iterator[None]:
    """Run as a process whose local zone is Europe/Berlin (TZ), restored afterwards."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = previous
        time.tzset()


def test_without_a_zone_the_local_zone_is_used_with_its_dst_rules(berlin_host: None) -> None:
    """Like Ruby (a Time in the process's zone): 09:00 Berlin is 08:00Z in winter and 07:00Z
    in summer, whatever the date the schedule was parsed on."""
    schedule = Schedule("0 9 * * *")
    winter = schedule.slot(utc("2027-01-15T12:00:00+00:00"))
    summer = schedule.slot(utc("2027-07-15T12:00:00+00:00"))
    assert local(winter, "Europe/Berlin") == "2027-01-15T09:00:00+01:00"
    assert local(summer, "Europe/Berlin") == "2027-07-15T09:00:00+02:00"


# -- DST --------------------------------------------------------------------------------------


def walk(cron: str, start: str, end: str) -> list[str]:
    """Step ``now`` minute by minute like the ticker (hint = the previous slot); the distinct
    slots seen, as local times. Slots never go back and agree with a hint-less computation."""
    schedule = Schedule(cron)
    zone = cron.split()[-1]
    seen: list[str] = []
    hint: int | None = None
    now = utc(start)
    while now <= utc(end):
        slot = schedule.slot(now, hint=hint)
        assert slot <= now
        assert slot == schedule.slot(now), f"hinted and cold slots differ at {now}"
        if hint is not None:
            assert slot >= hint, f"slot went back at {local(now, zone)}"
        if slot != hint:
            seen.append(local(slot, zone))
        hint = slot
        now += 60
    return seen


@pytest.mark.parametrize(
    ("cron", "start", "end", "slots"),
    [
        # fall back: 02:30 happens twice (+02:00 then +01:00) -> fires once, the first time
        (
            "30 2 * * * Europe/Berlin",
            "2026-10-24T22:00:00+00:00",
            "2026-10-25T06:00:00+00:00",
            ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00"],
        ),
        (
            "30 1 * * * America/New_York",
            "2026-11-01T03:00:00+00:00",
            "2026-11-01T09:00:00+00:00",
            ["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00"],
        ),
        # Lord Howe moves by 30 minutes: 01:30-02:00 happens twice
        (
            "45 1 * * * Australia/Lord_Howe",
            "2026-04-04T12:00:00+00:00",
            "2026-04-04T18:00:00+00:00",
            ["2026-04-04T01:45:00+11:00", "2026-04-05T01:45:00+11:00"],
        ),
        # spring forward: 02:30 doesn't exist -> fires at the jump
        (
            "30 2 * * * Europe/Berlin",
            "2026-03-28T22:00:00+00:00",
            "2026-03-29T06:00:00+00:00",
            ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00"],
        ),
        (
            "30 2 * * * America/New_York",
            "2026-03-08T03:00:00+00:00",
            "2026-03-08T12:00:00+00:00",
            ["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00"],
        ),
        (
            "15 2 * * * Australia/Lord_Howe",
            "2026-10-03T12:00:00+00:00",
            "2026-10-03T18:00:00+00:00",
            ["2026-10-03T02:15:00+10:30", "2026-10-04T02:30:00+11:00"],
        ),
    ],
)
def test_dst_repeated_time_fires_once_and_skipped_time_fires_at_the_jump(
    cron: str, start: str, end: str, slots: list[str]
) -> None:
    assert walk(cron, start, end) == slots


def test_the_jump_itself_is_the_slot_of_a_skipped_time() -> None:
    schedule = Schedule("30 2 * * * Europe/Berlin")
    jump = utc("2026-03-29T01:00:00+00:00")  # 02:00+01:00 becomes 03:00+02:00
    assert schedule.slot(jump) == jump
    assert local(schedule.slot(jump - 1), "Europe/Berlin") == "2026-03-28T02:30:00+01:00"


def test_hourly_entry_follows_real_hours_through_the_repeated_hour() -> None:
    """An entry without a fixed hour fires every real hour: no gap and no repeat."""
    seen = walk("0 * * * * Europe/Berlin", "2026-10-24T21:30:00+00:00", "2026-10-25T04:30:00+00:00")
    epochs = [utc(text) for text in seen]
    assert [b - a for a, b in itertools.pairwise(epochs)] == [3600.0] * (len(seen) - 1)
    assert "2026-10-25T02:00:00+02:00" in seen and "2026-10-25T02:00:00+01:00" in seen


# -- registration ------------------------------------------------------------------------------


def test_register_by_class_function_or_wire_name() -> None:
    schedule = PeriodicSchedule()
    by_class = schedule.register("*/5 * * * *", ReportJob, args=[1])
    by_function = schedule.register("*/5 * * * *", report_fn)
    by_name = schedule.register("*/5 * * * *", "PCron::Report", args=[2])
    assert (by_class.job, by_function.job, by_name.job) == (
        "PCron::Report",
        "PCron::report_fn",
        "PCron::Report",
    )
    assert by_class.args == [1] and by_function.args == []
    assert by_class.retry == 0 and by_class.unique is None and by_class.queue == "default"
    assert len({by_class.pjid, by_function.pjid, by_name.pjid}) == 3
    assert schedule.entries == [by_class, by_function, by_name]


@pytest.mark.parametrize("retry", [None, False, 0])
def test_retry_none_or_false_becomes_zero(retry: Any) -> None:
    entry = PeriodicSchedule().register("@hourly", ReportJob, retry=retry)
    assert entry.retry == 0 and entry.retry is not False


def test_options_are_kept() -> None:
    entry = PeriodicSchedule().register(
        "0 9 * * *",
        ReportJob,
        args=["x", 2],
        retry=3,
        unique="until_executed",
        queue="cron",
        tz="Europe/Berlin",
    )
    assert entry.cron == "0 9 * * * Europe/Berlin"
    assert (entry.args, entry.retry, entry.unique, entry.queue) == (
        ["x", 2],
        3,
        "until_executed",
        "cron",
    )
    assert entry.until_executed
    assert entry.pjid == hashlib.sha1(b'0 9 * * * Europe/Berlin|PCron::Report|["x",2]').hexdigest()


def test_module_level_register_uses_the_default_config(config: cogworker.Config) -> None:
    entry = periodic.register("@hourly", ReportJob, args=["default"])
    assert config.periodic.entries == [entry]


def assert_one_line(error: pytest.ExceptionInfo[PeriodicError], *fragments: str) -> None:
    message = str(error.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "expected 5 fields"),
        ("61 * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("0 0 30 2 *", "day-of-month"),
        ("@every 5m", "expected 5 fields"),
        ("", "empty"),
        ("0 9 * * * Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("0 9 * * * Europe/Berln", "unknown time zone 'Europe/Berln'"),
        ("0 9 * * * NotAZone", ""),
    ],
)
def test_bad_cron_is_a_one_line_error_naming_the_entry(cron: str, why: str) -> None:
    schedule = PeriodicSchedule()
    with pytest.raises(PeriodicError) as error:
        schedule.register(cron, ReportJob)
    assert_one_line(error, f"periodic entry {cron!r}", "PCron::Report", why)
    assert schedule.entries == []


def test_unknown_tz_option_is_a_one_line_error() -> None:
    with pytest.raises(PeriodicError) as error:
        PeriodicSchedule().register("0 9 * * *", ReportJob, tz="Mars/Olympus")
    assert_one_line(error, "'0 9 * * *'", "PCron::Report", "Mars/Olympus")


def test_unknown_job_is_an_error_unless_external() -> None:
    schedule = PeriodicSchedule()
    with pytest.raises(PeriodicError) as error:
        schedule.register("@hourly", "Billing::Invoicer")
    assert_one_line(error, "Billing::Invoicer", "unknown job", "external=True")
    entry = schedule.register("@hourly", "Billing::Invoicer", external=True)
    assert entry.job == "Billing::Invoicer"


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"unique": "while_executing"}, "unique"),
        ({"unique": "until_executed "}, "unique"),
        ({"retry": "lots"}, "retry"),
        ({"retry": 2.5}, "retry"),
        ({"queue": ""}, "queue"),
        ({"queue": 5}, "queue"),
        ({"args": "abc"}, "args"),
        ({"args": [object()]}, "argument 0"),
        ({"args": [float("nan")]}, "argument 0"),
        ({"args": [{1: "x"}]}, "argument 0"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, Any], why: str) -> None:
    schedule = PeriodicSchedule()
    with pytest.raises(PeriodicError) as error:
        schedule.register("@hourly", ReportJob, **options)
    assert_one_line(error, "'@hourly'", "PCron::Report", why)
    assert schedule.entries == []


def test_a_job_that_is_not_a_job_is_an_error() -> None:
    with pytest.raises(PeriodicError) as error:
        PeriodicSchedule().register("@hourly", 42)
    assert_one_line(error, "'@hourly'", "42")


def test_registering_an_entry_twice_is_an_error() -> None:
    schedule = PeriodicSchedule()
    schedule.register("@hourly", ReportJob, args=[1])
    schedule.register("@hourly", ReportJob, args=[2])  # other args: another entry
    with pytest.raises(PeriodicError) as error:
        schedule.register("@hourly", ReportJob, args=[1])
    assert_one_line(error, "registered twice")
    assert len(schedule) == 2


def test_config_file_entries() -> None:
    schedule = PeriodicSchedule()
    schedule.register_from_config(
        [
            {"cron": "*/5 * * * *", "job": "PCron::Report", "args": [1], "queue": "cron"},
            {
                "cron": "0 9 * * *",
                "job": "Ruby::Thing",
                "external": True,
                "tz": "Asia/Tokyo",
                "unique": "until_executed",
                "retry": 2,
            },
        ]
    )
    first, second = schedule.entries
    assert (first.job, first.args, first.queue, first.retry) == ("PCron::Report", [1], "cron", 0)
    assert second.cron == "0 9 * * * Asia/Tokyo"
    assert (second.unique, second.retry, second.queue) == ("until_executed", 2, "default")


@pytest.mark.parametrize(
    ("items", "fragments"),
    [
        ({"cron": "@hourly"}, ["periodic must be a list"]),
        ([{"cron": "@hourly"}], ["periodic entry 0", "'cron' and 'job'"]),
        ([{"job": "PCron::Report"}], ["periodic entry 0"]),
        (
            [
                {"cron": "@hourly", "job": "PCron::Report"},
                {"cron": "@daily", "job": "PCron::Report", "every": 1},
            ],
            ["periodic entry 1", "'@daily'", "unknown key 'every'"],
        ),
        (
            [{"cron": "@daily", "job": "PCron::Report", "extrenal": True}],
            ["periodic entry 0", "unknown key 'extrenal' (did you mean 'external'?)"],
        ),
        (
            [{"cron": "@daily", "job": "PCron::Report", "external": "false"}],
            ["periodic entry 0", "external must be true or false, got 'false'"],
        ),
        (
            [{"cron": "@daily", "job": "PCron::Report", "args": None}],
            ["periodic entry 0", "args is empty"],
        ),
        (
            [{"cron": "@daily", "job": "PCron::Report", "queue": None}],
            ["periodic entry 0", "queue is empty"],
        ),
        (
            [{"cron": "@daily", "job": "PCron::Report", "queue": ""}],
            ["'@daily'", "queue must be a non-empty string, got ''"],
        ),
        ([{"cron": "@hourly", "job": "Nope::Job"}], ["'@hourly'", "Nope::Job", "unknown job"]),
        ([{"cron": "@often", "job": "PCron::Report"}], ["'@often'", "PCron::Report"]),
    ],
)
def test_bad_config_file_entries_are_one_line_errors(items: Any, fragments: list[str]) -> None:
    with pytest.raises(PeriodicError) as error:
        PeriodicSchedule().register_from_config(items)
    assert_one_line(error, *fragments)


# -- the pjid the Ruby gem computes -------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=[v["args_json_ruby"][:40] for v in VECTORS])
def test_pjid_matches_the_ruby_vectors(vector: dict[str, str]) -> None:
    args = json.loads(vector["args_input"])
    entry = PeriodicSchedule().register("*/5 * * * *", "ReportJob", args=args, external=True)
    assert entry.pjid == vector["pjid"]
    expected = hashlib.sha1(
        f"*/5 * * * *|ReportJob|{vector['args_json_ruby']}".encode()
    ).hexdigest()
    assert entry.pjid == expected


def test_pjid_does_not_depend_on_queue_retry_or_unique() -> None:
    base = PeriodicSchedule().register("@hourly", ReportJob, args=[1])
    other = PeriodicSchedule().register(
        "@hourly", ReportJob, args=[1], queue="cron", retry=5, unique="until_executed"
    )
    assert base.pjid == other.pjid


def test_cron_error_is_a_value_error_naming_the_expression() -> None:
    with pytest.raises(CronError, match="'61 \\* \\* \\* \\*'"):
        Schedule("61 * * * *")
    assert datetime.fromtimestamp(T0, UTC).isoformat() == "2027-01-15T08:00:00+00:00"
