"""``cogworker stats`` (the totals) and ``cogworker metrics`` (a Prometheus endpoint)."""

from __future__ import annotations

import signal
import threading

import click

from cogworker import api, metrics
from cogworker.admin.common import echo_json, json_option, redis_option, target
from cogworker.admin.queues import queue_table
from cogworker.cli_context import chosen_redis_url
from cogworker.config import Config


@click.command("stats")
@redis_option
@json_option
def stats_command(redis_url: str | None, as_json: bool) -> None:
    """Totals, set sizes and queue latencies.

    Processed and failed totals, the sizes of the schedule, retry and dead sets, and every
    queue's size and latency."""
    figures = api.stats(target(redis_url).client)
    if as_json:
        echo_json(figures.to_dict())
        return
    click.echo(
        f"processed {figures.processed}   failed {figures.failed}   "
        f"enqueued {figures.enqueued}   scheduled {figures.scheduled_size}   "
        f"retry {figures.retry_size}   dead {figures.dead_size}"
    )
    if figures.queues:
        click.echo("")
        queue_table(figures)


@click.command("metrics")
@redis_option
@click.option("--port", default=9191, show_default=True, help="Port to serve /metrics on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def metrics_command(redis_url: str | None, port: int, host: str) -> None:
    """Serve Prometheus metrics over HTTP until TERM / INT."""
    config = Config(redis_url=chosen_redis_url(redis_url))
    server = metrics.serve(config, host, port)
    click.echo(f"serving metrics on http://{host}:{server.server_address[1]}/metrics")
    done = threading.Event()
    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), lambda *_: done.set())
    while not done.wait(0.5):
        pass
    server.shutdown()
