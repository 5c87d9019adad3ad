"""The swarm: a supervisor that forks ``COGWORKER_COUNT`` worker processes and keeps them up.

    COGWORKER_COUNT=4 cogworker swarm -r app.jobs -c 10

* A child that dies is forked again: at once after a healthy run, with a growing delay (1, 2,
  4 ... 60 s) while children keep dying within 30 s of their start.
* TSTP, TERM and INT are passed on to every child. After TERM / INT a child that hasn't exited
  ``shutdown_timeout + 10`` seconds later is killed, then the supervisor exits.
* USR2 restarts the children: one at a time with ``PHASED_RESTART=true`` (capacity never drops
  by more than one), else all at once.
* ``max_memory`` (MB): every 5 s the supervisor reads each child's own memory (PSS, which
  doesn't count pages shared with the supervisor); a child above it is stopped gracefully
  (running jobs finish within the shutdown timeout, the rest go back) and replaced.
* The supervisor picks each child's identity before the fork, so when it reaps a child it
  knows for certain whose jobs were left running: it hands that identity to ``recovery``
  (which requeues them at once) instead of leaving them to the orphan check.

The supervisor never runs jobs or starts threads; the one thing it may do with Redis is that
recovery, between forks. Every child boots a full worker (its own connections) right after
the fork.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cogworker.worker.identity import hostname, new_identity

logger = logging.getLogger("cogworker")

HEALTHY_UPTIME = 30.0
RESPAWN_BASE_DELAY = 1.0
RESPAWN_MAX_DELAY = 60.0
TICK = 0.2
MEMORY_CHECK_INTERVAL = 5.0
KILL_GRACE = 10.0


def respawn_delay(streak: int) -> float:
    """Delay before forking again after ``streak`` consecutive quick deaths."""
    if streak <= 1:
        return 0.0
    return float(min(RESPAWN_BASE_DELAY * 2 ** (streak - 2), RESPAWN_MAX_DELAY))


def child_memory_mb(pid: int) -> float | None:
    """A child's proportional set size in MB (Linux ``smaps_rollup``), None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # type: ignore[import-untyped]

        uss: float = psutil.Process(pid).memory_full_info().uss
        return uss / (1024 * 1024)
    except Exception:
        return None


@dataclass(frozen=True)
class Child:
    """What a forked child is told: its slot, the identity it must run under and its
    supervisor's identity (shown with it, so a swarm can be operated as one)."""

    index: int
    identity: str
    supervisor: str


def child_identity(pid: int, token: str) -> str:
    """The identity of the child with ``pid``; ``token`` is drawn by the supervisor before
    the fork, so that both sides know it."""
    return f"{hostname()}:{pid}:{token}"


class ChildRecovery(Protocol):
    """What the supervisor does with a child it reaped: ``exited`` once, ``retry`` every
    round (for recoveries that couldn't be done yet)."""

    def exited(self, identity: str, pid: int) -> None: ...

    def retry(self) -> None: ...


@dataclass
class Slot:
    index: int
    pid: int | None = None
    identity: str | None = None
    started: float = 0.0
    streak: int = 0
    respawn_at: float | None = None
    replacing: bool = False  # stopped on purpose (memory, restart): respawn without backoff


