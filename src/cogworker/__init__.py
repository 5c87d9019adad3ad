"""cogworker: reliable Redis-backed background jobs, wire-compatible with the Ruby gem."""

from cogworker.client import Client, default_client
from cogworker.config import Config, ConfigError, default_config, set_default_config
from cogworker.job import FunctionJob, Job, job
from cogworker.middleware import Chain, ClientMiddleware, ServerMiddleware
from cogworker.registry import UnknownJobError
from cogworker.wire import Payload

__version__ = "0.1.0"

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
    "default_client",
    "default_config",
    "job",
    "set_default_config",
]
