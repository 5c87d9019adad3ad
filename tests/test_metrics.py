"""The Prometheus exporter: ``render``, the ASGI app and
the stand-alone HTTP server, read with prometheus_client's own parser.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from runtime_support import closing_pools, release

import cogworker
from cogworker import keys, metrics, wire
from cogworker.local.server import free_port

_close_pools = pytest.fixture(autouse=True)(closing_pools)

WEIRD = 'we"ird\\q'  # a quote and a backslash: both must be escaped in a label
BROKEN_LINE = "line\nbreak"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """(sample name + labels -> value, sample family -> type), via prometheus_client."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = sample.value
            types[sample.name] = family.type
    return samples, types


def queue_label(name: str) -> tuple[tuple[str, str], ...]:
    return (("queue", name),)


def job(**fields: Any) -> str:
    return wire.dumps({"class": "M::Job", "args": [], "jid": wire.new_jid(), **fields})


def seed_known_state(r: redis.Redis) -> float:
    """Counters, sets, four queues, two live processes and a stale one; returns "now"."""
    now = time.time()
    r.set(keys.STATS_PROCESSED, 12)
    r.set(keys.STATS_FAILED, 4)
    r.zadd(keys.RETRY, {job(n=1): now + 10, job(n=2): now + 20})
    r.zadd(keys.SCHEDULE, {job(n=3): now + 10, job(n=4): now + 20, job(n=5): now + 30})
    r.zadd(keys.DEAD, {job(n=6): now})
    r.lpush(keys.queue("default"), job(enqueued_at=now - 30.25), job(enqueued_at=now - 1))
    r.lpush(keys.queue(WEIRD), job(enqueued_at=now - 5))
    r.lpush(keys.queue(BROKEN_LINE), job(enqueued_at=now + 3600))  # clock ahead: never < 0
    r.sadd(keys.QUEUES, "default", WEIRD, BROKEN_LINE, "empty")
    for identity, busy in (("h:1:aaaaaaaaaaaa", "3"), ("h:2:bbbbbbbbbbbb", "2")):
        r.hset(keys.process(identity), mapping={"info": "{}", "busy": busy, "quiet": "false"})
        r.sadd(keys.PROCESSES, identity)
    r.sadd(keys.PROCESSES, "h:3:cccccccccccc")  # presence expired
    return now


def check_known_state(text: str, now: float, rendered_at: float) -> None:
    samples, types = parse(text)
    assert samples[("cogworker_processed_total", ())] == 12
    assert samples[("cogworker_failed_total", ())] == 4
    assert samples[("cogworker_retry_size", ())] == 2
    assert samples[("cogworker_scheduled_size", ())] == 3
    assert samples[("cogworker_dead_size", ())] == 1
    assert samples[("cogworker_busy_workers", ())] == 5
    sizes = {"default": 2, WEIRD: 1, BROKEN_LINE: 1, "empty": 0}
    for name, size in sizes.items():
        assert samples[("cogworker_queue_size", queue_label(name))] == size
    latency = {
        name: samples[("cogworker_queue_latency_seconds", queue_label(name))] for name in sizes
    }
    assert 30.25 - 0.001 <= latency["default"] <= 30.25 + (rendered_at - now) + 0.001
    assert 5 - 0.001 <= latency[WEIRD] <= 5 + (rendered_at - now) + 0.001
    assert latency[BROKEN_LINE] == 0
    assert latency["empty"] == 0
    for value in latency.values():
        assert round(value, 3) == value  # three decimals at most
    assert len([key for key in samples if key[0] == "cogworker_queue_size"]) == 4
    assert types == {
        "cogworker_processed_total": "counter",
        "cogworker_failed_total": "counter",
        "cogworker_retry_size": "gauge",
        "cogworker_scheduled_size": "gauge",
        "cogworker_dead_size": "gauge",
        "cogworker_queue_size": "gauge",
        "cogworker_queue_latency_seconds": "gauge",
        "cogworker_busy_workers": "gauge",
    }


# -- render ----------------------------------------------------------------------------------


def test_render_reports_every_metric_of_a_known_state(
    r: redis.Redis, config: cogworker.Config
) -> None:
    now = seed_known_state(r)

    text = metrics.render(config.redis())

    check_known_state(text, now, time.time())


