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
        "concurrency": process.concurrency,
        "queues": process.queues,
        "rss_kb": process.rss_kb,
        "last_beat": process.last_beat,
        "started_at": process.started_at,
    }


@click.group("processes", invoke_without_command=True)
@redis_option
@json_option
@click.pass_context
def processes_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List, quiet, resume or stop worker processes.

    Lists the live processes (busy threads, quiet, queues, last beat); quiet, resume or
    stop one (IDENTITY) or all (--all)."""
    ctx.obj = target(redis_url)
    if ctx.invoked_subcommand is not None:
        return
    found = list(api.ProcessSet(ctx.obj.client))
    if as_json:
        echo_json([_process_dict(process) for process in found])
        return
    table(
        [
            [
                p.identity,
                f"{p.busy}/{p.concurrency}",
                "quiet" if p.quiet else "",
                ",".join(dict.fromkeys(p.queues)),
                when(p.last_beat),
            ]
            for p in found
        ],
        ["IDENTITY", "BUSY", "", "QUEUES", "LAST BEAT"],
    )


def _signal(where: Target, command: str, identity: str | None, every: bool) -> None:
    if not every and not identity:
        raise click.UsageError("name an IDENTITY or pass --all")
    found = list(api.ProcessSet(where.client))
    targets = found if every else [p for p in found if p.identity == identity]
    if not targets:
        raise NotFound(
            f"no live process {printable(identity)!r}" if identity else "no live process"
        )
    for process in targets:
        heard = process.signal(command)
        note = "" if heard else " (not listening: command lost)"
        click.echo(f"{command} -> {printable(process.identity)} on {where.url}{note}")


def _signal_command(command: str, about: str) -> None:
    @processes_group.command(command, help=about)
    @click.argument("identity", required=False)
    @click.option("--all", "every", is_flag=True, help="Every live process.")
    @click.pass_obj
    def send(where: Target, identity: str | None, every: bool) -> None:
        _signal(where, command, identity, every)


_signal_command("quiet", "Make IDENTITY (or --all) stop taking new jobs; running ones finish.")
_signal_command("resume", "Make a quiet IDENTITY (or --all) take new jobs again.")
_signal_command("stop", "Make IDENTITY (or --all) shut down as on TERM (running jobs finish).")


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
