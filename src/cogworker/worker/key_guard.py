"""KeyGuard: find shared keys holding the wrong type and move them aside.

A key of the wrong type (a string where a list belongs, say) makes every command on it fail,
so one bad write would stop the system for good. Every process checks the keys it relies on
(queues, sets, registries, counters) once a minute; a wrong one is renamed to
``cogworker:quarantine:<key>:<epoch ms>:<8 hex>`` (kept 30 days, at most the 5 newest per key)
and the system recreates the key with the right type on its next write.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable

import redis

from cogworker import keys, scripts
from cogworker.config import Config

logger = logging.getLogger("cogworker")

QUARANTINE = scripts.load(__file__, "quarantine")
QUARANTINE_TTL = 30 * 86400
KEEP_COPIES = 5

FIXED: dict[str, str] = {
    keys.SCHEDULE: "zset",
    keys.RETRY: "zset",
    keys.DEAD: "zset",
    keys.LIVE_QUEUES: "zset",
    keys.QUEUES: "set",
    keys.PROCESSES: "set",
    keys.PAUSED_QUEUES: "set",
    keys.INPROGRESS_IDENTITIES: "set",
    keys.PERIODIC_DISABLED: "set",
    keys.LAST_BEAT: "hash",
    keys.PERIODIC_SCHEDULE: "hash",
    keys.REPEAT_ORPHANS: "list",
    keys.UNSETTLED: "list",
    keys.STATS_PROCESSED: "string",
    keys.STATS_FAILED: "string",
}

# registry key -> (its type, how to read its members, expected keys per member)
_REGISTRIES: dict[str, tuple[str, Callable[[str], dict[str, str]]]] = {
    keys.QUEUES: ("set", lambda name: {keys.queue(name): "list"}),
    keys.INPROGRESS_IDENTITIES: ("set", lambda ident: {keys.inprogress(ident): "list"}),
    keys.PROCESSES: (
        "set",
        lambda ident: {keys.process(ident): "hash", keys.workers(ident): "hash"},
    ),
    keys.PERIODIC_SCHEDULE: (
        "hash",
        lambda pjid: {
            keys.periodic_running(pjid): "string",
            keys.periodic_last_slot(pjid): "string",
        },
    ),
}


def expected_types(client: redis.Redis, config: Config) -> dict[str, str]:
    """Every key to check with its type: the fixed ones plus those registries list."""
    expected = dict(FIXED)
    for name in config.queues:
        expected[keys.queue(name)] = "list"
    for registry, (kind, members_of) in _REGISTRIES.items():
        try:
            if kind == "set":
                members: Iterable[str] = client.smembers(registry)  # type: ignore[assignment]
            else:
                members = client.hkeys(registry)  # type: ignore[assignment]
        except redis.ResponseError:
            continue  # a registry of the wrong type lists nothing this round
        for member in members:
            expected.update(members_of(str(member)))
    return expected


def check(client: redis.Redis, config: Config) -> list[str]:
    """Quarantine every key whose type is wrong; returns the keys moved."""
    expected = expected_types(client, config)
    names = list(expected)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
    actual_types = pipe.execute()
    moved = []
    for name, actual in zip(names, actual_types, strict=True):
        want = expected[name]
        if actual in ("none", want):
            continue
        target = keys.quarantine(name, int(time.time() * 1000), secrets.token_hex(4))
        if QUARANTINE(client, [name, target], [want, QUARANTINE_TTL]):
            moved.append(name)
            _prune(client, name)
            logger.error(
                "%s held a %s, not a %s: moved to %s (kept 30 days)", name, actual, want, target
            )
    return moved


def _prune(client: redis.Redis, name: str) -> None:
    """Keep only the newest copies of ``name`` in quarantine."""
    prefix = f"{keys.QUARANTINE_PREFIX}{name}:"
    pattern = re.compile(re.escape(prefix) + r"(\d+):[0-9a-f]{8}$")
    glob = prefix.replace("\\", "\\\\")
    for char in "*?[]":
        glob = glob.replace(char, "\\" + char)
    copies = []
    for key in client.scan_iter(match=glob + "*", count=500):
        found = pattern.match(str(key))
        if found:
            copies.append((int(found.group(1)), str(key)))
    copies.sort(reverse=True)
    stale = [key for _, key in copies[KEEP_COPIES:]]
    if stale:
        client.delete(*stale)
