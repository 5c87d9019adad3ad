"""The Workers tab and the header's cluster bar: what a process looks like (from its presence
and last beat), the running jobs, and quiet / resume / stop / pause intake reaching real
worker processes."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
import redis
import web_support
from conftest import wait_for
from runtime_support import StartWorker, listening
from web_support import (
    HX,
    form_with,
    forms,
    inner_html,
    job,
    plant_process,
    plant_work,
    post,
    push,
    submit,
)
from web_workers_support import quiet_flag, start_worker

from cogworker import keys

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)
_start_worker = start_worker  # the fixture, from web_workers_support

# -- what the tab shows ----------------------------------------------------------------------


def test_the_header_counts_processes_threads_and_the_beat_interval(
    client: Any, r: redis.Redis
) -> None:
    plant_process(r, "alpha:1:aaaaaaaaaaaa", concurrency=3)
    plant_process(r, "beta:2:bbbbbbbbbbbb", concurrency=3)
    html = client.get("/workers").text
    assert "2 processes · 6 threads · heartbeat every 5s" in html
    assert 'id="workers-content" hx-get="/workers"' in html


def test_a_process_row_shows_its_state_queues_load_memory_and_beat(
    client: Any, r: redis.Redis
) -> None:
    plant_process(
        r,
        "alpha:1:aaaaaaaaaaaa",
        concurrency=4,
        queues=["critical", "critical", "default"],
        rss_kb=12_697,
        beat_age=100,
        tag="blue",
        started_at=1767323045.0,
    )
    plant_process(r, "beta:2:bbbbbbbbbbbb", queues=["default", "low"], quiet=True, rss_kb=None)
    r.hset(keys.process("beta:2:bbbbbbbbbbbb"), "quiet", "true")
    html = client.get("/workers").text
    alpha = row_of(html, "alpha:1:aaaaaaaaaaaa")
    assert 'tag-success">Active' in alpha and "critical \u00d72, default \u00d71" in alpha
    assert "0 / 4" in alpha and "12.4 MB" in alpha and 'tag-outline">blue' in alpha
    late = re.search(r'text-warning">([^<]+) ago<', alpha)  # late: 100 s > 3 beats
    assert late is not None and 100 <= seconds_of(late.group(1)) <= 160
    assert 'datetime="2026-01-02T03:04:05Z"' in alpha
    assert ">quiet</button>" in alpha and ">resume</button>" not in alpha
    beta = row_of(html, "beta:2:bbbbbbbbbbbb")
    assert 'tag-warning">Quiet' in beta and "default, low" in beta and ">n/a<" in beta
    assert ">resume</button>" in beta and ">quiet</button>" not in beta


def test_the_beat_age_comes_from_the_last_beat_not_the_presence_ttl(
    client: Any, r: redis.Redis
) -> None:
    plant_process(r, "alpha:1:aaaaaaaaaaaa", beat_age=None)
    r.expire(keys.process("alpha:1:aaaaaaaaaaaa"), 30)  # a TTL that says nothing about beats
    assert ">unknown<" in row_of(client.get("/workers").text, "alpha:1:aaaaaaaaaaaa")
    seconds, _ = r.time()
    r.hset(keys.process("alpha:1:aaaaaaaaaaaa"), "beat", str(int(seconds) - 7))
    age = re.search(r">([^<]+) ago<", row_of(client.get("/workers").text, "alpha:1:aaaaaaaaaaaa"))
    assert age is not None and 7 <= seconds_of(age.group(1)) <= 60


def test_busy_counts_and_the_running_table_come_from_one_snapshot(
    client: Any, r: redis.Redis
) -> None:
    plant_process(r, "alpha:1:aaaaaaaaaaaa", concurrency=5, busy=0)
    started = int(time.time()) - 125
    for thread in ("t1", "t2", "t3"):
        payload = job(jid=f"jid-{thread}", queue="mail", **{"class": "Mail::Send"})
        plant_work(r, "alpha:1:aaaaaaaaaaaa", thread, payload, started)
    html = client.get("/workers").text
    assert "3 / 5" in row_of(html, "alpha:1:aaaaaaaaaaaa")
    running = inner_html(html, "workers-content").split('id="running-title"')[1]
    assert running.count("<tr>") == 4  # header and three jobs
    assert ">jid-t2<" in running and ">Mail::Send<" in running and ">mail<" in running
    running_for = re.search(r'class="num">([^<]+)</td>\s*</tr>', running)
    assert running_for is not None and 125 <= seconds_of(running_for.group(1)) <= 185


def test_a_process_silent_for_three_of_its_beats_shows_silent_and_no_busy_thread(
    client: Any, r: redis.Redis
) -> None:
    """Killed or frozen: its presence still lives, its workers hash still lists its jobs."""
    for identity, beat_age in (("alpha:1:aaaaaaaaaaaa", 10), ("beta:2:bbbbbbbbbbbb", 1)):
        plant_process(r, identity, concurrency=4, beat_age=beat_age)
        info = json.loads(r.hget(keys.process(identity), "info"))
        r.hset(keys.process(identity), "info", json.dumps({**info, "beat_interval": 1.0}))
        plant_work(r, identity, "t1", job(jid=f"jid-{identity[0]}"), int(time.time()) - 5)
    html = client.get("/workers").text
    alpha, beta = row_of(html, "alpha:1:aaaaaaaaaaaa"), row_of(html, "beta:2:bbbbbbbbbbbb")
    assert 'tag-danger">Silent' in alpha and "0 / 4" in alpha
    assert 'tag-success">Active' in beta and "1 / 4" in beta


def test_without_processes_the_tab_says_so(client: Any) -> None:
    html = client.get("/workers").text
    assert "No worker processes are reporting in right now." in html
    assert "No jobs running right now." in html
    assert "0 processes · 0 threads" in html


def seconds_of(shown: str) -> int:
    """``2m 05s`` -> 125 (the page's two-unit durations)."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(int(number) * units[unit] for number, unit in re.findall(r"(\d+)([dhms])", shown))


def row_of(html: str, identity: str) -> str:
    rows = [row for row in html.split("<tr>") if f'"mono">{identity}</span>' in row]
    assert len(rows) == 1, identity
    return rows[0]


# -- the cluster bar -------------------------------------------------------------------------


def test_the_cluster_bar_lights_up_while_any_process_takes_jobs(
    client: Any, r: redis.Redis
) -> None:
    assert (
        '<span class="dot" aria-hidden="true"></span>0 workers'
        in client.get("/workers/summary").text
    )
    plant_process(r, "alpha:1:aaaaaaaaaaaa")
    page = client.get("/jobs").text
    assert 'id="cluster-bar" hx-get="/workers/summary"' in page
    assert 'dot dot-live" aria-hidden="true"></span>1 worker<' in inner_html(page, "cluster-bar")
    r.hset(keys.process("alpha:1:aaaaaaaaaaaa"), "quiet", "true")
    plant_process(r, "beta:2:bbbbbbbbbbbb", quiet=True)
    bar = client.get("/workers/summary").text
    assert "<html" not in bar and '<span class="dot" aria-hidden="true"></span>2 workers' in bar
    assert form_with(page, "Pause intake").confirm and form_with(page, "Resume intake")


# -- commands to real processes --------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_quiet_and_resume_reach_a_real_worker(
    client: Any, r: redis.Redis, start_worker: StartWorker, js: bool
) -> None:
    worker = start_worker()
    identity = worker.identity(r)
    wait_for(lambda: listening(r, identity))
    page = client.get("/workers").text
    answer = submit(client, form_with(page, "quiet"), js=js)
    shown = answer.text if js else client.get(answer.headers["location"]).text
    assert js or answer.headers["location"] == "/workers"
    assert "Asked the process to go quiet" in shown
    wait_for(lambda: quiet_flag(r, identity) == "true")
    page = client.get("/workers", headers=HX).text
    assert 'tag-warning">Quiet' in row_of(page, identity)
    answer = submit(client, form_with(page, "resume"), js=js)
    wait_for(lambda: quiet_flag(r, identity) == "false")
    assert worker.alive()


