"""``settings.COGWORKER`` read into a ``cogworker.Config``.

Keys are ``Config`` option names, plus two of this integration's own:

* ``after_commit`` (default True): hold a push made inside ``transaction.atomic()`` until the
  transaction commits (``transaction.AfterCommit``); False pushes at once, always (the
  per-job key is still checked and taken out of the payload: ``transaction.PushAtOnce``,
  around a ``defer_push`` of your own if you set one);
* ``database`` (default ``"default"``): the alias of ``settings.DATABASES`` whose transactions
  a push follows. An atomic block on another alias does not hold a push back.

An unknown key, or a bad value, raises ``ConfigError`` naming it (the closest known key too).
The config always gets ``connections.CloseDatabaseConnections`` as its outermost server
middleware.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS  # type: ignore[import-untyped]

from cogworker.config import OPTION_NAMES, Config, ConfigError
from cogworker.config.options import unknown_option
from cogworker.contrib.django.connections import CloseDatabaseConnections
from cogworker.contrib.django.transaction import AfterCommit, PushAtOnce

SETTING = "COGWORKER"
OWN_KEYS = frozenset({"after_commit", "database"})


@dataclass(frozen=True)
class DjangoOptions:
    """This integration's own keys, and the options as the settings gave them."""

    after_commit: bool
    database: str
    given: Mapping[str, Any]


def read_settings(raw: Any, databases: Mapping[str, Any]) -> tuple[Config, DjangoOptions]:
    """The config ``raw`` (the ``COGWORKER`` setting; None when unset) describes."""
    given = _as_options(raw)
    options = _own_options(given, databases)
    if "defer_push" in given and options.after_commit:
        raise ConfigError(
            "defer_push is what after_commit sets: set after_commit to False to use your own"
        )
    config = Config(**{key: value for key, value in given.items() if key not in OWN_KEYS})
    if options.after_commit:
        config.defer_push = AfterCommit(config, options.database)
    else:
        config.defer_push = PushAtOnce(config.defer_push)
    config.server_middleware.prepend(CloseDatabaseConnections)
    return config, options


def _as_options(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"must be a dict of cogworker options, got {type(raw).__name__}")
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(f"keys must be option names (strings), got {key!r}")
        if key not in OPTION_NAMES and key not in OWN_KEYS:
            raise unknown_option(key, OPTION_NAMES | OWN_KEYS)
    return dict(raw)


def _own_options(given: Mapping[str, Any], databases: Mapping[str, Any]) -> DjangoOptions:
    after_commit = given.get("after_commit", True)
    if not isinstance(after_commit, bool):
        raise ConfigError(f"after_commit must be true or false, got {after_commit!r}")
    database = given.get("database", DEFAULT_DB_ALIAS)
    if not isinstance(database, str) or database not in databases:
        known = ", ".join(repr(alias) for alias in databases)
        raise ConfigError(
            f"database must name an alias of settings.DATABASES ({known}), got {database!r}"
        )
    return DjangoOptions(after_commit, database, dict(given))
