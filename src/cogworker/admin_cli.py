"""Admin commands: ``cogworker stats | queues | processes | dead | metrics``.

Each reads or acts through ``cogworker.api``; ``--json`` prints machine-readable output.
An unknown queue, process or jid is a one-line error and a non-zero exit.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click
import redis

from cogworker import api, metrics
from cogworker.config import Config


class NotFound(click.ClickException):
    exit_code = 1


def _client(redis_url: str | None) -> redis.Redis:
    return Config(redis_url=redis_url).redis()


def _redis_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--redis-url", help="Redis URL (default $REDIS_URL or localhost).")(
        function
    )


def _json_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(function)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo(
            "  ".join(
                str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
        )


def _queue_table(figures: api.Stats) -> None:
    rows = [
        [q.name, str(q.size), f"{q.latency:.1f}s", "paused" if q.paused else ""]
        for q in figures.queues
    ]
    _table(rows, ["QUEUE", "SIZE", "LATENCY", ""])


@click.command("stats")
@_redis_option
@_json_option
def stats_command(redis_url: str | None, as_json: bool) -> None:
    """Totals, set sizes and every queue's size and latency."""
    figures = api.stats(_client(redis_url))
    if as_json:
        _echo_json(figures.to_dict())
        return
    click.echo(
        f"processed {figures.processed}   failed {figures.failed}   "
        f"enqueued {figures.enqueued}   scheduled {figures.scheduled_size}   "
        f"retry {figures.retry_size}   dead {figures.dead_size}"
    )
    if figures.queues:
        click.echo("")
        _queue_table(figures)


@click.group("queues", invoke_without_command=True)
@_redis_option
@_json_option
@click.pass_context
def queues_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List queues; pause, resume or clear one."""
    ctx.obj = _client(redis_url)
    if ctx.invoked_subcommand is None:
        figures = api.stats(ctx.obj)
        if as_json:
            _echo_json(figures.to_dict()["queues"])
        else:
            _queue_table(figures)


def _known_queue(client: redis.Redis, name: str) -> api.Queue:
    if name not in api.queue_names(client):
        raise NotFound(f"unknown queue {name!r} (known: {', '.join(api.queue_names(client))})")
    return api.Queue(client, name)


@queues_group.command("pause")
@click.argument("name")
@click.pass_obj
def pause_queue(client: redis.Redis, name: str) -> None:
    """Stop workers taking jobs from NAME."""
    _known_queue(client, name).pause()
    click.echo(f"paused {name}")


@queues_group.command("resume")
@click.argument("name")
@click.pass_obj
def resume_queue(client: redis.Redis, name: str) -> None:
    """Let workers take jobs from NAME again."""
    _known_queue(client, name).resume()
    click.echo(f"resumed {name}")


@queues_group.command("clear")
@click.argument("name")
@click.pass_obj
def clear_queue(client: redis.Redis, name: str) -> None:
    """Delete every job waiting on NAME."""
    count = _known_queue(client, name).clear()
    click.echo(f"cleared {name}: {count} job(s) deleted")


@click.group("processes", invoke_without_command=True)
@_redis_option
@_json_option
@click.pass_context
def processes_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List worker processes; quiet, resume or stop them."""
    ctx.obj = _client(redis_url)
    if ctx.invoked_subcommand is not None:
        return
    found = list(api.ProcessSet(ctx.obj))
    if as_json:
        _echo_json(
            [
                {
                    "identity": p.identity,
                    "busy": p.busy,
                    "quiet": p.quiet,
                    "concurrency": p.concurrency,
                    "queues": p.queues,
                    "rss_kb": p.rss_kb,
                    "last_beat": p.last_beat,
                    "started_at": p.started_at,
                }
                for p in found
            ]
        )
        return
    _table(
        [
            [
                p.identity,
                f"{p.busy}/{p.concurrency}",
                "quiet" if p.quiet else "",
                ",".join(dict.fromkeys(p.queues)),
                _when(p.last_beat),
            ]
            for p in found
        ],
        ["IDENTITY", "BUSY", "", "QUEUES", "LAST BEAT"],
    )


def _signal_processes(client: redis.Redis, command: str, identity: str | None, every: bool) -> None:
    if not every and not identity:
        raise click.UsageError("name an IDENTITY or pass --all")
    found = list(api.ProcessSet(client))
    targets = found if every else [p for p in found if p.identity == identity]
    if not targets:
        raise NotFound(f"no live process {identity!r}" if identity else "no live process")
    for process in targets:
        heard = process.signal(command)
        note = "" if heard else " (not listening: command lost)"
        click.echo(f"{command} -> {process.identity}{note}")


for _command in ("quiet", "resume", "stop"):

    def _make(command: str) -> None:
        @processes_group.command(command, help=f"Send {command} to IDENTITY (or --all).")
        @click.argument("identity", required=False)
        @click.option("--all", "every", is_flag=True, help="Every live process.")
        @click.pass_obj
        def _send(client: redis.Redis, identity: str | None, every: bool) -> None:
            _signal_processes(client, command, identity, every)

    _make(_command)


@click.group("dead", invoke_without_command=True)
@_redis_option
@_json_option
@click.option("--limit", default=50, show_default=True, help="Entries to list.")
@click.pass_context
def dead_group(ctx: click.Context, /, redis_url: str | None, as_json: bool, limit: int) -> None:
    """List dead jobs; retry or delete them by jid."""
    ctx.obj = _client(redis_url)
    if ctx.invoked_subcommand is not None:
        return
    records = api.dead_set(ctx.obj).page(0, limit)
    if as_json:
        _echo_json([record.to_dict() for record in records])
        return
    _table(
        [
            [r.jid, r.job_class, r.queue or "-", _when(r.score), (r.error or "")[:60]]
            for r in records
        ],
        ["JID", "CLASS", "QUEUE", "DIED", "ERROR"],
    )


def _dead_by_jid(client: redis.Redis, jid: str) -> list[api.JobRecord]:
    found = api.dead_set(client).find_jobs(jid)
    if not found:
        raise NotFound(f"no dead job with jid {jid!r}")
    return found


@dead_group.command("retry")
@click.argument("jid")
@click.pass_obj
def retry_dead(client: redis.Redis, jid: str) -> None:
    """Put every dead entry with JID back on its queue."""
    dead = api.dead_set(client)
    outcomes = [dead.retry_now(record.raw) for record in _dead_by_jid(client, jid)]
    click.echo(
        f"{outcomes.count('requeued')} requeued, {outcomes.count('invalid')} not "
        f"requeueable, {outcomes.count('gone')} already gone"
    )


@dead_group.command("delete")
@click.argument("jid")
@click.pass_obj
def delete_dead(client: redis.Redis, jid: str) -> None:
    """Delete every dead entry with JID."""
    dead = api.dead_set(client)
    count = sum(dead.delete(record.raw) for record in _dead_by_jid(client, jid))
    click.echo(f"{count} deleted")


@click.command("metrics")
@_redis_option
@click.option("--port", default=9191, show_default=True, help="Port to serve /metrics on.")
@click.option("--host", default="127.0.0.1", show_default=True)
def metrics_command(redis_url: str | None, port: int, host: str) -> None:
    """Serve Prometheus metrics over HTTP until TERM / INT."""
    config = Config(redis_url=redis_url)
    server = metrics.serve(config, host, port)
    click.echo(f"serving metrics on http://{host}:{server.server_address[1]}/metrics")
    done = threading.Event()
    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), lambda *_: done.set())
    while not done.wait(0.5):
        pass
    server.shutdown()


COMMANDS = [stats_command, queues_group, processes_group, dead_group, metrics_command]
