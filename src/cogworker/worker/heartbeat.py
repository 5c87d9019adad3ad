"""The heartbeat: this process's presence in Redis, and its ear for remote commands.

Every ``heartbeat_interval`` (5 s) it writes the presence hash ``cogworker:process:<identity>``
(TTL ``presence_ttl``, 60 s; the one write a beat must make), registers the process and its
queues, stamps its last beat on Redis's clock (orphan recovery judges death by it), keeps
running cron locks alive and retries deferred lock releases. A second thread listens for
remote commands (``signals.py``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from cogworker import keys, locks, redis_errors, scripts, wire
from cogworker.failure import Rejection
from cogworker.fetch import Work
from cogworker.periodic.running_lock import active_ttl
from cogworker.worker import proctitle
from cogworker.worker.identity import hostname
from cogworker.worker.signals import SignalListener

if TYPE_CHECKING:
    from redis.client import Pipeline

    from cogworker.config import Config
    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

STARTUP_RETRY_INTERVAL = 1.0
LIVE_QUEUES_WINDOW = 86_400
LIVE_QUEUES_TRIM_INTERVAL = 60.0

RETAKE = scripts.load(__file__, "retake")


class Beats:
    """Whether this process's beats get through, and when they last came back after some
    were missed: after a failure (an outage), or after a stall (no beat for two intervals:
    the process was frozen, swapped out, starved). The scheduler gives other processes two
    beats to reappear after that before judging any of them dead, since whatever kept our
    beats away may have kept theirs away too."""

    def __init__(
        self, interval: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``interval``: the heartbeat interval (None: stalls aren't noticed)."""
        self.failing = False
        self.resumed_at: float | None = None  # on ``clock``
        self._interval = interval
        self._clock = clock
        self._last_success: float | None = None
        self.stalled_for: float | None = None  # the gap, when the last beat ended a stall

    def failed(self) -> None:
        self.failing = True

    def succeeded(self) -> bool:
        """Record a beat that got through; True if beats were missed before it."""
        now = self._clock()
        gap = None if self._last_success is None else now - self._last_success
        stalled = self._interval is not None and gap is not None and gap > 2 * self._interval
        self.stalled_for = gap if stalled and not self.failing else None
        resumed, self.failing, self._last_success = self.failing or stalled, False, now
        if resumed:
            self.resumed_at = now
        return resumed


def presence_seconds(config: Config) -> int:
    """The presence key's TTL in whole seconds (EXPIRE takes no fractions), never shorter
    than configured."""
    return math.ceil(config.presence_ttl)


def rss_kb() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def redis_now(client: redis.Redis) -> int:
    """Redis's clock in whole seconds, or the host's when TIME is refused (ACL, proxy)."""
    try:
        seconds, _ = client.time()
        return int(seconds)
    except redis.ResponseError:
        return int(time.time())


