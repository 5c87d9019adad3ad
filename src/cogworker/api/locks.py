"""Unique locks as an operator sees them: each ``cogworker:unique:<digest>`` with the jid that
owns it and its TTL, and owner-checked release by digest or by owner.

Listing walks the keyspace with SCAN (1,000 keys a step, one round trip each, plus one for
the owners and TTLs of the locks found in that step): its cost follows the size of the whole
database, not the number of locks.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, locks

SCAN_COUNT = 1000


@dataclass(frozen=True)
class UniqueLock:
    digest: str
    owner: str | None  # None: released meanwhile, or the key holds another type
    ttl: int | None  # seconds left; None: no expiry (or gone)
    problem: str | None = None  # why it isn't a usable lock, if it isn't

    @property
    def key(self) -> str:
        return keys.unique(self.digest)

    def to_dict(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "key": self.key,
            "owner": self.owner,
            "ttl": self.ttl,
            "problem": self.problem,
        }


class Release(enum.Enum):
    RELEASED = "released"
    NOT_HELD = "not held"  # no such lock (never taken, expired or released)
    HELD_BY_OTHER = "held by another job"  # the owner given isn't the owner now
    NOT_A_LOCK = "not a lock"  # the key holds another type


def digest_of(text: str) -> str:
    """A digest given either bare or as its full key."""
    return text.removeprefix(keys.UNIQUE_PREFIX)


def _ttl(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and value >= 0 else None


def read_locks(client: redis.Redis, digests: list[str]) -> list[UniqueLock]:
    """The current owner and TTL of each digest's lock, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for digest in digests:
        pipe.get(keys.unique(digest))
        pipe.ttl(keys.unique(digest))
    replies = pipe.execute(raise_on_error=False)
    found = []
    for index, digest in enumerate(digests):
        owner, ttl = replies[2 * index], replies[2 * index + 1]
        if isinstance(owner, Exception):
            found.append(UniqueLock(digest, None, _ttl(ttl), "holds another type, not a lock"))
        else:
            found.append(UniqueLock(digest, None if owner is None else str(owner), _ttl(ttl)))
    return found


def unique_locks(client: redis.Redis) -> Iterator[UniqueLock]:
    """Every unique lock, in keyspace order (a lock taken or released meanwhile may be missed
    or shown released)."""
    seen: set[str] = set()
    cursor = 0
    while True:
        cursor, names = client.scan(cursor, match=keys.UNIQUE_PREFIX + "*", count=SCAN_COUNT)
        digests = [digest_of(str(name)) for name in names if str(name) not in seen]
        seen.update(keys.unique(digest) for digest in digests)
        if digests:
            yield from (lock for lock in read_locks(client, digests) if lock.owner or lock.problem)
        if cursor == 0:
            return


def release(client: redis.Redis, digest: str, owner: str | None = None) -> Release:
    """Delete the lock of ``digest`` (bare, or its full key) if ``owner`` (default: whoever
    owns it when read) still owns it at the moment of deletion."""
    (lock,) = read_locks(client, [digest_of(digest)])
    if lock.problem:
        return Release.NOT_A_LOCK
    if lock.owner is None:
        return Release.NOT_HELD
    if owner is not None and owner != lock.owner:
        return Release.HELD_BY_OTHER
    if locks.delete_if_owned(client, lock.key, lock.owner):
        return Release.RELEASED
    return Release.HELD_BY_OTHER  # it changed hands between the read and the delete


def release_owned_by(client: redis.Redis, jid: str) -> list[UniqueLock]:
    """Release every unique lock ``jid`` owns (owner-checked); the locks released."""
    return [
        lock
        for lock in unique_locks(client)
        if lock.owner == jid and locks.delete_if_owned(client, lock.key, jid)
    ]
