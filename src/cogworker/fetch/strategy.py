"""Which fetch this process uses: decided on first use, and replaced once if Redis turns out
not to support reliable fetch.

A Redis < 6.2 (no LMOVE) gets basic fetch, with a warning: a job is then lost if its process
dies mid-job. No Redis I/O happens before the first use, so a worker can be built while Redis
is down; a connection error then propagates and the choice is made on the next use.
"""

from __future__ import annotations

import logging
import threading

from cogworker.config import Config
from cogworker.fetch import Fetch, FetchMode
from cogworker.fetch.basic import BasicFetch
from cogworker.fetch.reliable import ReliableFetch, supported

logger = logging.getLogger("cogworker")


def keeps_in_progress(config: Config) -> bool:
    """Whether the fetch ``config`` asks for lists its jobs in progress (before any fetch
    exists: a swarm supervisor deciding whether its children leave lists to requeue)."""
    return config.fetch == "reliable"


class FetchStrategy:
    def __init__(self, config: Config, identity: str, stopping: threading.Event) -> None:
        self._config = config
        self._identity = identity
        self._stopping = stopping
        self._fetch: Fetch | None = None
        self._lock = threading.Lock()

    def current(self) -> Fetch:
        """The fetch in use, chosen now if it wasn't yet."""
        fetch = self._fetch
        if fetch is not None:
            return fetch
        with self._lock:
            if self._fetch is None:
                self._fetch = self._choose()
            return self._fetch

    @property
    def mode(self) -> FetchMode | None:
        """The mode in use; None until the first use decided it."""
        fetch = self._fetch
        return fetch.mode if fetch is not None else None

    def chosen(self) -> Fetch | None:
        """The fetch in use, or None if none was chosen yet (nothing to wake or close)."""
        return self._fetch

    def _choose(self) -> Fetch:
        if self._config.fetch == "reliable":
            if supported(self._config.redis()):  # a connection error propagates
                return ReliableFetch(self._config, self._identity, self._stopping)
            logger.warning(
                "config.fetch = reliable needs Redis >= 6.2; falling back to basic "
                "(a job is lost if its process dies mid-job)"
            )
        return BasicFetch(self._config, self._identity, self._stopping)

    def fall_back_to_basic(self, error: BaseException) -> None:
        """Reliable fetch met an unknown command: use basic fetch from now on."""
        with self._lock:
            if self._fetch is not None and self._fetch.mode == "basic":
                return
            logger.warning(
                "config.fetch = reliable isn't supported by this Redis (%s); falling back to "
                "basic (a job is lost if its process dies mid-job)",
                str(error)[:120],
            )
            old = self._fetch
            self._fetch = BasicFetch(self._config, self._identity, self._stopping)
        if old is not None:
            old.close()

    def close(self) -> None:
        if self._fetch is not None:
            self._fetch.close()
