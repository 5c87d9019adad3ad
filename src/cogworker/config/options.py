"""The options a ``Config`` takes: each one's default and the check its value must pass.

``OPTIONS`` is the single source of truth for names and defaults; ``Config`` (``config.py``)
runs the check on every assignment, so a bad value raises ``ConfigError`` naming the option and
the value at once.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cogworker import connection
from cogworker.config import redis_url
from cogworker.middleware import Chain

if TYPE_CHECKING:
    from cogworker.wire import Payload

DeathHandler = Callable[["Payload", BaseException], object]
ShutdownHandler = Callable[[], object]
"""Called once a worker has stopped, before its process exits: to flush what an integration
buffers (spans, error events). It should bound its own time."""
PushDeferral = Callable[[list["Payload"], Callable[[], None]], bool]
"""``defer_push(jobs, send)``: True when it has taken ``send`` to call later instead of now
(``cogworker.contrib.django`` sends on the transaction's commit); False to send at once."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FETCH_MODES = ("reliable", "basic")

class ConfigError(ValueError):
    """An option was given a value it cannot take. The message names both."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        unit = " (MB)" if name == "max_memory" else " of seconds"
        raise ConfigError(f"{name} must be a positive number{unit}, got {value!r}")
    return float(value)


def _non_negative_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def _fetch(name: str, value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in FETCH_MODES:
        raise ConfigError(f"{name} must be one of {', '.join(FETCH_MODES)}, got {value!r}")
    return value.lower()


def _log_level(name: str, value: Any) -> str:
    if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.upper()


def _optional_str(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {value!r}")
    return value or None


def _redis_url(name: str, value: Any) -> str:
    """The URL given, else ``$REDIS_URL``, else the local default: always the URL in use.

    Reading the environment is all this does; no connection is made until ``redis()``.
    """
    if value is None:
        from_environment = os.environ.get("REDIS_URL")
        if not from_environment:
            return connection.DEFAULT_URL
        name, value = "REDIS_URL", from_environment
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a Redis URL string, got {value!r}")
    shown = redis_url.without_credentials(value) if "@" in value or "?" in value else value
    if not value.startswith(redis_url.SCHEMES):
        raise ConfigError(
            f"{name} must start with redis://, rediss://, unix:// or redis+sentinel://, "
            f"got {shown!r}"
        )
    try:
        redis_url.check_url(value)
    except ValueError as error:
        raise ConfigError(f"{name} {shown!r}: {str(error).rstrip('.')}") from None
    return value


def _optional_positive(name: str, value: Any) -> float | None:
    return None if value is None else _positive_number(name, value)


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value


def expand_queues(specs: Iterable[Any], option: str = "queues") -> list[str]:
    """Expand queue specs into the weighted list: ``"name"``, ``"name,weight"`` or ``[name, w]``.

    A weight of n repeats the name n times (a name listed more often is tried first more
    often). A weight must be a positive integer: anything else (0, -1, 2.5, ``b,c``) is
    refused, naming ``option`` and the entry, rather than quietly counting as 1.
    """
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, list | tuple):
        raise ConfigError(f"{option} must be a list of queue names, got {specs!r}")
    queues: list[str] = []
    for spec in specs:
        name, copies = _queue_spec(spec, option)
        queues.extend([name] * copies)
    if not queues:
        raise ConfigError(f"{option} must name at least one queue")
    return queues


def _queue_spec(spec: Any, option: str) -> tuple[str, int]:
    """(name, weight) of one entry of a queue list."""
    weight: Any
    if isinstance(spec, list | tuple) and 1 <= len(spec) <= 2 and isinstance(spec[0], str):
        name, weight = spec[0], (spec[1] if len(spec) == 2 else 1)
    elif isinstance(spec, str):
        name, comma, weight = spec.partition(",")
        weight = weight if comma else 1
    else:
        raise ConfigError(f"{option} entries must be queue names, got {spec!r}")
    name = name.strip()
    if not name:
        raise ConfigError(f"{option} has an empty queue name in {spec!r}")
    copies = int(weight) if isinstance(weight, str) and weight.strip().isdigit() else weight
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ConfigError(
            f"{option} {spec!r}: a queue's weight must be a positive integer, got {weight!r}"
        )
    return name, copies


def _package_names(name: str, value: Any) -> list[str]:
    def dotted(item: Any) -> bool:
        return isinstance(item, str) and all(part.isidentifier() for part in item.split("."))

    if not isinstance(value, list | tuple) or not all(dotted(item) for item in value):
        raise ConfigError(
            f"{name} must be a list of dotted package names (like 'billing' or 'app.jobs'), "
            f"got {value!r}"
        )
    return list(dict.fromkeys(value))


def _death_handlers(name: str, value: Any) -> list[DeathHandler]:
    if not isinstance(value, list | tuple) or not all(callable(item) for item in value):
        raise ConfigError(f"{name} must be a list of callables (job, exception), got {value!r}")
    return list(value)


def _shutdown_handlers(name: str, value: Any) -> list[ShutdownHandler]:
    if not isinstance(value, list | tuple) or not all(callable(item) for item in value):
        raise ConfigError(f"{name} must be a list of callables (no arguments), got {value!r}")
    return list(value)


def _optional_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigError(f"{name} must be a callable or None, got {value!r}")
    return value


def _chain(name: str, value: Any) -> Chain:
    if not isinstance(value, Chain):
        raise ConfigError(f"{name} must be a cogworker.Chain, got {value!r}")
    return value


# option -> (default factory, validator); the single source of truth for names and defaults
OPTIONS: dict[str, tuple[Callable[[], Any], Callable[[str, Any], Any]]] = {
    "concurrency": (lambda: 10, _positive_int),
    "adaptive_concurrency": (lambda: True, _bool),
    "queues": (lambda: ["default"], lambda name, value: expand_queues(value, name)),
    "redis_url": (lambda: None, _redis_url),  # None resolves, see _redis_url
    "job_packages": (list, _package_names),
    "redis_socket_timeout": (lambda: 5.0, _positive_number),
    "fetch": (lambda: "reliable", _fetch),
    "fetch_idle_max_interval": (lambda: 1.0, _positive_number),
    "orphan_threshold": (lambda: 300.0, _positive_number),
    "max_orphanings": (lambda: 3, _positive_int),
    "unique_lock_ttl": (lambda: 86400.0, _positive_number),
    "periodic_catch_up": (lambda: True, _bool),
    "death_handlers": (list, _death_handlers),
    "shutdown_handlers": (list, _shutdown_handlers),
    "shutdown_timeout": (lambda: 25.0, _non_negative_number),
    "heartbeat_interval": (lambda: 5.0, _positive_number),
    "presence_ttl": (lambda: 60.0, _positive_number),
    "poll_interval": (lambda: 5.0, _positive_number),
    "orphan_check_interval": (lambda: 60.0, _positive_number),
    "log_level": (lambda: "INFO", _log_level),
    "environment": (lambda: "development", _str),
    "tag": (lambda: None, _optional_str),
    "max_memory": (lambda: None, _optional_positive),
    "client_middleware": (Chain, _chain),
    "server_middleware": (Chain, _chain),
    "defer_push": (lambda: None, _optional_callable),
}

OPTION_NAMES = frozenset(OPTIONS)


def unknown_option(name: object, known: Iterable[str] = OPTION_NAMES) -> ConfigError:
    """The error for a name that is not an option, naming the closest of ``known``."""
    nearest = difflib.get_close_matches(str(name).lower(), sorted(known), n=1)
    hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
    return ConfigError(f"unknown option {name!r}{hint}")


def checked(name: str, value: Any) -> Any:
    """``value`` as option ``name`` takes it; ConfigError naming both if it can't."""
    entry = OPTIONS.get(name)
    if entry is None:
        raise unknown_option(name)
    return entry[1](name, value)