def test_stop_asks_first_then_the_worker_exits(
    client: Any, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker()
    identity = worker.identity(r)
    wait_for(lambda: listening(r, identity))
    stop = form_with(client.get("/workers").text, "stop")
    assert stop.confirm and stop.confirm.startswith(f"Stop process {identity}?")
    confirmation = submit(client, stop, js=False)  # no JavaScript: a confirmation page
    assert confirmation.status_code == 200 and worker.alive()
    assert f"Stop process {identity}?" in confirmation.text
    answer = submit(client, form_with(confirmation.text, "Stop process"), js=False)
    assert answer.status_code == 303
    assert worker.wait(15) == 0
    assert "Asked the process to stop" in client.get(answer.headers["location"]).text


def test_pause_and_resume_intake_reach_every_process(
    client: Any, r: redis.Redis, start_worker: StartWorker
) -> None:
    workers = [start_worker(), start_worker()]
    identities = [worker.identity(r) for worker in workers]
    for identity in identities:
        wait_for(lambda identity=identity: listening(r, identity))
    page = client.get("/overview").text
    answer = submit(client, form_with(page, "Pause intake"), js=True)
    assert answer.status_code == 200 and "<html" not in answer.text
    assert 'data-cw-toast="warning">Asked 2 processes to go quiet' in answer.text
    for identity in identities:
        wait_for(lambda identity=identity: quiet_flag(r, identity) == "true")
    wait_for(lambda: "dot-live" not in client.get("/workers/summary").text)
    plain = submit(client, form_with(page, "Resume intake"), js=False)
    assert plain.status_code == 303 and plain.headers["location"] == "/workers"
    for identity in identities:
        wait_for(lambda identity=identity: quiet_flag(r, identity) == "false")
    assert "Asked 2 processes to take jobs again." in client.get("/workers").text


def test_the_running_jobs_of_a_real_worker_are_listed(
    client: Any, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker()
    identity = worker.identity(r)
    raw = push(r, "default", jid="held-job", **{"class": "HoldJob"}, args=["m1"])
    wait_for(lambda: r.get("test:started:m1") == "1")

    def listed() -> str | None:
        html = client.get("/workers").text
        return html if ">held-job<" in html else None

    try:
        html = wait_for(listed)
        assert "1 / 2" in row_of(html, identity)
        assert ">HoldJob<" in html and raw in r.lrange(keys.inprogress(identity), 0, -1)
    finally:
        r.set("test:release", "1")


def test_a_command_to_a_process_that_is_not_listening_says_so(client: Any, r: redis.Redis) -> None:
    plant_process(r, "ghost:1:aaaaaaaaaaaa")
    answer = post(client, "/workers/quiet", {"identity": "ghost:1:aaaaaaaaaaaa"}, hx=True)
    assert "did not receive the command" in answer.text
    nobody = post(client, "/workers/quiet", {"identity": "nobody"})
    assert nobody.status_code == 303 and nobody.headers["location"] == "/workers"
    assert "no longer reporting in" in client.get("/workers").text
    intake = post(client, "/workers/pause_all")
    assert intake.status_code == 303 and intake.headers["location"] == "/workers"
    gone = client.get("/workers/stop", params={"identity": "nobody"})
    assert gone.status_code == 404 and "Process not found" in gone.text
    assert all(f.button != "stop" for f in forms(client.get("/workers").text) if not f.confirm)
