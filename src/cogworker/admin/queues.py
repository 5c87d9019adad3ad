"""``cogworker queues``: list queues; pause, resume, clear one, or delete a job from it."""

from __future__ import annotations

import click

from cogworker import api
from cogworker.admin.common import (
    NotFound,
    Target,
    echo_json,
    entries,
    json_option,
    printable,
    redis_option,
    table,
    target,
)


def queue_table(figures: api.Stats) -> None:
    rows = [
        [q.name, str(q.size), f"{q.latency:.1f}s", "paused" if q.paused else ""]
        for q in figures.queues
    ]
    table(rows, ["QUEUE", "SIZE", "LATENCY", ""])


@click.group("queues", invoke_without_command=True)
@redis_option
@json_option
@click.pass_context
def queues_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List, pause, resume or clear queues.

    Lists every known queue with its size, latency and paused state; pause, resume or
    clear one, or delete a job from one."""
    ctx.obj = target(redis_url)
    if ctx.invoked_subcommand is None:
        figures = api.stats(ctx.obj.client)
        if as_json:
            echo_json(figures.to_dict()["queues"])
        else:
            queue_table(figures)


def known_queue(where: Target, name: str) -> api.Queue:
    known = api.queue_names(where.client)
    if name not in known:
        listed = printable(", ".join(known)) or "none"
        raise NotFound(f"unknown queue {printable(name)!r} (known: {listed})")
    return api.Queue(where.client, name)


@queues_group.command("pause")
@click.argument("name")
@click.pass_obj
def pause_queue(where: Target, name: str) -> None:
    """Stop workers taking jobs from queue NAME (jobs keep arriving)."""
    known_queue(where, name).pause()
    click.echo(f"paused queue {printable(name)} on {where.url}")


@queues_group.command("resume")
@click.argument("name")
@click.pass_obj
def resume_queue(where: Target, name: str) -> None:
    """Let workers take jobs from queue NAME again."""
    known_queue(where, name).resume()
    click.echo(f"resumed queue {printable(name)} on {where.url}")


@queues_group.command("clear")
@click.argument("name")
@click.pass_obj
def clear_queue(where: Target, name: str) -> None:
    """Delete every job waiting on queue NAME and release the unique and cron locks those
    jobs own (only while they still own them)."""
    count = known_queue(where, name).clear()
    click.echo(f"cleared queue {printable(name)} on {where.url}: {count} job(s) deleted")


@queues_group.command("delete")
@click.argument("name")
@click.argument("jid")
@click.pass_obj
def delete_from_queue(where: Target, name: str, jid: str) -> None:
    """Delete job JID from queue NAME (every copy) and release the locks it owns. An
    unreadable entry is named by its pseudo-jid (unparseable-...), as listings show it."""
    queue = known_queue(where, name)
    found = queue.locate(jid).records
    if not found:
        raise NotFound(f"no job {printable(jid)!r} on queue {printable(name)}")
    count = sum(queue.delete(raw) for raw in dict.fromkeys(record.raw for record in found))
    shown = f"job {printable(jid)} from queue {printable(name)}"
    click.echo(f"deleted {shown} on {where.url} ({entries(count)})")