def test_render_layout(r: redis.Redis, config: cogworker.Config) -> None:
    seed_known_state(r)

    text = metrics.render(config.redis())

    assert text.endswith("\n")
    lines = text.splitlines()
    type_lines = [line for line in lines if line.startswith("# TYPE ")]
    assert len(type_lines) == len(set(type_lines)) == 8  # one per family, labelled ones too
    assert "# TYPE cogworker_queue_size gauge" in type_lines
    sizes = [line for line in lines if line.startswith("cogworker_queue_size{")]
    # sorted by name; the label escapes a backslash, a quote and a newline
    assert sizes == [
        'cogworker_queue_size{queue="default"} 2',
        'cogworker_queue_size{queue="empty"} 0',
        'cogworker_queue_size{queue="line\\nbreak"} 1',
        'cogworker_queue_size{queue="we\\"ird\\\\q"} 1',
    ]
    assert all("\n" not in line for line in lines)


def test_render_of_an_empty_redis(r: redis.Redis, config: cogworker.Config) -> None:
    samples, _ = parse(metrics.render(config.redis()))

    assert samples == {
        ("cogworker_processed_total", ()): 0,
        ("cogworker_failed_total", ()): 0,
        ("cogworker_retry_size", ()): 0,
        ("cogworker_scheduled_size", ()): 0,
        ("cogworker_dead_size", ()): 0,
        ("cogworker_busy_workers", ()): 0,
    }


# -- ASGI ------------------------------------------------------------------------------------


def call_asgi(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Drive an ASGI app by hand: one empty request body; returns the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(app(scope, receive, send))
    return sent


def http_scope(method: str, path: str = "/metrics") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 50000),
    }


def test_asgi_app_answers_get_with_the_metrics(r: redis.Redis, config: cogworker.Config) -> None:
    now = seed_known_state(r)
    app = metrics.asgi_app(config)

    start, body = call_asgi(app, http_scope("GET"))

    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].decode().startswith("text/plain; version=0.0.4")
    assert body["type"] == "http.response.body"
    check_known_state(body["body"].decode("utf-8"), now, time.time())


def test_asgi_app_head_post_and_other_scopes(r: redis.Redis, config: cogworker.Config) -> None:
    r.set(keys.STATS_PROCESSED, 1)
    app = metrics.asgi_app(config)

    head_start, head_body = call_asgi(app, http_scope("HEAD"))
    assert head_start["status"] == 200 and head_body["body"] == b""

    post_start, post_body = call_asgi(app, http_scope("POST"))
    assert post_start["status"] == 405
    assert b"cogworker_processed_total" not in post_body["body"]

    assert call_asgi(app, {"type": "lifespan", "asgi": {"version": "3.0"}}) == []


# -- stand-alone server ----------------------------------------------------------------------


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[str]:
    server = metrics.serve(config, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_serve_answers_on_an_ephemeral_port(r: redis.Redis, served: str) -> None:
    now = seed_known_state(r)

    with urllib.request.urlopen(f"{served}/metrics", timeout=10) as response:
        body = response.read()
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert int(response.headers["Content-Length"]) == len(body)

    check_known_state(body.decode("utf-8"), now, time.time())

    r.incr(keys.STATS_PROCESSED)  # read fresh on every request, on any path
    with urllib.request.urlopen(f"{served}/anything", timeout=10) as response:
        samples, _ = parse(response.read().decode("utf-8"))
    assert samples[("cogworker_processed_total", ())] == 13


def test_serve_answers_503_while_redis_is_unreachable() -> None:
    unreachable = cogworker.Config(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    server = metrics.serve(unreachable, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with pytest.raises(urllib.error.HTTPError) as failure:
            urllib.request.urlopen(url, timeout=20)
        assert failure.value.code == 503
        failure.value.close()
    finally:
        server.shutdown()
        server.server_close()
        release(unreachable)


def test_render_counts_only_live_processes_busy(r: redis.Redis, config: cogworker.Config) -> None:
    info = json.dumps({"hostname": "h", "pid": 1, "concurrency": 4, "queues": ["default"]})
    r.hset(keys.process("h:1:aaaaaaaaaaaa"), mapping={"info": info, "busy": "4", "quiet": "true"})
    r.sadd(keys.PROCESSES, "h:1:aaaaaaaaaaaa", "h:9:dddddddddddd")

    samples, _ = parse(metrics.render(config.redis()))

    assert samples[("cogworker_busy_workers", ())] == 4
    assert r.smembers(keys.PROCESSES) == {"h:1:aaaaaaaaaaaa"}  # the stale member went
