"""Telling "Redis is unavailable, try again shortly" from real errors, and logging an outage
as one line at its start, a summary at most every 60 s, and one line at its end.

Unavailable: a connection error or timeout, or a reply whose first word is READONLY, LOADING,
MASTERDOWN, TRYAGAIN or BUSY (also when wrapped in a script error). Anything else is logged in
full every time.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis.exceptions

from cogworker.process_state import state

logger = logging.getLogger("cogworker")

SUMMARY_INTERVAL = 60.0
_UNAVAILABLE_WORDS = ("READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "BUSY")
_IN_SCRIPT = re.compile(r"-(?:" + "|".join(_UNAVAILABLE_WORDS) + r")(?:\s|$)")


def is_unavailable(error: BaseException) -> bool:
    """True for errors that mean "Redis can't serve us right now" rather than a bug."""
    if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True
    if isinstance(error, OSError):
        return True
    if not isinstance(error, redis.exceptions.ResponseError):
        return False
    # redis-py turns READONLY, MASTERDOWN... into subclasses and strips the word from the text
    if getattr(error, "status_code", None) in _UNAVAILABLE_WORDS:
        return True
    message = str(error)
    first = message.split(" ", 1)[0]
    if first in _UNAVAILABLE_WORDS:
        return True
    return "Error running script" in message and bool(_IN_SCRIPT.search(message))


def is_unknown_command(error: BaseException) -> bool:
    """True when Redis (or Lua inside it) says a command doesn't exist (Redis < 6.2)."""
    if not isinstance(error, redis.exceptions.ResponseError):
        return False
    message = str(error).lower()
    return "unknown command" in message or "unknown redis command" in message


@dataclass
class _Outage:
    started: float
    errors: int = 1
    since_summary: int = 0
    last_summary: float = field(default_factory=time.monotonic)
    latest: str = ""


class ErrorReporter:
    """Per-site outage table (one per process: a part of the process state)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._outages: dict[str, _Outage] = {}
        self._lock = threading.Lock()

    def report(self, site: str, error: BaseException) -> None:
        detail = f"{type(error).__name__}: {error}"
        if not is_unavailable(error):
            logger.error("%s: %s", site, detail)
            return
        now = self._clock()
        with self._lock:
            outage = self._outages.get(site)
            if outage is None:
                self._outages[site] = _Outage(started=now, last_summary=now, latest=detail)
                first = True
            else:
                first = False
                outage.errors += 1
                outage.since_summary += 1
                outage.latest = detail
                due = now - outage.last_summary >= SUMMARY_INTERVAL
                if due:
                    count, outage.since_summary, outage.last_summary = outage.since_summary, 0, now
        if first:
            logger.error(
                "%s: Redis unavailable — %s (repeats summarized every %ds)",
                site,
                detail,
                SUMMARY_INTERVAL,
            )
        elif due:
            logger.error(
                "%s: Redis still unavailable — %d more error(s) in the last %ds (latest: %s)",
                site,
                count,
                SUMMARY_INTERVAL,
                detail,
            )

    def recovered(self, site: str) -> None:
        if site not in self._outages:  # cheap check first: this runs after every success
            return
        with self._lock:
            outage = self._outages.pop(site, None)
        if outage is not None:
            logger.warning(
                "%s: Redis available again after %d error(s) over %ds",
                site,
                outage.errors,
                round(self._clock() - outage.started),
            )

    def in_outage(self, site: str) -> bool:
        return site in self._outages

    def reset(self) -> None:
        with self._lock:
            self._outages.clear()


reporter = state.hold("error reporter", ErrorReporter())
"""The process-wide reporter."""
