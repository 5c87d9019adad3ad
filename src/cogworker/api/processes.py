"""Live worker processes and what they are running; remote quiet / resume / stop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, scripts, wire

COMMANDS = wire.SIGNAL_COMMANDS
SIGNAL = scripts.load(__file__, "signal")


@dataclass(frozen=True)
class Process:
    client: redis.Redis
    identity: str
    info: dict[str, Any]
    busy: int
    quiet: bool
    last_beat: int | None
    silent: bool = False
    """Its presence still lives but it hasn't beaten for three of its heartbeat intervals
    (killed, frozen, cut off): what it says it is running is probably not running. Only
    processes that publish their interval (``beat_interval``, cogworker's Python ones) are
    ever silent."""

    @property
    def hostname(self) -> str:
        return str(self.info.get("hostname", ""))

    @property
    def pid(self) -> int | None:
        pid = self.info.get("pid")
        return pid if isinstance(pid, int) else None

    @property
    def concurrency(self) -> int:
        value = self.info.get("concurrency")
        return value if isinstance(value, int) else 0

    @property
    def queues(self) -> list[str]:
        return [str(name) for name in self.info.get("queues") or []]

    @property
    def rss_kb(self) -> int | None:
        value = self.info.get("rss_kb")
        return value if isinstance(value, int) else None

    @property
    def started_at(self) -> float | None:
        value = self.info.get("started_at")
        return float(value) if isinstance(value, int | float) else None

    @property
    def supervisor(self) -> str | None:
        """The identity of the swarm supervisor that forked this process (None: standalone;
        the supervisor itself is no process of its own in ``cogworker:processes``)."""
        value = self.info.get("supervisor")
        return value if isinstance(value, str) and value else None

    def signal(self, command: str, *, whole_swarm: bool = False) -> int:
        """Publish ``quiet``, ``resume`` or ``stop`` to the process; how many heard it now.
        The command is also kept in a cogworker process's presence (``wire.SIGNAL_FIELD``),
        which it takes when it subscribes again: a 0 (not listening, as during a fail-over)
        loses it only for a Ruby process. ``whole_swarm``: a stop sent to a swarm child stops
        its whole swarm (the child passes it to its supervisor), where a plain stop stops the
        child alone, and its supervisor forks a replacement."""
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
        message = wire.SWARM_STOP if whole_swarm and command == "stop" else command
        if message == wire.SWARM_STOP and self.supervisor is None:
            message = command  # a standalone process: it is its own whole
        channel = keys.signal_channel(self.identity)
        if "beat_interval" not in self.info:  # a Ruby process: it only ever hears the channel
            return int(self.client.publish(channel, message))
        try:
            presence = [keys.process(self.identity)]
            return int(SIGNAL(self.client, presence, [channel, message, wire.SIGNAL_FIELD]))
        except redis.ResponseError:  # refused (an ACL rule) before PUBLISH: publish alone
            return int(self.client.publish(channel, message))

    def quiet_down(self) -> int:
        return self.signal("quiet")

    def resume(self) -> int:
        return self.signal("resume")

    def stop(self) -> int:
        return self.signal("stop")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _silent(info: dict[str, Any], last_beat: int | None, now: int) -> bool:
    interval = info.get("beat_interval")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or last_beat is None:
        return False
    return now - last_beat > 3 * interval + 1  # + 1: beats are stamped in whole seconds


class ProcessSet:
    """Every live process; members whose presence expired are removed while iterating."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __iter__(self) -> Iterator[Process]:
        identities = sorted(str(name) for name in self.client.smembers(keys.PROCESSES))
        if not identities:
            return
        pipe = self.client.pipeline(transaction=False)
        for identity in identities:
            pipe.hgetall(keys.process(identity))
        pipe.hmget(keys.LAST_BEAT, identities)
        pipe.time()
        *hashes, stamps, clock = pipe.execute(raise_on_error=False)
        for reply in (*hashes, stamps):
            if isinstance(reply, Exception):
                raise reply
        # Redis's clock, which stamped the beats; this host's if TIME is refused (ACL, proxy)
        now = time.time() if isinstance(clock, Exception) else clock[0]
        stale = [
            identity for identity, fields in zip(identities, hashes, strict=True) if not fields
        ]
        if stale:  # before yielding: a caller may stop early
            self.client.srem(keys.PROCESSES, *stale)
        for identity, fields, stamp in zip(identities, hashes, stamps, strict=True):
            if not fields:
                continue
            try:
                info = wire.loads(fields.get("info") or "{}")
            except (ValueError, RecursionError):
                info = {}
            info = info if isinstance(info, dict) else {}
            last_beat = _int(fields.get("beat")) or _int(stamp)
            yield Process(
                client=self.client,
                identity=identity,
                info=info,
                busy=_int(fields.get("busy")) or 0,
                quiet=fields.get("quiet") == "true",
                last_beat=last_beat,
                silent=_silent(info, last_beat, int(now)),
            )

    def find(self, identity: str) -> Process | None:
        return next((process for process in self if process.identity == identity), None)

    def size(self) -> int:
        return sum(1 for _ in self)

    def total_busy(self) -> int:
        """Busy threads of the processes that still beat."""
        return sum(process.busy for process in self if not process.silent)


@dataclass(frozen=True)
class Work:
    """One job running now: which process and thread, since when, and the job.

    ``readable`` is False for an entry that isn't the usual JSON (its ``job`` is then empty
    and ``raw`` holds the entry as stored): the thread runs something nobody can name."""

    identity: str
    thread_id: str
    queue: str
    run_at: int | None
    job: dict[str, Any]
    raw: str = ""
    readable: bool = True

    @property
    def jid(self) -> str | None:
        jid = self.job.get("jid")
        return jid if isinstance(jid, str) else None


def parse_work(identity: str, thread_id: str, raw: str) -> Work:
    """A ``cogworker:workers:<identity>`` entry: ``{"queue", "payload", "run_at"}``."""
    try:
        entry = wire.loads(raw)
    except (ValueError, RecursionError):
        entry = None
    if not isinstance(entry, dict):
        return Work(identity, thread_id, "", None, {}, raw, readable=False)
    payload = entry.get("payload")
    queue = entry.get("queue")
    return Work(
        identity=identity,
        thread_id=thread_id,
        queue=queue if isinstance(queue, str) else "",
        run_at=_int(entry.get("run_at")),
        job=payload if isinstance(payload, dict) else {},
        raw=raw,
        readable=isinstance(payload, dict),
    )


def work_of(client: redis.Redis, identities: list[str]) -> dict[str, list[Work]]:
    """What each process's threads are running, by identity (dead processes too, while
    their entries last), in one round trip."""
    if not identities:
        return {}
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        pipe.hgetall(keys.workers(identity))
    return {
        identity: [
            parse_work(identity, str(thread_id), str(raw))
            for thread_id, raw in sorted(entries.items())
        ]
        for identity, entries in zip(identities, pipe.execute(), strict=True)
    }


class WorkSet:
    """What every live process is running right now."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __iter__(self) -> Iterator[Work]:
        identities = [process.identity for process in ProcessSet(self.client)]
        for works in work_of(self.client, identities).values():
            yield from works

    def size(self) -> int:
        return sum(1 for _ in self)
