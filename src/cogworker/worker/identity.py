"""Process identity: ``<hostname>:<pid>:<12 hex>``, new for every worker run (and every
forked child), so two runs of one pid never share in-progress lists or presence keys.
"""

from __future__ import annotations

import os
import secrets
import socket


def hostname() -> str:
    """``$DYNO`` when set (Heroku), else the OS host name."""
    return os.environ.get("DYNO") or socket.gethostname()


def new_identity() -> str:
    return f"{hostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def pid_of(identity: str) -> int | None:
    """The pid in an identity (``<hostname>:<pid>:<hex>``), None if there is none."""
    parts = identity.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
