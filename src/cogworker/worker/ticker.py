"""The ticker: fires cron entries, each slot exactly once across every process, with no leader.

Every process computes each entry's slot (its latest fire time not after now) and tries to
claim it in Redis (``periodic_claim.lua``): ``last_slot`` only moves forward and a per-slot NX
lock breaks the tie between two processes, so one process wins each slot. The winner pushes
the job; if the push fails the claim is rolled back (``periodic_rollback.lua``) so the slot can
run on the next tick. The running lock of an ``until_executed`` entry is written by the claim
with a 20 s TTL and extended to ``unique_lock_ttl`` once the job is queued, so a process killed
between claim and push loses that slot but doesn't close the entry for a day.

The ticker wakes at the soonest next fire time of its entries (and at least every 5 s), so a
per-second schedule misses no slot while the process keeps up; a tick in which no entry reached
a new slot sends no command at all. It starts ticking only once the process's first orphan
check has completed, so a run interrupted by a fleet-wide outage is requeued (re-taking its
lock) before a new slot is claimed.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from cogworker import keys, locks, redis_errors, scripts, wire
from cogworker.client import Client
from cogworker.periodic.entries import Entry
from cogworker.periodic.running_lock import CLAIMED_TTL, queued_ttl

if TYPE_CHECKING:
    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

TICK_INTERVAL = 5.0
LOCK_TTL = 20
BACKOFF_MAX = 300.0
BLOCKED_GRACE = 15.0

CLAIM = scripts.load(__file__, "periodic_claim")
ROLLBACK = scripts.load(__file__, "periodic_rollback")


@dataclass
class _State:
    """What this process knows of one entry."""

    next_fire: float = 0.0  # epoch: nothing to do for this entry before then
    checked_slot: int | None = None  # the last slot this process decided about
    blocked_since: tuple[int, float] | None = None  # (slot, monotonic) first found blocked
    failures: int = 0


@dataclass(frozen=True)
class _Rollback:
    entry: Entry
    slot: int
    previous: str
    jid: str


def publish(client: redis.Redis, entries: list[Entry], replace: bool) -> None:
    """Write the schedule the Web UI shows: add these entries, or be exactly these."""
    values = {entry.pjid: entry.published() for entry in entries}
    if not values and not replace:
        return
    pipe = client.pipeline(transaction=True)
    if replace:
        pipe.delete(keys.PERIODIC_SCHEDULE)
    if values:
        pipe.hset(keys.PERIODIC_SCHEDULE, mapping=values)  # type: ignore[arg-type]
    pipe.execute()


class Ticker:
    def __init__(self, manager: Manager, ready: threading.Event) -> None:
        self.manager = manager
        self.config = manager.config
        self.entries = list(self.config.periodic.entries)
        self._client = manager.client
        self._pusher = Client(self.config)
        self._ready = ready
        self._stopping = threading.Event()
        self._states = {entry.pjid: _State() for entry in self.entries}
        self._rollbacks: dict[tuple[str, int], _Rollback] = {}
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        try:
            publish(self._client, self.entries, self.config.periodic.replace)
        except redis.RedisError as error:
            logger.error("Periodic schedule not published: %s", error)
        if self.entries:
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self._ready.is_set() and not self.manager.quiet:
                try:
                    self.tick()
                except Exception as error:
                    logger.error("Periodic tick failed: %s", error)
            self._stopping.wait(self._sleep_time())

    def _sleep_time(self) -> float:
        if not self._ready.is_set() or self.manager.quiet:
            return 0.2
        now = time.time()
        soonest = min((state.next_fire for state in self._states.values()), default=now + 5)
        return min(max(soonest - now, 0.0) + 0.001, TICK_INTERVAL)

    # -- one tick ----------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        moment = time.time() if now is None else now
        self._retry_rollbacks()
        if len(locks.deferred):
            try:
                locks.deferred.retry_all(self._client)
            except redis.RedisError as error:
                redis_errors.reporter.report("Deferred releases", error)
        due = self._due_entries(moment)
        if not due:
            return
        try:
            disabled = self._disabled()
            claims = [(entry, slot) for entry, slot in due if entry.pjid not in disabled]
            for entry, slot in due:
                if entry.pjid in disabled:
                    self._states[entry.pjid].checked_slot = slot  # skipped, not claimed
            if claims:
                self._claim_and_push(claims)
        except redis.RedisError as error:
            if not redis_errors.is_unavailable(error):
                raise
            for entry, _ in due:  # Redis is down: look at these slots again in 5 s
                self._failed(entry, error)

    def _due_entries(self, now: float) -> list[tuple[Entry, int]]:
        """Entries that reached a slot this process hasn't decided about (no Redis call)."""
        due = []
        for entry in self.entries:
            state = self._states[entry.pjid]
            if now < state.next_fire:
                continue
            try:
                slot = entry.schedule.slot(now, hint=state.checked_slot)
                state.next_fire = entry.schedule.next_after(slot)
            except Exception as error:
                self._failed(entry, error)
                continue
            if slot != state.checked_slot:
                due.append((entry, slot))
        return due

    def _disabled(self) -> set[str]:
        try:
            return {str(pjid) for pjid in self._client.smembers(keys.PERIODIC_DISABLED)}
        except redis.ResponseError as error:
            logger.error(
                "Periodic: can't read periodic:disabled (%s); treating entries as enabled", error
            )
            return set()

    def _claim_and_push(self, claims: list[tuple[Entry, int]]) -> None:
        jids = [wire.new_jid() for _ in claims]
        results = self._claim_all(claims, jids)
        queued: list[tuple[Entry, str]] = []  # until_executed runs pushed: extend their locks
        for (entry, slot), jid, result in zip(claims, jids, results, strict=True):
            state = self._states[entry.pjid]
            try:
                if isinstance(result, Exception):
                    raise result
                if result == 2 and not self._blocked_too_long(state, slot):
                    # a release delayed by an outage may still land: look again shortly
                    state.next_fire = time.time() + 1.0
                    continue
                won = isinstance(result, list) and result and int(result[0]) == 1
                if won and self._push(entry, slot, jid, str(result[1])):
                    queued.append((entry, jid))
                state.checked_slot = slot
                state.blocked_since = None
                state.failures = 0
                redis_errors.reporter.recovered("Periodic tick")
            except Exception as error:
                self._failed(entry, error)
        self._hold_until_run(queued)

    def _claim_all(self, claims: list[tuple[Entry, int]], jids: list[str]) -> list[Any]:
        """Claim every due slot in one round trip (priming instead when catch-up is off)."""
        batch = scripts.Batch(self._client)
        primes: list[int | None] = []  # where the priming SET's reply is, per claim
        positions = []
        for (entry, slot), jid in zip(claims, jids, strict=True):
            state = self._states[entry.pjid]
            priming = not self.config.periodic_catch_up and state.checked_slot is None
            primes.append(len(batch) if priming else None)
            if priming:
                batch.pipe.set(keys.periodic_last_slot(entry.pjid), slot, nx=True)
            script_keys = [
                keys.periodic_running(entry.pjid),
                keys.periodic_last_slot(entry.pjid),
                keys.periodic_lock(entry.pjid, slot),
            ]
            args: list[Any] = [slot, entry.unique or "", LOCK_TTL, jid, CLAIMED_TTL]
            positions.append(batch.script(CLAIM, script_keys, args))
        replies = batch.execute()
        return [
            0 if prime is not None and replies[prime] is True else replies[position]
            for prime, position in zip(primes, positions, strict=True)
        ]

    def _blocked_too_long(self, state: _State, slot: int) -> bool:
        clock = time.monotonic()
        if state.blocked_since is None or state.blocked_since[0] != slot:
            state.blocked_since = (slot, clock)
        return clock - state.blocked_since[1] >= BLOCKED_GRACE

    def _push(self, entry: Entry, slot: int, jid: str, previous: str) -> bool:
        """Push the slot's job; True if it is an until_executed run now queued."""
        item: dict[str, Any] = {
            "class": entry.job,
            "args": copy.deepcopy(entry.args),  # middleware may edit the payload in place
            "retry": entry.retry,
            "queue": entry.queue,
            "periodic_pjid": entry.pjid,
            "periodic_slot": slot,
            "jid": jid,
        }
        if entry.until_executed:
            item["periodic_until_executed"] = True
        try:
            pushed = self._pusher.push(item)
        except Exception:
            self._rollback(_Rollback(entry, slot, previous, jid))
            raise
        if pushed is None:
            if entry.until_executed:
                locks.release_key(self._client, keys.periodic_running(entry.pjid), jid)
            return False
        if pushed != jid:
            logger.warning(
                "periodic %s: a client middleware changed the job's jid (%s -> %s); its running "
                "lock won't be released by the job and keeps the entry closed for up to %ss",
                entry.pjid,
                jid,
                pushed,
                queued_ttl(self.config),
            )
        return entry.until_executed

    def _hold_until_run(self, queued: list[tuple[Entry, str]]) -> None:
        """These runs are queued: their running locks now last ``unique_lock_ttl`` (each run
        shortens its own when it starts). Owner-checked, one round trip for all."""
        if not queued:
            return
        ttl = queued_ttl(self.config)
        batch = scripts.Batch(self._client)
        for entry, jid in queued:
            batch.script(locks.EXPIRE_IF_OWNED, [keys.periodic_running(entry.pjid)], [jid, ttl])
        try:
            replies = batch.execute()
        except redis.RedisError as error:
            replies = [error] * len(queued)
        for (entry, jid), reply in zip(queued, replies, strict=True):
            if isinstance(reply, Exception):
                logger.warning(
                    "periodic %s: couldn't extend the running lock of jid=%s (it expires %ds "
                    "after the claim unless the run starts first): %s",
                    entry.pjid,
                    jid,
                    CLAIMED_TTL,
                    reply,
                )

    # -- rollbacks and failures --------------------------------------------------------------

    def _rollback(self, rollback: _Rollback) -> None:
        entry = rollback.entry
        script_keys = [
            keys.periodic_last_slot(entry.pjid),
            keys.periodic_lock(entry.pjid, rollback.slot),
            keys.periodic_running(entry.pjid),
        ]
        try:
            ROLLBACK(self._client, script_keys, [rollback.slot, rollback.previous, rollback.jid])
            self._rollbacks.pop((entry.pjid, rollback.slot), None)
        except redis.RedisError as error:
            key = (entry.pjid, rollback.slot)
            if key not in self._rollbacks or not redis_errors.is_unavailable(error):
                logger.error(
                    "%s: couldn't roll back slot %d (will retry): %s",
                    entry.pjid,
                    rollback.slot,
                    error,
                )
            else:  # retries during an outage: collapsed into one line per outage
                redis_errors.reporter.report("Periodic rollback", error)
            self._rollbacks[key] = rollback

    def _retry_rollbacks(self) -> None:
        for rollback in list(self._rollbacks.values()):
            self._rollback(rollback)

    def _failed(self, entry: Entry, error: BaseException) -> None:
        """Back this entry off (5, 10, 20 ... 300 s; 5 s while Redis is unavailable)."""
        state = self._states[entry.pjid]
        if redis_errors.is_unavailable(error):
            delay = TICK_INTERVAL
            redis_errors.reporter.report("Periodic tick", error)
        else:
            state.failures += 1
            delay = min(TICK_INTERVAL * 2 ** (state.failures - 1), BACKOFF_MAX)
            logger.error(
                "Periodic tick: %s (%s) failed (next try in %.0fs): %s: %s",
                entry.pjid,
                entry.cron,
                delay,
                type(error).__name__,
                error,
            )
        state.next_fire = time.time() + delay
