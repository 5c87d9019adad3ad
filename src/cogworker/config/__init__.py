"""One ``Config`` object holding every option, validated when set.

The package: ``Config`` and the default config (here), ``options`` (what each option
accepts), ``redis_url`` (the options a Redis URL may carry) and ``file`` (the YAML file of
``-C``, imported only when one is given: it needs PyYAML).

A config is passed explicitly to the components that need it. ``default_config()`` returns a
process-wide instance for the convenience of ``Job.perform_async`` and the CLI (a part of the
process state); tests and embedders build their own.

Every config starts with the built-in middleware (unique jobs, cron running locks): those
modules sit below this one and read what they need of a config through small protocols.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cogworker import connection
from cogworker.config.options import (
    OPTION_NAMES,
    OPTIONS,
    ConfigError,
    DeathHandler,
    PushDeferral,
    ShutdownHandler,
    checked,
    expand_queues,
)
from cogworker.middleware import Chain
from cogworker.periodic.entries import PeriodicSchedule
from cogworker.periodic.running_lock import RunningLockMiddleware
from cogworker.process_state import state
from cogworker.unique import UniqueLockMiddleware, UniqueReleaseMiddleware

if TYPE_CHECKING:
    import redis

__all__ = [
    "OPTION_NAMES",
    "Config",
    "ConfigError",
    "DeathHandler",
    "PushDeferral",
    "ShutdownHandler",
    "default_config",
    "expand_queues",
    "set_default_config",
]

logger = logging.getLogger("cogworker")


class Config:
    """Every cogworker setting; assigning a bad value raises ConfigError at once.

    ``concurrency`` processor threads per worker; ``adaptive_concurrency`` lets fewer of them
    hold a job while short jobs keep the CPU saturated (``worker/pace.py``); ``queues`` the
    weighted queue list (each name repeated by its weight); ``redis_url`` the URL in use: the
    one given, else ``$REDIS_URL``, else redis://localhost:6379/0 (assigning None resolves it
    again); ``job_packages`` the packages, besides the app module's own, whose modules a worker
    may import to find a payload's job class by its dotted path; ``fetch`` ``reliable``
    (default) or ``basic``; ``shutdown_timeout`` how long a stopping worker waits for running
    jobs; ``orphan_threshold`` how long a silent process's jobs wait before recovery;
    ``max_orphanings`` how many recoveries a job survives before it is dead;
    ``heartbeat_interval``, ``poll_interval``, ``orphan_check_interval`` and
    ``fetch_idle_max_interval`` the background cadences; ``presence_ttl`` how long this
    process's presence outlives its last beat (no other process may take its jobs sooner; at
    least three heartbeats: see ``check_liveness``); ``unique_lock_ttl`` the unique locks'
    lifetime; ``max_memory`` (MB) the size above which the swarm replaces a child; ``tag`` the
    name shown in process titles; ``defer_push`` a ``PushDeferral`` that may hold a push's
    Redis write back (the jids are returned at once either way); ``shutdown_handlers``
    callables a worker calls once it has stopped, before its process exits.
    """

    concurrency: int
    adaptive_concurrency: bool
    queues: list[str]
    redis_url: str
    job_packages: list[str]
    redis_socket_timeout: float
    fetch: str
    fetch_idle_max_interval: float
    orphan_threshold: float
    max_orphanings: int
    unique_lock_ttl: float
    periodic_catch_up: bool
    death_handlers: list[DeathHandler]
    shutdown_handlers: list[ShutdownHandler]
    shutdown_timeout: float
    heartbeat_interval: float
    presence_ttl: float
    poll_interval: float
    orphan_check_interval: float
    log_level: str
    environment: str
    tag: str | None
    max_memory: float | None
    client_middleware: Chain
    server_middleware: Chain
    defer_push: PushDeferral | None
    _redis: redis.Redis | None
    _redis_lock: threading.Lock

    def __init__(self, **options: Any) -> None:
        object.__setattr__(self, "server", False)
        object.__setattr__(self, "pinned", frozenset())
        object.__setattr__(self, "_redis", None)
        object.__setattr__(self, "_redis_lock", threading.Lock())
        object.__setattr__(self, "periodic", PeriodicSchedule())
        for name, (default, _) in OPTIONS.items():
            object.__setattr__(self, name, default())
        self._add_default_middleware()
        # redis_url first, so an unset one is resolved (and $REDIS_URL checked) only if the
        # caller didn't pass one
        self.update({"redis_url": None, **options})

    def _add_default_middleware(self) -> None:
        """The built-in middleware every config starts with (no-ops for jobs without the
        markers they look for)."""
        self.client_middleware.add(UniqueLockMiddleware, self)
        self.server_middleware.add(RunningLockMiddleware, self)
        self.server_middleware.add(UniqueReleaseMiddleware, self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "periodic":
            raise ConfigError("periodic is not an option: use config.periodic.register(...)")
        if name == "server":
            object.__setattr__(self, name, bool(value))
            return
        if name == "pinned":
            raise ConfigError("pinned is not an option: use config.pin(names)")
        object.__setattr__(self, name, checked(name, value))
        if name in ("redis_url", "redis_socket_timeout", "concurrency"):
            self.close()

    def update(self, options: Mapping[str, Any]) -> None:
        """Set several options; the first invalid one raises and names itself."""
        for name, value in options.items():
            setattr(self, name, value)

    def pin(self, names: Iterable[str]) -> None:
        """Mark options as the operator's (the worker's flags and config file): an app's own
        settings applied with ``update_unpinned`` leave them as they are."""
        unknown = sorted(set(names) - OPTION_NAMES)
        if unknown:
            raise ConfigError(f"can't pin unknown option {unknown[0]!r}")
        object.__setattr__(self, "pinned", self.pinned | frozenset(names))

    def update_unpinned(self, options: Mapping[str, Any]) -> list[str]:
        """Set the options the operator didn't pin; returns the names left as pinned."""
        for name, value in options.items():  # every value is checked, the pinned ones too
            checked(name, value)
        kept = [name for name in options if name in self.pinned]
        self.update({name: value for name, value in options.items() if name not in self.pinned})
        return kept

    def check_liveness(self) -> None:
        """Refuse a presence that could expire while this process lives: it must outlast
        three heartbeats, so that one or two late beats never look like a death. (Checked
        when a worker boots: the two options may be set in either order.)"""
        if self.presence_ttl < 3 * self.heartbeat_interval:
            raise ConfigError(
                f"presence_ttl ({self.presence_ttl:g} s) must be at least three heartbeats "
                f"(3 x heartbeat_interval {self.heartbeat_interval:g} s = "
                f"{3 * self.heartbeat_interval:g} s)"
            )

    # -- Redis ------------------------------------------------------------------------------

    def redis(self) -> redis.Redis:
        """The shared client, built on first use with a pool of ``concurrency + 5``."""
        client = self._redis
        if client is None:
            with self._redis_lock:
                client = self._redis
                if client is None:
                    client = connection.connect(
                        self.redis_url,
                        max_connections=self.concurrency + 5,
                        socket_timeout=self.redis_socket_timeout,
                    )
                    object.__setattr__(self, "_redis", client)
        return client

    def close(self) -> None:
        """Close the shared client and its connections now; the next use opens new ones."""
        with self._redis_lock:
            client = self._redis
            object.__setattr__(self, "_redis", None)
        if client is not None:
            client.close()

    # -- server / client side blocks ----------------------------------------------------------

    periodic: PeriodicSchedule
    """Cron entries: ``config.periodic.register("*/5 * * * *", ReportJob, args=[1])``."""

    server: bool
    """True in a worker process (set by the CLI before the app's code is imported)."""

    pinned: frozenset[str]
    """The options the worker's command line set (its flags and ``-C`` file): ``pin``."""

    def configure_server(self, block: Callable[[Config], object]) -> Callable[[Config], object]:
        """Run ``block(config)`` now if this is a worker process; usable as a decorator."""
        if self.server:
            block(self)
        else:
            logger.debug("configure_server skipped: %s is not a worker process", block)
        return block

    def configure_client(self, block: Callable[[Config], object]) -> Callable[[Config], object]:
        """Run ``block(config)`` now unless this is a worker process; usable as a decorator."""
        if not self.server:
            block(self)
        else:
            logger.debug("configure_client skipped: %s runs in a worker process", block)
        return block

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in ("concurrency", "queues", "fetch", "redis_url")
        )
        return f"Config({shown})"


class DefaultConfig:
    """The process-wide config (a process-state part), made on first use unless installed."""

    def __init__(self) -> None:
        self.config: Config | None = None
        self._lock = threading.Lock()

    def get(self) -> Config:
        config = self.config
        if config is None:
            with self._lock:
                config = self.config
                if config is None:
                    config = self.config = Config()
        return config

    def reset(self) -> None:
        self.config = None


_default = state.hold("default config", DefaultConfig())


def default_config() -> Config:
    """The process-wide config used when none is passed explicitly."""
    return _default.get()


def set_default_config(config: Config) -> Config:
    """Replace the process-wide config (the CLI does this once at boot)."""
    _default.config = config
    return config
