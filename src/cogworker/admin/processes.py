"""``cogworker processes`` (list; quiet, resume or stop them) and ``cogworker busy`` (what
every live process is running now)."""

from __future__ import annotations

import time

import click

from cogworker import api
from cogworker.admin.common import (
    NotFound,
    Target,
    echo_json,
    json_option,
    printable,
    redis_option,
    table,
    target,
    when,
)
from cogworker.api.waiting import span


def _process_dict(process: api.Process) -> dict[str, object]:
    return {
        "identity": process.identity,
        "busy": process.busy,
        "quiet": process.quiet,
        "silent": process.silent,
        "concurrency": process.concurrency,
        "queues": process.queues,
        "rss_kb": process.rss_kb,
        "last_beat": process.last_beat,
        "started_at": process.started_at,
        "supervisor": process.supervisor,
    }


@click.group("processes", invoke_without_command=True)
@redis_option
@json_option
@click.pass_context
def processes_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List, quiet, resume or stop worker processes.

    Lists the live processes (busy threads, quiet, queues, last beat), a swarm as its
    supervisor with its children below it; quiet, resume or stop one (IDENTITY), a whole
    swarm (its supervisor's IDENTITY) or all (--all)."""
    ctx.obj = target(redis_url)
    if ctx.invoked_subcommand is not None:
        return
    found = list(api.ProcessSet(ctx.obj.client))
    if as_json:
        echo_json([_process_dict(process) for process in found])
        return
    table(_rows(found), ["IDENTITY", "BUSY", "", "QUEUES", "LAST BEAT"])


def _rows(found: list[api.Process]) -> list[list[str]]:
    """A standalone process is one row; a swarm is its supervisor's row (its children's
    totals) where its first child would be, then each child, indented."""
    children: dict[str, list[api.Process]] = {}
    for process in found:
        if process.supervisor is not None:
            children.setdefault(process.supervisor, []).append(process)
    rows = []
    for process in found:
        supervisor = process.supervisor
        if supervisor is None:
            rows.append(_row(process.identity, [process]))
        elif children[supervisor][0] is process:
            swarm = children[supervisor]
            rows.append(_row(f"{supervisor} (swarm, {len(swarm)} children)", swarm))
            rows += [_row(f"  {child.identity}", [child]) for child in swarm]
    return rows


def _row(label: str, members: list[api.Process]) -> list[str]:
    """A silent process (no beat for three intervals) counts no busy thread: what it says
    it runs is probably not running."""
    beats = [member.last_beat for member in members if member.last_beat is not None]
    busy = sum(member.busy for member in members if not member.silent)
    if all(member.silent for member in members):
        state = "silent"
    else:
        state = "quiet" if all(member.quiet for member in members) else ""
    return [
        label,
        f"{busy}/{sum(m.concurrency for m in members)}",
        state,
        ",".join(dict.fromkeys(queue for member in members for queue in member.queues)),
        when(max(beats) if beats else None),
    ]


def _signal(where: Target, command: str, identity: str | None, every: bool) -> None:
    if not every and not identity:
        raise click.UsageError("name an IDENTITY or pass --all")
    found = list(api.ProcessSet(where.client))
    targets, whole_swarm = (found, True) if every else _aimed_at(found, identity)
    if not targets:
        raise NotFound(
            f"no live process {printable(identity)!r}" if identity else "no live process"
        )
    for process in targets:
        heard = process.signal(command, whole_swarm=whole_swarm)
        note = "" if heard else " (not listening: command lost)"
        if heard and command == "stop" and process.supervisor and not whole_swarm:
            note = (
                f" (its swarm supervisor {printable(process.supervisor)} forks a replacement;"
                " to stop the swarm, name the supervisor)"
            )
        click.echo(f"{command} -> {printable(process.identity)} on {where.url}{note}")


def _aimed_at(found: list[api.Process], identity: str | None) -> tuple[list[api.Process], bool]:
    """The process named, or else every child of the swarm whose supervisor is named (and
    True: the command is meant for the whole swarm)."""
    named = [process for process in found if process.identity == identity]
    if named:
        return named, False
    swarm = [process for process in found if process.supervisor == identity]
    return swarm, bool(swarm)


def _signal_command(command: str, about: str) -> None:
    @processes_group.command(command, help=about)
    @click.argument("identity", required=False)
    @click.option("--all", "every", is_flag=True, help="Every live process.")
    @click.pass_obj
    def send(where: Target, identity: str | None, every: bool) -> None:
        _signal(where, command, identity, every)


_signal_command("quiet", "Make IDENTITY (or --all) stop taking new jobs; running ones finish.")
_signal_command("resume", "Make a quiet IDENTITY (or --all) take new jobs again.")
_signal_command(
    "stop",
    "Make IDENTITY (or --all) shut down as on TERM (running jobs finish); a swarm's "
    "supervisor stops with all its children, a child alone is replaced by its supervisor.",
)


@click.command("busy")
@redis_option
@json_option
def busy_command(redis_url: str | None, as_json: bool) -> None:
    """List the jobs running now.

    One row per processor thread of a live process: process, thread, jid, class, queue and
    since when it runs."""
    where = target(redis_url)
    work = list(api.WorkSet(where.client))
    if as_json:
        echo_json(
            [
                {
                    "identity": w.identity,
                    "thread_id": w.thread_id,
                    "queue": w.queue,
                    "run_at": w.run_at,
                    "jid": w.jid,
                    "job": w.job if w.readable else None,
                    "raw": None if w.readable else w.raw,
                }
                for w in work
            ]
        )
        return
    now = time.time()
    rows = []
    for w in work:
        job_class = w.job.get("class") if w.readable else None
        since = f"{when(w.run_at)} ({span(now - w.run_at)})" if w.run_at is not None else "-"
        rows.append(
            [
                w.identity,
                w.thread_id,
                w.jid or "-",
                job_class if isinstance(job_class, str) else "(unparseable)",
                w.queue or "-",
                since,
            ]
        )
    table(rows, ["PROCESS", "THREAD", "JID", "CLASS", "QUEUE", "SINCE"])
