"""The dashboard's settings: one small frozen dataclass, every field checked when it is built.

    WebSettings(live_update_interval=5, time_format="%d.%m.%Y %H:%M", metrics_enabled=False)

A bad value raises ``cogworker.ConfigError`` naming the field. The session secret is resolved
once, when the settings are built: the ``session_secret`` field, else ``$COGWORKER_SESSION_SECRET``,
else a random secret for this process (sessions then end when the process restarts and are
not shared between processes, so a deployment with several web processes must set one).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass, field, fields

from cogworker.config import ConfigError
from cogworker.process_state import state

logger = logging.getLogger("cogworker")

SECRET_ENV = "COGWORKER_SESSION_SECRET"
MIN_SECRET_LENGTH = 64
FRAME_OPTIONS = ("DENY", "SAMEORIGIN", None)
TIME_FORMAT_TOKENS = "YymdeHIMSpBbAaZ%"
"""The strftime directives both the server and the page's script render the same way."""
_DIRECTIVE = re.compile(r"%(.?)")

class ProcessSecret:
    """The session secret made when none is configured (a process-state part): random, once
    per process, so a restarted dashboard never accepts the cookies of an earlier one."""

    def __init__(self) -> None:
        self._secret: str | None = None
        self._lock = threading.Lock()

    def get(self) -> str:
        with self._lock:
            if self._secret is None:
                self._secret = secrets.token_hex(32)
            return self._secret

    def reset(self) -> None:
        with self._lock:
            self._secret = None


_process_secret = state.hold("web session secret", ProcessSecret())


def process_secret() -> str:
    """A random secret made once per process (32 bytes as 64 hex characters)."""
    return _process_secret.get()


def _check_secret(origin: str, value: str) -> str:
    if len(value) < MIN_SECRET_LENGTH:
        raise ConfigError(
            f"{origin} must be at least {MIN_SECRET_LENGTH} characters (got {len(value)}): "
            "generate one with `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    return value


@dataclass(frozen=True)
class WebSettings:
    """How the dashboard behaves; the defaults suit a dashboard mounted behind the host's auth.

    ``live_update_interval`` seconds between two refreshes of the visible tab while Live is
    on; ``time_format`` strftime pattern for every instant (UTC on the server, the browser's
    time zone once its script ran); ``metrics_enabled`` serves ``/metrics`` (else 404);
    ``builtin_session`` installs the signed-cookie session when the host has none;
    ``session_secret`` signs it (see the module docstring); ``frame_options`` the
    X-Frame-Options header (``DENY``, ``SAMEORIGIN`` or None to allow framing anywhere);
    ``queue_page_size`` jobs per page of a queue; ``queue_scan_limit`` how many retry and
    dead entries (newest first) are read to count one queue's share of them;
    ``jobs_page_size`` rows per page of the Jobs table; ``jobs_search_limit`` how many stored
    entries one search of the Jobs table reads at most (in the table's order; the page says
    when the limit left some unsearched); ``schedules_page_size`` cron entries per page of the
    Schedules tab.
    """

    live_update_interval: float = 3.0
    time_format: str = "%Y-%m-%d %H:%M:%S"
    metrics_enabled: bool = True
    builtin_session: bool = True
    session_secret: str | None = field(default=None, repr=False)
    frame_options: str | None = "DENY"
    queue_page_size: int = 50
    queue_scan_limit: int = 10_000
    jobs_page_size: int = 25
    jobs_search_limit: int = 100_000
    schedules_page_size: int = 100

    def __post_init__(self) -> None:
        interval = self.live_update_interval
        if isinstance(interval, bool) or not isinstance(interval, int | float):
            raise ConfigError(
                f"live_update_interval must be a number of seconds (got {interval!r})"
            )
        if not 0.5 <= interval <= 3600:
            raise ConfigError(
                f"live_update_interval must be 0.5 to 3600 seconds (got {interval!r})"
            )
        self._check_time_format()
        for name in ("metrics_enabled", "builtin_session"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False (got {getattr(self, name)!r})")
        if self.frame_options not in FRAME_OPTIONS:
            raise ConfigError(
                f"frame_options must be 'DENY', 'SAMEORIGIN' or None (got {self.frame_options!r})"
            )
        self._check_count("queue_page_size", 1, 1000)
        self._check_count("queue_scan_limit", 100, 1_000_000)
        self._check_count("jobs_page_size", 1, 500)
        self._check_count("jobs_search_limit", 1000, 10_000_000)
        self._check_count("schedules_page_size", 1, 1000)
        if self.session_secret is not None:
            if not isinstance(self.session_secret, str):
                raise ConfigError("session_secret must be a string")
            _check_secret("session_secret", self.session_secret)

    def _check_time_format(self) -> None:
        pattern = self.time_format
        if not isinstance(pattern, str) or not pattern.strip():
            raise ConfigError(f"time_format must be a non-empty strftime pattern (got {pattern!r})")
        for directive in _DIRECTIVE.findall(pattern):
            if directive == "" or directive not in TIME_FORMAT_TOKENS:
                supported = " ".join(f"%{token}" for token in TIME_FORMAT_TOKENS)
                raise ConfigError(
                    f"time_format {pattern!r} uses %{directive}, which the browser can't render "
                    f"the same way; use only {supported}"
                )

    def _check_count(self, name: str, low: int, high: int) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{name} must be a whole number from {low} to {high} (got {value!r})")

    def resolved_secret(self) -> str:
        """The secret that signs the built-in session (see the module docstring)."""
        if self.session_secret is not None:
            return self.session_secret
        from_env = os.environ.get(SECRET_ENV)
        if from_env is not None:
            return _check_secret(f"${SECRET_ENV}", from_env)
        return process_secret()

    def secret_is_random(self) -> bool:
        return self.session_secret is None and os.environ.get(SECRET_ENV) is None


FIELD_NAMES = frozenset(item.name for item in fields(WebSettings))


def warn_if_random_secret(settings: WebSettings) -> None:
    if settings.builtin_session and settings.secret_is_random():
        logger.warning(
            "Web: no session secret set; signing sessions with a random one for this process "
            "(sessions end when it restarts and are not shared between processes): "
            "set $%s to keep them",
            SECRET_ENV,
        )
