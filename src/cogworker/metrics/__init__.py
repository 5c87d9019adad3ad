"""Metrics: the Prometheus exposition of cogworker's totals, sets, queues and busy threads
(here), and per job class counts and execution-time histograms (``by_class``, which the
worker's bookkeeper writes and the dashboard's Metrics tab reads).

    body = cogworker.metrics.render(config.redis())     # the text
    app = cogworker.metrics.asgi_app(config)             # mount it at /metrics
    $ cogworker metrics --port 9191                      # or serve it on its own

Label values are escaped as the exposition format requires (backslash, quote, newline).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import redis

from cogworker.config import Config

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 3))


def render(client: redis.Redis) -> str:
    """The metrics as Prometheus text (two round trips, plus one per live process)."""
    # imported here: a worker loads this package for ``by_class`` and never needs the read API
    from cogworker import api

    stats = api.stats(client)
    busy = api.ProcessSet(client).total_busy()
    lines = [
        "# HELP cogworker_processed_total Jobs that ran successfully.",
        "# TYPE cogworker_processed_total counter",
        f"cogworker_processed_total {stats.processed}",
        "# HELP cogworker_failed_total Failed job attempts.",
        "# TYPE cogworker_failed_total counter",
        f"cogworker_failed_total {stats.failed}",
        "# HELP cogworker_retry_size Jobs waiting to be retried.",
        "# TYPE cogworker_retry_size gauge",
        f"cogworker_retry_size {stats.retry_size}",
        "# HELP cogworker_scheduled_size Jobs scheduled for later.",
        "# TYPE cogworker_scheduled_size gauge",
        f"cogworker_scheduled_size {stats.scheduled_size}",
        "# HELP cogworker_dead_size Jobs in the dead set.",
        "# TYPE cogworker_dead_size gauge",
        f"cogworker_dead_size {stats.dead_size}",
        "# HELP cogworker_queue_size Jobs waiting on each queue.",
        "# TYPE cogworker_queue_size gauge",
        *(f'cogworker_queue_size{{queue="{_label(q.name)}"}} {q.size}' for q in stats.queues),
        "# HELP cogworker_queue_latency_seconds How long the next job of each queue has waited.",
        "# TYPE cogworker_queue_latency_seconds gauge",
        *(
            f'cogworker_queue_latency_seconds{{queue="{_label(q.name)}"}} {_number(q.latency)}'
            for q in stats.queues
        ),
        "# HELP cogworker_busy_workers Processor threads running a job now.",
        "# TYPE cogworker_busy_workers gauge",
        f"cogworker_busy_workers {busy}",
    ]
    return "\n".join(lines) + "\n"


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def asgi_app(config: Config) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """A minimal ASGI app answering GET with the metrics (the Web UI mounts it)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope.get("method") not in ("GET", "HEAD"):
            status, body, kind = 405, b"Method Not Allowed\n", "text/plain; charset=utf-8"
        else:
            status, body, kind = 200, render(config.redis()).encode("utf-8"), CONTENT_TYPE
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", kind.encode("ascii"))],
            }
        )
        await send(
            {"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body}
        )

    return app


def serve(config: Config, host: str, port: int) -> ThreadingHTTPServer:
    """Serve the metrics over HTTP at any path (blocking calls run in threads)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                body = render(config.redis()).encode("utf-8")
            except redis.RedisError as error:
                self.send_error(503, f"Redis unavailable: {error}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
