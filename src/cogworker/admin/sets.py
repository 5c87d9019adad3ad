"""``cogworker retries | scheduled | dead``: list a set; retry, delete or clear its entries.

The three commands are built by one factory: the same subcommands, the set's own order and
time column. Removing entries forgets their retry history and releases the locks their jobs
still own (only while they own them), whichever set they are in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click
import redis

from cogworker import api, wire
from cogworker.admin.common import (
    NotFound,
    Target,
    echo_json,
    entries,
    json_option,
    limit_option,
    printable,
    redis_option,
    short,
    table,
    target,
    when,
)
from cogworker.graduation import Requeue


@dataclass(frozen=True)
class SetCommand:
    name: str  # the command
    noun: str  # in messages: "dead job", "retry", "scheduled job"
    open_set: Callable[[redis.Redis], api.JobSet]
    time_header: str
    newest_first: bool  # listing order
    about: str


def _row(spec: SetCommand, record: api.JobRecord) -> list[str]:
    row = [record.jid, record.job_class, record.queue or "-", when(record.score)]
    if spec.name == "retries":
        count = (record.item or {}).get("retry_count")
        budget = wire.max_retries(record.item or {})
        row.append(f"{count}/{budget}" if isinstance(count, int) else "-")
    if spec.name == "scheduled":
        return [*row, short(wire.dumps(record.args), 40)]
    return [*row, short(record.error, 60)]


def _header(spec: SetCommand) -> list[str]:
    header = ["JID", "CLASS", "QUEUE", spec.time_header]
    if spec.name == "retries":
        header.append("RETRY")
    return [*header, "ARGS" if spec.name == "scheduled" else "ERROR"]


def _by_jid(where: Target, spec: SetCommand, jid: str) -> list[api.JobRecord]:
    found = spec.open_set(where.client).find_jobs(jid)
    if not found:
        raise NotFound(f"no {spec.noun} with jid {printable(jid)!r}")
    return found


def build(spec: SetCommand) -> click.Group:
    @click.group(spec.name, invoke_without_command=True, help=spec.about)
    @redis_option
    @json_option
    @limit_option
    @click.pass_context
    def group(ctx: click.Context, /, redis_url: str | None, as_json: bool, limit: int) -> None:
        ctx.obj = target(redis_url)
        if ctx.invoked_subcommand is not None:
            return
        records = spec.open_set(ctx.obj.client).page(0, limit, newest_first=spec.newest_first)
        if as_json:
            echo_json([record.to_dict() for record in records])
        else:
            table([_row(spec, record) for record in records], _header(spec))

    @group.command("retry")
    @click.argument("jid")
    @click.pass_obj
    def retry(where: Target, jid: str) -> None:
        """Put every entry with JID on its queue now (an entry that names no queue stays)."""
        job_set = spec.open_set(where.client)
        outcomes = [job_set.retry_now(record.raw) for record in _by_jid(where, spec, jid)]
        click.echo(
            f"retried {spec.noun} {printable(jid)} on {where.url}: "
            f"{outcomes.count(Requeue.REQUEUED)} requeued, {outcomes.count(Requeue.INVALID)} not "
            f"requeueable, {outcomes.count(Requeue.GONE)} already gone"
        )

    @group.command("delete")
    @click.argument("jid")
    @click.pass_obj
    def delete(where: Target, jid: str) -> None:
        """Delete every entry with JID (unreadable entries by their unparseable-... pseudo-jid),
        its retry history and the locks its job still owns."""
        job_set = spec.open_set(where.client)
        count = sum(job_set.delete(record.raw) for record in _by_jid(where, spec, jid))
        click.echo(f"deleted {spec.noun} {printable(jid)} on {where.url} ({entries(count)})")

    @group.command("clear")
    @click.pass_obj
    def clear(where: Target) -> None:
        """Delete every entry, their retry histories and the locks their jobs still own."""
        count = spec.open_set(where.client).clear()
        click.echo(f"cleared {spec.name} on {where.url}: {entries(count)} deleted")

    return group


dead_group = build(
    SetCommand(
        "dead",
        "dead job",
        api.dead_set,
        "DIED",
        newest_first=True,
        about="List, retry, delete or clear dead jobs.\n\nLists them latest death first.",
    )
)
retries_group = build(
    SetCommand(
        "retries",
        "retry",
        api.retry_set,
        "DUE",
        newest_first=False,
        about="List, retry, delete or clear retries.\n\nLists the jobs waiting to be retried, "
        "soonest first; retry puts one on its queue now.",
    )
)
scheduled_group = build(
    SetCommand(
        "scheduled",
        "scheduled job",
        api.scheduled_set,
        "DUE",
        newest_first=False,
        about="List, run, delete or clear scheduled jobs.\n\nLists them soonest first; retry "
        "puts one on its queue now.",
    )
)
