"""Lua scripts in a pipeline (``scripts.Batch``): replies in order, errors as values, and the
calls Redis no longer knows (after SCRIPT FLUSH) re-sent whole in one more round trip; and
every script's header documents the keys and arguments it uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

import cogworker
from cogworker import scripts


@pytest.fixture
def echo(tmp_path: Path) -> scripts.Script:
    path = tmp_path / "echo_key.lua"
    path.write_text(
        "-- KEYS[1] any key; ARGV[1] a suffix\n"
        "-- Returns the key's value followed by the suffix\n"
        "return (redis.call('GET', KEYS[1]) or '') .. ARGV[1]\n",
        encoding="utf-8",
    )
    return scripts.Script(path)


def commands(r: redis.Redis, name: str) -> int:
    stats = r.info("commandstats").get(f"cmdstat_{name}")
    return int(stats["calls"]) if stats else 0


def test_a_batch_returns_every_reply_in_order_with_errors_as_values(
    r: redis.Redis, echo: scripts.Script
) -> None:
    r.set("a", "1")
    r.rpush("a-list", "x")
    batch = scripts.Batch(r)
    first = batch.script(echo, ["a"], ["!"])
    batch.pipe.incr("counter")
    wrong = batch.script(echo, ["a-list"], ["?"])  # GET on a list: WRONGTYPE inside the script
    assert (first, wrong, len(batch)) == (0, 2, 3)

    replies = batch.execute()

    assert replies[0] == "1!"
    assert replies[1] == 1
    assert isinstance(replies[2], redis.ResponseError) and "WRONGTYPE" in str(replies[2])


def test_calls_unknown_after_a_script_flush_are_sent_whole_together(
    r: redis.Redis, echo: scripts.Script
) -> None:
    r.set("a", "1")
    r.set("b", "2")
    assert echo(r, ["a"], ["."]) == "1."  # cached by SHA
    r.script_flush()
    evals = commands(r, "eval")
    batch = scripts.Batch(r)
    batch.script(echo, ["a"], ["!"])
    batch.pipe.get("b")
    batch.script(echo, ["b"], ["?"])

    assert batch.execute() == ["1!", "2", "2?"]
    assert commands(r, "eval") == evals + 2  # each unknown call re-sent once, whole
    assert r.script_exists(echo.sha) == [True]  # and cached again for the next batch


def all_commands(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info")


def test_an_empty_batch_sends_nothing(r: redis.Redis) -> None:
    before = all_commands(r)
    assert scripts.Batch(r).execute() == []
    assert all_commands(r) == before


def test_a_helper_is_included_from_the_shared_directory() -> None:
    source = scripts.load(scripts.__file__, "graduate").source
    assert 'redis.call("LPUSH"' in source  # a script without includes reads as written
    requeue = scripts.Script(scripts.HELPERS / "requeue_job.lua").source
    assert "local function retake_running_lock" in requeue  # its own include prepended
    assert "--#include" not in requeue


LUA_FILES = sorted((Path(cogworker.__file__).parent).rglob("*.lua"))
USED = re.compile(r"\b(KEYS|ARGV)\[(\d+)\]")
# KEYS[2], ARGV[3..] (and every one after), KEYS[1..5] (a range)
DOCUMENTED = re.compile(r"\b(KEYS|ARGV)\[(\d+)(\.\.)?(\d*)\]")
INCLUDED = {
    line.split()[1]
    for path in LUA_FILES
    for line in path.read_text().splitlines()
    if line.startswith("--#include ")
}


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: path.name)
def test_every_script_header_names_each_key_and_argument_it_uses(path: Path) -> None:
    """The header (the comment lines before the code) indexes every KEYS[n] and ARGV[n] the
    code reads (``ARGV[3..]`` covers the rest), and says what the script returns."""
    lines = path.read_text().splitlines()
    header = [line for line in lines if line.startswith("--") and not line.startswith("--#")]
    code = [line.split("--")[0] for line in lines if not line.startswith("--")]
    documented: set[tuple[str, int]] = set()
    open_ended: dict[str, int] = {}
    for line in header:
        assert not re.match(r"^-- (KEYS|ARGV)\s", line), f"{path.name}: not indexed: {line}"
        for kind, number, dots, end in DOCUMENTED.findall(line):
            last = int(end) if end else int(number)
            documented.update((kind, at) for at in range(int(number), last + 1))
            if dots and not end:
                open_ended[kind] = min(open_ended.get(kind, int(number)), int(number))
    used = {(kind, int(number)) for line in code for kind, number in USED.findall(line)}
    missing = sorted(
        (kind, number)
        for kind, number in used - documented
        if not (kind in open_ended and number >= open_ended[kind])
    )
    assert missing == [], f"{path.name}: used but not in the header: {missing}"
    if path.parent.name != "lua" and path.name not in INCLUDED:  # helpers: functions only
        assert any("Returns" in line for line in header), f"{path.name}: no Returns line"
