"""The history index on a real Redis: written with each run and trimmed by the retention
rules, caught up on runs other writers stored and on their trims, healed when an entry goes
from the middle or a write's index call met NOSCRIPT; and every index path (by rank, walking
another column's order, gathering the smallest filter) answers what the scan answers."""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

from cogworker import history, keys, wire
from cogworker.history import index as history_index
from cogworker.history.filters import Query
from cogworker.history.reading import Path, page

NOW = 1_767_323_045.0


def run(
    jid: str, at: float, ms: int = 10, job_class: str = "Mailer", **fields: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "jid": jid,
        "class": job_class,
        "queue": "default",
        "args": [jid],
        "status": "success",
        "started_at": at - ms / 1000,
        "finished_at": at,
        "duration": ms,
    }
    entry.update(fields)
    return entry


def store(r: redis.Redis, retention: history.Retention, *entries: dict[str, Any]) -> None:
    for entry in entries:  # one pipeline each: every write trims against what is there
        pipe = r.pipeline(transaction=False)
        history.store(pipe, retention, entry)
        pipe.execute()


def index_keys(r: redis.Redis) -> set[str]:
    return {str(key) for key in r.scan_iter("cogworker:history:index:*")}


def test_a_recorded_run_is_indexed_in_the_same_write(r: redis.Redis) -> None:
    history.record(r, history.Retention(), {"jid": "w1", "class": "Billing", "args": [1]}, "q1", 0)
    raw = str(r.zrange(keys.HISTORY_ALL, 0, 0)[0])
    ref = history_index.ref_of(raw)
    assert r.zscore(keys.HISTORY_INDEX_TIME, ref) is not None
    assert r.zcard(keys.history_index_by("class", "billing")) == 1
    assert r.zcard(keys.history_index_by("queue", "q1")) == 1
    assert history_index.values(r, "class") == ["billing"]
    assert r.hexists(keys.HISTORY_INDEX_ROWS, ref)


def test_the_index_is_trimmed_by_count_with_the_history(r: redis.Redis) -> None:
    retention = history.Retention(max_entries=3)
    store(r, retention, *(run(f"c{i}", NOW + i, job_class=f"Job{i}") for i in range(5)))
    assert r.zcard(keys.HISTORY_ALL) == 3
    assert r.zcard(keys.HISTORY_INDEX_TIME) == 3
    assert r.hlen(keys.HISTORY_INDEX_ROWS) == 3
    assert history_index.values(r, "class") == ["job2", "job3", "job4"]
    for column in history_index.SORT_COLUMNS:
        assert r.zcard(keys.history_index_sort(column)) == 3
    assert not r.exists(keys.history_index_by("class", "job0"))


def test_the_index_is_trimmed_by_age_with_the_history(r: redis.Redis) -> None:
    retention = history.Retention(days=1)
    store(r, retention, run("old", NOW - 2 * 86_400, job_class="Old"), run("new", NOW))
    assert [entry["jid"] for entry in history.query(r)[0]] == ["new"]
    assert r.zcard(keys.HISTORY_INDEX_TIME) == 1
    assert r.zcard(keys.HISTORY_INDEX_DURATION) == 1
    assert history_index.values(r, "class") == ["mailer"]


def test_the_catch_up_is_bounded_per_read(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_index, "SYNC_CAP", 10)
    for i in range(25):  # as a Ruby process writes: the history sets alone
        raw = wire.dumps(run(f"rb{i:02d}", NOW + i, job_class="Ruby"))
        r.zadd(keys.HISTORY_ALL, {raw: NOW + i})
    added = [history_index.sync(r).added for _ in range(4)]
    assert added == [10, 10, 5, 0]
    wanted = Query.parse(filters={"class": {"type": "equals", "filter": "ruby"}}, limit=100)
    found = page(r, wanted)
    assert (found.path, found.total, len(found.runs)) == (Path.INDEX, 25, 25)


