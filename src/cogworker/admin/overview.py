"""``cogworker stats`` (the totals) and ``cogworker metrics`` (a Prometheus endpoint)."""

from __future__ import annotations

import signal
import threading
import time

import click

from cogworker import api, metrics
from cogworker.admin.common import (
    echo_json,
    json_option,
    orphan_threshold_option,
    printable,
    redis_option,
    target,
    when,
)
from cogworker.admin.queues import queue_table
from cogworker.cli_context import chosen_redis_url
from cogworker.config import Config


@click.command("stats")
@redis_option
@json_option
@orphan_threshold_option
def stats_command(redis_url: str | None, as_json: bool, orphan_threshold: float) -> None:
    """Totals, set sizes, jobs in progress and queue latencies.

    Processed and failed totals, the sizes of the schedule, retry and dead sets, the jobs
    in progress (and those left by processes that are gone, with when they are recovered),
    and every queue's size and latency."""
    figures = api.stats(target(redis_url).client, orphan_threshold=orphan_threshold)
    if as_json:
        echo_json(figures.to_dict())
        return
    work = figures.in_progress
    click.echo(
        f"processed {figures.processed}   failed {figures.failed}   "
        f"enqueued {figures.enqueued}   scheduled {figures.scheduled_size}   "
        f"retry {figures.retry_size}   dead {figures.dead_size}   "
        f"in progress {work.running}   orphaned {work.orphaned}"
    )
    for gone in work.gone:
        click.echo(f"  {_orphaned_line(gone, orphan_threshold)}")
    if figures.queues:
        click.echo("")
        queue_table(figures)


def _orphaned_line(gone: api.GoneProcess, threshold: float) -> str:
    if gone.recover_from is None:
        due = "at the next orphan check (no last beat recorded)"
    elif gone.recover_from <= time.time():
        due = "at the next orphan check (its last beat is older than the threshold)"
    else:
        due = f"at the first orphan check after {when(gone.recover_from)}"
    return (
        f"{gone.jobs} job(s) left by {printable(gone.identity)} (gone, last beat "
        f"{when(gone.last_beat)}): back on their queues {due}, with orphan_threshold "
        f"{threshold:g}s"
    )


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