class Swarm:
    def __init__(
        self,
        count: int,
        run_child: Callable[[Child], None],
        *,
        recovery: ChildRecovery | None = None,
        shutdown_timeout: float = 25.0,
        max_memory_mb: float | None = None,
        phased: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if count < 1:  # refused, not rounded up to 1
            raise ValueError(f"a swarm needs at least 1 child, got {count}")
        self.slots = [Slot(index) for index in range(count)]
        self.run_child = run_child
        self.recovery = recovery
        self.identity = new_identity()
        self.shutdown_timeout = shutdown_timeout
        self.max_memory_mb = max_memory_mb
        self.phased = phased
        self.clock = clock
        self.signals: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stopping = False
        self.kill_at: float | None = None
        self._next_memory_check = 0.0

    # -- processes ---------------------------------------------------------------------------

    def fork(self, slot: Slot) -> None:
        token = secrets.token_hex(6)
        pid = os.fork()
        if pid == 0:  # the child
            status = 1
            try:
                for name in ("SIGTERM", "SIGINT", "SIGTSTP", "SIGUSR2", "SIGCHLD"):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
                identity = child_identity(os.getpid(), token)
                self.run_child(Child(slot.index, identity, self.identity))
                status = 0
            except SystemExit as done:
                status = (
                    done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
                )
            except BaseException:
                logger.exception("swarm child slot=%d crashed", slot.index)
            finally:
                from cogworker import logs

                logs.flush_output()
                os._exit(status)
        slot.pid, slot.started, slot.respawn_at, slot.replacing = pid, self.clock(), None, False
        slot.identity = child_identity(pid, token)
        logger.info("swarm: started child pid=%d slot=%d", pid, slot.index)

    def _send(self, sig: int, slots: list[Slot] | None = None) -> None:
        for slot in slots if slots is not None else self.slots:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, sig)

    # -- main loop ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        actions = {"SIGTSTP": "quiet", "SIGTERM": "stop", "SIGINT": "stop", "SIGUSR2": "restart"}
        for name, action in actions.items():
            signal.signal(getattr(signal, name), lambda *_, a=action: self.signals.put(a))

    def run(self) -> None:
        for slot in self.slots:
            self.fork(slot)
        while not (self.stopping and all(slot.pid is None for slot in self.slots)):
            self.step()
            time.sleep(TICK)
        logger.info("swarm: all children exited")

    def step(self) -> None:
        """One supervisor round: signals, reaping, respawns, stragglers, memory."""
        while True:
            try:
                self.handle(self.signals.get_nowait())
            except queue.Empty:
                break
        self.reap()
        if self.recovery is not None:
            self.recovery.retry()
        now = self.clock()
        for slot in self.slots:
            if (
                not self.stopping
                and slot.pid is None
                and slot.respawn_at is not None
                and now >= slot.respawn_at
            ):
                self.fork(slot)
        if self.kill_at is not None and now >= self.kill_at:
            for slot in self.slots:
                if slot.pid is not None:
                    logger.warning(
                        "swarm: child pid=%d didn't stop within %.0fs, killing",
                        slot.pid,
                        self.shutdown_timeout + KILL_GRACE,
                    )
            self._send(signal.SIGKILL)
            self.kill_at = None
        if self.max_memory_mb and now >= self._next_memory_check and not self.stopping:
            self._next_memory_check = now + MEMORY_CHECK_INTERVAL
            self.check_memory()

    def handle(self, action: str) -> None:
        if action == "quiet":
            self._send(signal.SIGTSTP)
        elif action == "stop":
            if not self.stopping:
                self.stopping = True
                self.kill_at = self.clock() + self.shutdown_timeout + KILL_GRACE
                for slot in self.slots:
                    slot.respawn_at = None
                self._send(signal.SIGTERM)
        elif action == "restart":
            logger.info("swarm: restart signal received, phased=%s", self.phased)
            if self.phased:
                self.phased_restart()
            else:
                for slot in self.slots:
                    slot.replacing = True
                self._send(signal.SIGTERM)
        else:
            logger.warning("swarm: unknown signal %r ignored", action)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((s for s in self.slots if s.pid == pid), None)
            if slot is not None:
                self._exited(slot, status)

    def _gone(self, slot: Slot) -> None:
        """The slot's child is reaped: whatever it left running goes to ``recovery``."""
        pid, identity, slot.pid, slot.identity = slot.pid, slot.identity, None, None
        if self.recovery is not None and pid is not None and identity is not None:
            self.recovery.exited(identity, pid)

    def _exited(self, slot: Slot, status: int) -> None:
        try:
            self._log_exit(slot, status)
        finally:
            self._gone(slot)

    def _log_exit(self, slot: Slot, status: int) -> None:
        """Log the exit and set when the slot is forked again."""
        pid = slot.pid
        if self.stopping:
            logger.info("swarm: child pid=%s slot=%d exited", pid, slot.index)
            return
        uptime = self.clock() - slot.started
        code = os.waitstatus_to_exitcode(status)
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        if slot.replacing:
            slot.streak, delay = 0, 0.0
        else:
            # a quick exit counts towards the back-off even when clean (an app that exits at
            # import must not be forked again every round)
            slot.streak = slot.streak + 1 if uptime < HEALTHY_UPTIME else 0
            delay = respawn_delay(slot.streak)
            if code == 0:  # it stopped on request (a remote stop aimed at this child alone)
                logger.info(
                    "swarm: child pid=%s slot=%d stopped (exit status 0) after %.1fs: "
                    "replacing it in %.0fs (a stop meant for the whole swarm goes to the "
                    "supervisor)",
                    pid,
                    slot.index,
                    uptime,
                    delay,
                )
            else:
                logger.warning(
                    "swarm: child pid=%s slot=%d exited unexpectedly (%s) after %.1fs, "
                    "respawning in %.0fs",
                    pid,
                    slot.index,
                    how,
                    uptime,
                    delay,
                )
        slot.respawn_at = self.clock() + delay

    def phased_restart(self) -> None:
        """Replace the children one at a time, waiting for each to exit first."""
        for slot in self.slots:
            if slot.pid is None or self.stopping:
                continue
            pid = slot.pid
            logger.info("swarm: phased restart stopping child pid=%d slot=%d", pid, slot.index)
            slot.replacing = True
            self._send(signal.SIGTERM, [slot])
            deadline = self.clock() + self.shutdown_timeout + KILL_GRACE
            while slot.pid is not None:
                self.reap_one(slot)
                if slot.pid is not None and self.clock() >= deadline:
                    logger.warning(
                        "swarm: child pid=%d didn't stop within %.0fs, killing",
                        pid,
                        self.shutdown_timeout + KILL_GRACE,
                    )
                    self._send(signal.SIGKILL, [slot])
                    deadline = float("inf")
                time.sleep(0.1)
            logger.info("swarm: phased restart: child pid=%d exited, respawning", pid)
            self.fork(slot)

    def reap_one(self, slot: Slot) -> None:
        if slot.pid is None:
            return
        try:
            pid, _ = os.waitpid(slot.pid, os.WNOHANG)
        except ChildProcessError:
            pid = slot.pid
        if pid:
            self._gone(slot)

    def check_memory(self) -> None:
        assert self.max_memory_mb is not None
        for slot in self.slots:
            if slot.pid is None or slot.replacing:
                continue
            used = child_memory_mb(slot.pid)
            if used is not None and used > self.max_memory_mb:
                logger.warning(
                    "swarm: child pid=%d slot=%d uses %.0f MB, over max_memory %.0f MB: "
                    "stopping it gracefully and replacing it",
                    slot.pid,
                    slot.index,
                    used,
                    self.max_memory_mb,
                )
                slot.replacing = True
                self._send(signal.SIGTERM, [slot])