def test_a_late_run_within_the_overlap_is_still_caught_up(r: redis.Redis) -> None:
    r.zadd(keys.HISTORY_ALL, {wire.dumps(run("first", NOW)): NOW})
    history_index.sync(r)
    late_at = NOW - history_index.OVERLAP / 2  # stamped before the cursor, written after
    r.zadd(keys.HISTORY_ALL, {wire.dumps(run("late", late_at, job_class="Late")): late_at})
    assert history_index.sync(r).added == 1


def test_an_entry_gone_from_the_middle_is_dropped_when_a_page_meets_it(r: redis.Redis) -> None:
    store(r, history.Retention(), *(run(f"m{i}", NOW + i, ms=i) for i in range(5)))
    middle = str(r.zrange(keys.HISTORY_ALL, 2, 2)[0])
    r.zrem(keys.HISTORY_ALL, middle)
    duration = [{"colId": "duration", "sort": "asc"}]
    rows, _ = history.query(r, sort=duration)
    assert [row["jid"] for row in rows] == ["m0", "m1", "m3", "m4"]
    assert history.query(r, sort=duration)[1] == 4  # the index no longer counts it
    assert r.hlen(keys.HISTORY_INDEX_ROWS) == 4


def test_a_write_whose_index_call_met_noscript_is_indexed_by_the_next_read(
    r: redis.Redis,
) -> None:
    store(r, history.Retention(), run("before", NOW))  # loads the script for this pool
    r.script_flush()
    pipe = r.pipeline(transaction=False)
    history.store(pipe, history.Retention(), run("after", NOW + 1, job_class="Healed"))
    replies = pipe.execute(raise_on_error=False)
    assert isinstance(replies[-1], redis.exceptions.NoScriptError)
    rows, total = history.query(r, filters={"class": {"type": "equals", "filter": "healed"}})
    assert ([row["jid"] for row in rows], total) == (["after"], 1)


def test_hostile_values_make_index_keys_that_still_match(r: redis.Redis) -> None:
    hostile = 'a:b\x00c<script>"x"'
    store(r, history.Retention(), run("h1", NOW, job_class=hostile, queue="q:\x00"), run("h2", NOW))
    rows, total = history.query(r, filters={"class": {"type": "equals", "filter": hostile}})
    assert ([row["jid"] for row in rows], total) == (["h1"], 1)
    rows, _ = history.query(r, filters={"queue": {"type": "equals", "filter": "Q:\x00"}})
    assert [row["jid"] for row in rows] == ["h1"]


# -- every index path answers what the scan answers -----------------------------------------

SCAN = {"jid": {"type": "notBlank"}}  # matches every run; only the scan answers it


@pytest.fixture
def runs(r: redis.Redis) -> list[dict[str, Any]]:
    chooser = random.Random(5)
    durations = chooser.sample(range(1, 100_000), 300)  # all different: no ties to order
    made = [
        run(
            f"r{i:03d}",
            NOW + i,
            durations[i],
            job_class=chooser.choice(["Mailer"] * 6 + ["Billing", "Report"]),
            queue=chooser.choice(["default", "low"]),
            status="failed" if i % 7 == 0 else "success",
        )
        for i in range(300)
    ]
    pipe = r.pipeline(transaction=False)
    for entry in made:
        history.store(pipe, history.Retention(), entry)
    pipe.execute()
    return made


CASES = [
    ({"class": {"type": "equals", "filter": "mailer"}}, "duration"),  # walks the order
    ({"class": {"type": "equals", "filter": "report"}}, "duration"),  # gathers the class
    ({"class": {"type": "equals", "filter": "mailer"}}, "jid"),
    ({"class": {"type": "equals", "filter": "mailer"}}, "finished_at"),  # by rank
    ({"duration": {"type": "greaterThan", "filter": 20_000}}, "finished_at"),
    ({"duration": {"type": "inRange", "filter": 1_000, "filterTo": 60_000}}, "duration"),
    (
        {
            "class": {"type": "equals", "filter": "mailer"},
            "queue": {"type": "equals", "filter": "low"},
        },
        "duration",
    ),
    ({"finished_at": {"type": "lessThan", "filter": NOW + 150}}, "jid"),
    ({"class": {"type": "equals", "filter": "mailer"}}, "class"),  # sorted by its equality
    ({"queue": {"type": "equals", "filter": "low"}}, "status"),
]


