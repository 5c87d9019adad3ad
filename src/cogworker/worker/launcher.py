"""The Launcher: boots one worker process's threads in order and stops them in order.

Boot: a first heartbeat that succeeds (retried every second while Redis is unreachable; a
TERM during that wait ends the process with nothing started), the startup banner, then the
processors, the scheduler and the cron ticker (so the banner comes before any job's line).
Then it waits for signals: TSTP quiets (running jobs finish, nothing new starts), TERM / INT
stop gracefully (up to ``shutdown_timeout`` for running jobs, the rest is handed back to its
queue), and so do the remote ``quiet`` / ``resume`` / ``stop`` commands.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import redis

from cogworker import __version__, connection, locks, redis_errors, registry, status
from cogworker.config import Config
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler
from cogworker.worker.ticker import Ticker

if TYPE_CHECKING:
    from cogworker.worker.swarm import Child

logger = logging.getLogger("cogworker")

_SIGNALS = {"SIGTSTP": "quiet", "SIGTERM": "stop", "SIGINT": "stop"}


def weighted_queues(queues: list[str]) -> str:
    """The expanded queue list as each name once with its weight: ``critical(2),default(1)``."""
    weights: dict[str, int] = {}
    for name in queues:
        weights[name] = weights.get(name, 0) + 1
    return ",".join(f"{name}({weight})" for name, weight in weights.items())


class Launcher:
    def __init__(self, config: Config, *, child: Child | None = None) -> None:
        """``child``: this process is a swarm's child, with the identity its supervisor
        chose."""
        # no Redis I/O in constructors
        config.check_liveness()
        self.config = config
        registry.allow_imports(*config.job_packages)  # the app's own packages: see cli
        self.identity = child.identity if child is not None else new_identity()
        self.signals: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.manager = Manager(config, self.identity)
        supervisor = child.supervisor if child is not None else None
        self.heartbeat = Heartbeat(config, self.manager, self.signals.put, supervisor=supervisor)
        self.scheduler = Scheduler(self.manager, self.heartbeat.beats)
        self.ticker = Ticker(self.manager, ready=self.scheduler.recovered_once)
        self.started = threading.Event()
        self.stopped = threading.Event()

    def install_signal_handlers(self) -> None:
        for name, action in _SIGNALS.items():
            number = getattr(signal, name, None)
            if number is not None:
                signal.signal(number, self._trap(action))

    def _trap(self, action: str) -> Callable[[int, FrameType | None], None]:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.signals.put(action)

        return handler

    def _next_signal(self, timeout: float | None = None) -> str | None:
        try:
            # a timeout keeps the main thread responsive to OS signals
            return self.signals.get(timeout=0.5 if timeout is None else timeout)
        except queue.Empty:
            return None

    def run(self) -> None:
        """Boot, then handle signals until told to stop; returns once stopped."""
        if not self._boot():
            return
        self.started.set()
        while True:
            action = self._next_signal()
            if action is None:
                continue
            if action == "quiet":
                logger.info("Received quiet signal, identity=%s", self.identity)
                self.manager.set_quiet(True)
            elif action == "resume":
                logger.info("Received resume signal, identity=%s", self.identity)
                self.manager.set_quiet(False)
            elif action == "stop":
                logger.info("Received stop signal, identity=%s", self.identity)
                break
            else:
                logger.warning("Received unknown signal %r", action)
        self.stop()

    def _boot(self) -> bool:
        while not self.heartbeat.start(abort_if=lambda: not self.signals.empty()):
            action = self._next_signal(0)
            if action == "stop":
                logger.info("Received stop signal before startup completed")
                self.stopped.set()
                return False
            if action == "quiet":
                self.manager.set_quiet(True)
        self._log_banner()  # before any processor exists, so before any job's line
        self.manager.start()
        self.scheduler.start()
        self.ticker.start()
        return True

    def _log_banner(self) -> None:
        logger.info(
            "cogworker %s started, identity=%s concurrency=%d queues=%s redis=%s",
            __version__,
            self.identity,
            self.config.concurrency,
            weighted_queues(self.config.queues),
            connection.redacted_url(self.config.redis_url),
        )
        if self.config.orphan_threshold < self.config.presence_ttl:
            logger.warning(
                "orphan_threshold %gs is below presence_ttl (%gs): a dead process's jobs "
                "still come back only once its presence key has expired",
                self.config.orphan_threshold,
                self.config.presence_ttl,
            )

    def stop(self) -> None:
        self.manager.stop()
        status.close(self.config, timeout=5.0)  # the status / history writes still queued
        try:
            locks.deferred.retry_all(self.manager.client)
        except redis.RedisError as error:
            redis_errors.reporter.report("Deferred releases", error)
        self.scheduler.stop()
        self.ticker.stop()
        self.heartbeat.stop()
        logger.info("cogworker stopped, identity=%s", self.identity)
        self.stopped.set()
