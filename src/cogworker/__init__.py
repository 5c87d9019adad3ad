"""cogworker: reliable Redis-backed background jobs, wire-compatible with the Ruby gem."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cogworker.client import Client, default_client
from cogworker.config import Config, ConfigError, default_config, set_default_config
from cogworker.job import FunctionJob, Job, job
from cogworker.middleware import Chain, ClientMiddleware, ServerMiddleware
from cogworker.registry import UnknownJobError
from cogworker.wire import Payload

if TYPE_CHECKING:
    from cogworker import api, history, metrics, status, testing

__version__ = "0.1.0"

# imported on first use (``cogworker.status.enable(...)`` after ``import cogworker``), so that
# enqueueing a job doesn't load the read API and the optional middleware
_SUBMODULES = ("api", "history", "metrics", "status", "testing")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"cogworker.{name}")
    raise AttributeError(f"module 'cogworker' has no attribute {name!r}")


__all__ = [
    "Chain",
    "Client",
    "ClientMiddleware",
    "Config",
    "ConfigError",
    "FunctionJob",
    "Job",
    "Payload",
    "ServerMiddleware",
    "UnknownJobError",
    "__version__",
    "api",
    "default_client",
    "default_config",
    "history",
    "job",
    "metrics",
    "set_default_config",
    "status",
    "testing",
]