class Heartbeat:
    def __init__(
        self,
        config: Config,
        manager: Manager,
        on_signal: Callable[[str], None],
        *,
        supervisor: str | None = None,
    ) -> None:
        """``supervisor``: the identity of the swarm supervisor that forked this process."""
        self.config = config
        self.supervisor = supervisor
        self.manager = manager
        self.identity = manager.identity
        self._client = config.redis()
        self._stopping = threading.Event()
        self._started_at: float | None = None
        self.beats = Beats(config.heartbeat_interval)
        self._next_trim = 0.0
        self._beat_thread = threading.Thread(target=self._beat_loop, name="heartbeat", daemon=True)
        self._signals = SignalListener(config, self.identity, self._client, on_signal, supervisor)
        self._listen_thread = self._signals.thread
        self.subscribed = self._signals.subscribed

    # -- start / stop ------------------------------------------------------------------------

    def start(self, abort_if: Callable[[], bool]) -> bool:
        """Beat until one succeeds (1 s apart); False if ``abort_if()`` turned true first."""
        while True:
            if self.beat():
                break
            if abort_if():
                return False
            time.sleep(STARTUP_RETRY_INTERVAL)
            if abort_if():
                return False
        self._beat_thread.start()
        self._signals.start()
        return True

    def stop(self) -> None:
        self._stopping.set()
        self._signals.stop()
        self.clean_up()

    def clean_up(self) -> None:
        """Remove this process's presence (clean shutdown); errors are only logged."""
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.delete(keys.process(self.identity), keys.workers(self.identity))
            pipe.srem(keys.PROCESSES, self.identity)
            pipe.llen(keys.inprogress(self.identity))
            *_, listed = pipe.execute()
            if listed == 0:
                pipe = self._client.pipeline(transaction=False)
                pipe.srem(keys.INPROGRESS_IDENTITIES, self.identity)
                pipe.hdel(keys.LAST_BEAT, self.identity)
                pipe.execute()
        except redis.RedisError as error:
            logger.error("Heartbeat: couldn't remove presence: %s", error)

    # -- beating -----------------------------------------------------------------------------

    def _beat_loop(self) -> None:
        while not self._stopping.wait(self.config.heartbeat_interval):
            self.beat()

    @property
    def beat_failed(self) -> bool:
        return self.beats.failing

    def beat(self) -> bool:
        try:
            self._beat()
        except Exception as error:
            self.beats.failed()
            redis_errors.reporter.report("Heartbeat", error)
            return False
        resumed = self.beats.succeeded()
        if self.beats.stalled_for is not None:
            logger.warning(
                "Heartbeat: no beat for %.1fs (this process was stalled: frozen, starved or "
                "suspended); judging other processes dead waits %.1fs, two beats",
                self.beats.stalled_for,
                2 * self.config.heartbeat_interval,
            )
        redis_errors.reporter.recovered("Heartbeat")
        self._keep_locks_alive(retake=resumed)
        try:
            locks.deferred.retry_all(self._client)
        except redis.RedisError as error:
            redis_errors.reporter.report("Deferred releases", error)
        return True

    def _info(self) -> str:
        if self._started_at is None:
            self._started_at = wire.now()
        return wire.dumps(
            {
                "hostname": hostname(),
                "pid": os.getpid(),
                "concurrency": self.config.concurrency,
                "queues": self.config.queues,
                "started_at": self._started_at,
                "rss_kb": rss_kb(),
                "tag": self.config.tag,
                "identity": self.identity,
                # an extra field (Ruby ignores it): readers call a process whose last beat is
                # older than three of these silent, and don't count it busy
                "beat_interval": self.config.heartbeat_interval,
                # an extra field (Ruby ignores it): the swarm this process belongs to
                **({"supervisor": self.supervisor} if self.supervisor else {}),
            }
        )

    def _beat(self) -> None:
        """The presence hash first (a beat fails without it), then the registries, each
        write on its own: one refused is logged, the others still land."""
        now = redis_now(self._client)
        self._write_presence(now)
        writes = self._registry_writes(now)
        pipe = self._client.pipeline(transaction=False)
        for _, queue_write in writes:
            queue_write(pipe)
        replies = pipe.execute(raise_on_error=False)
        for (what, _), reply in zip(writes, replies, strict=True):
            if isinstance(reply, Exception):
                if redis_errors.is_unavailable(reply):
                    raise reply
                logger.error("Heartbeat: %s not written: %s", what, reply)

    def _write_presence(self, now: int) -> None:
        manager = self.manager
        busy, quiet = manager.ledger.busy, manager.quiet
        presence = keys.process(self.identity)
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(
            presence,
            mapping={
                "info": self._info(),
                "busy": str(busy),
                "quiet": "true" if quiet else "false",
                "beat": str(now),  # an extra field (Ruby ignores it): the API's "last beat"
            },
        )
        pipe.expire(presence, presence_seconds(self.config))
        pipe.execute()
        state = "stopping" if manager.stopping.is_set() else ("quiet" if quiet else "")
        proctitle.set_title(
            proctitle.worker_title(self.config.tag, busy, self.config.concurrency, state)
        )

    def _registry_writes(self, now: int) -> list[tuple[str, Callable[[Pipeline], object]]]:
        queues = list(dict.fromkeys(self.config.queues))
        writes: list[tuple[str, Callable[[Pipeline], object]]] = [
            ("process registry", lambda p: p.sadd(keys.PROCESSES, self.identity)),
            ("queue registry", lambda p: p.sadd(keys.QUEUES, *queues)),
            ("live queues", lambda p: p.zadd(keys.LIVE_QUEUES, dict.fromkeys(queues, now))),
            (
                "workers expiry",
                lambda p: p.expire(keys.workers(self.identity), presence_seconds(self.config)),
            ),
        ]
        if time.monotonic() >= self._next_trim:  # entries live a day: once a minute will do
            self._next_trim = time.monotonic() + LIVE_QUEUES_TRIM_INTERVAL
            cutoff = now - LIVE_QUEUES_WINDOW
            writes.append(
                ("live queues trim", lambda p: p.zremrangebyscore(keys.LIVE_QUEUES, "-inf", cutoff))
            )
        if self.manager.strategy.current().keeps_in_progress:  # orphan recovery reads these
            writes += [
                (
                    "in-progress registry",
                    lambda p: p.sadd(keys.INPROGRESS_IDENTITIES, self.identity),
                ),
                ("last beat", lambda p: p.hset(keys.LAST_BEAT, self.identity, str(now))),
            ]
        return writes

    def _keep_locks_alive(self, *, retake: bool) -> None:
        ttl = active_ttl(self.config)
        ledger = self.manager.ledger
        for work in ledger.performing():
            try:
                lock, retakes = _cron_lock(work)
                if lock is None:
                    continue
                if retake and retakes:
                    retake_lock = functools.partial(RETAKE, self._client, [lock], [work.jid, ttl])
                    ledger.while_performing(work, retake_lock)
                else:
                    locks.expire_if_owned(self._client, lock, work.jid, ttl)
            except (ValueError, redis.RedisError) as error:
                logger.error(
                    "Heartbeat: couldn't refresh the cron lock of %s: %s", work.raw[:100], error
                )


def _cron_lock(work: Work) -> tuple[str | None, bool]:
    """The running lock of a cron run (None for another job), and whether the run re-takes
    it after an outage (an ``until_executed`` entry's run: it may have expired meanwhile)."""
    job = work.job
    if isinstance(job, Rejection):
        raise ValueError(f"not a job ({job.message})")
    pjid = job.get("periodic_pjid")
    if not isinstance(pjid, str):
        return None, False
    return keys.periodic_running(pjid), job.get("periodic_until_executed") is True
