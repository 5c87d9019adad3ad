"""What the top-level ``cogworker`` group hands down to its subcommands.

``cogworker --redis-url URL <command>`` stores URL in the root context's ``meta`` under
``REDIS_URL_META``; a command with its own ``--redis-url`` merges the two with
``chosen_redis_url``. This module imports only click, so the admin commands and the web
command can share the rule without importing each other (or the worker runtime).
"""

from __future__ import annotations

import click

REDIS_URL_META = "cogworker.redis_url"


def chosen_redis_url(own: str | None) -> str | None:
    """The Redis URL the user gave: the command's own ``--redis-url`` or the one before the
    command name; both with different values is a usage error (the same value twice is fine).
    None when neither was given (the config then resolves ``$REDIS_URL``)."""
    context = click.get_current_context(silent=True)
    given = context.find_root().meta.get(REDIS_URL_META) if context is not None else None
    if own is not None and given is not None and own != given:
        # the values are not shown: a URL may carry a password
        raise click.UsageError(
            "--redis-url given twice with different values (before and after the command "
            "name): give it once"
        )
    return own if own is not None else given
