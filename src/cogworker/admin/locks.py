"""``cogworker locks``: list the unique locks (owner jid, TTL); release one, owner-checked."""

from __future__ import annotations

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
)
from cogworker.api.locks import digest_of, read_locks
from cogworker.api.waiting import span


@click.group("locks", invoke_without_command=True)
@redis_option
@json_option
@click.pass_context
def locks_group(ctx: click.Context, /, redis_url: str | None, as_json: bool) -> None:
    """List or release unique locks.

    Lists every cogworker:unique:<digest> with the jid that owns it and its TTL. Listing
    scans the whole keyspace."""
    ctx.obj = target(redis_url)
    if ctx.invoked_subcommand is not None:
        return
    found = sorted(api.unique_locks(ctx.obj.client), key=lambda lock: lock.digest)
    if as_json:
        echo_json([lock.to_dict() for lock in found])
        return
    rows = [
        [
            lock.digest,
            lock.owner or "-",
            "none" if lock.ttl is None else span(lock.ttl),
            lock.problem or "",
        ]
        for lock in found
    ]
    table(rows, ["DIGEST", "OWNER", "TTL", ""])


@locks_group.command("release")
@click.argument("digest", required=False)
@click.option("--jid", help="Only the lock(s) this jid owns.")
@click.pass_obj
def release_lock(where: Target, digest: str | None, jid: str | None) -> None:
    """Release the unique lock DIGEST (bare or as its full key), or every lock --jid JID
    owns; with both, DIGEST only if JID owns it. A lock is deleted only while its owner is
    the one read (or given), so a lock taken over meanwhile is left alone."""
    if digest is None and jid is None:
        raise click.UsageError("name a DIGEST or pass --jid JID")
    if digest is None:
        released = api.release_owned_by(where.client, str(jid))
        if not released:
            raise NotFound(f"no unique lock is owned by {printable(str(jid))!r}")
        for lock in released:
            shown = f"{printable(lock.key)} (owner {printable(str(jid))})"
            click.echo(f"released {shown} on {where.url}")
        return
    (lock,) = read_locks(where.client, [digest_of(digest)])
    outcome = api.release_lock(where.client, digest, owner=jid)
    if outcome is api.Release.RELEASED:
        shown = f"{printable(lock.key)} (owner {printable(str(lock.owner))})"
        click.echo(f"released {shown} on {where.url}")
        return
    if outcome is api.Release.NOT_HELD:
        raise NotFound(f"no unique lock {printable(lock.key)}")
    if outcome is api.Release.NOT_A_LOCK:
        raise NotFound(f"{printable(lock.key)} holds another type, not a lock: nothing released")
    raise NotFound(
        f"{printable(lock.key)} is owned by {printable(str(lock.owner))}, not "
        f"{printable(str(jid))}: nothing released"
    )