@pytest.mark.parametrize(("filters", "column"), CASES)
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("status", ["all", "failed"])
def test_every_index_path_matches_the_scan(
    r: redis.Redis,
    runs: list[dict[str, Any]],
    filters: dict[str, Any],
    column: str,
    descending: bool,
    status: str,
) -> None:
    sort = [{"colId": column, "sort": "desc" if descending else "asc"}]
    whole = Query.parse(status=status, sort=sort, filters={**filters, **SCAN}, limit=1000)
    expected = page(r, whole)
    assert expected.path is Path.SCAN
    every = [run.entry["jid"] for run in expected.runs]
    for offset in (0, 10, len(every) // 2, max(len(every) - 10, 0)):
        wanted = Query.parse(status=status, sort=sort, filters=filters, offset=offset, limit=10)
        found = page(r, wanted)
        assert found.path is Path.INDEX
        assert found.total == expected.total
        if column in ("jid", "duration", "finished_at"):  # values all different: one order
            assert [run.entry["jid"] for run in found.runs] == every[offset : offset + 10]


def test_the_scans_raw_text_prefilter_never_changes_the_answer(r: redis.Redis) -> None:
    spaced = (  # stored by another writer, with spaces json.dumps puts in
        '{"jid": "s1", "class": "Caf\\u00e9Job", "queue": "q", "args": [1, 2], "status": '
        '"failed", "started_at": 1.0, "finished_at": 2.0, "error_class": "Timeout::Error", '
        '"error_message": "took too long"}'
    )
    store(r, history.Retention(), run("s2", 3.0, args=["x"]))
    r.zadd(keys.HISTORY_ALL, {spaced: 2.0})
    for column, needle, expected in (
        ("error", "too long", ["s1"]),  # a plain text: the prefilter applies
        ("error", "error: took", ["s1"]),  # spans the ": " the column adds: no prefilter
        ("args", "1,2", ["s1"]),  # the column is compact JSON, the stored entry is not
        ("class", "cafÉ", ["s1"]),  # escaped in the stored entry
        ("class", "MAILER", ["s2"]),
    ):
        rows, _ = history.query(r, filters={column: {"type": "contains", "filter": needle}})
        assert [row["jid"] for row in rows] == expected, (column, needle)


def test_a_walk_that_finds_its_runs_further_than_their_share_gathers_them_instead(
    r: redis.Redis,
) -> None:
    # the 400 runs of queue "slow" are the slowest of 5,000: read fastest first, the walk
    # over the duration order meets none of them for 4,600 runs, past its budget
    pipe = r.pipeline(transaction=False)
    for i in range(5_000):
        slow = i % 12 == 0 and i < 4_800
        entry = run(f"w{i:04d}", NOW + i, 100_000 + i if slow else i, queue="slow" if slow else "q")
        history.store(pipe, history.Retention(), entry)
    pipe.execute()
    sort = [{"colId": "duration", "sort": "asc"}]
    slow_only = {"queue": {"type": "equals", "filter": "slow"}}
    found = page(r, Query.parse(sort=sort, filters=slow_only, limit=10))
    assert found.path is Path.INDEX and found.total == 400
    assert [run.entry["jid"] for run in found.runs] == [f"w{i:04d}" for i in range(0, 120, 12)]


def test_a_page_says_when_the_catch_up_is_behind(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_index, "SYNC_CAP", 10)
    for i in range(15):
        r.zadd(keys.HISTORY_ALL, {wire.dumps(run(f"b{i:02d}", NOW + i)): NOW + i})
    by_duration = Query.parse(sort=[{"colId": "duration", "sort": "asc"}])
    first = page(r, by_duration)
    assert (first.catching_up, first.total) == (True, 10)
    second = page(r, by_duration)
    assert (second.catching_up, second.total) == (False, 15)
