"""Lua scripts: each lives in its own ``.lua`` file beside the module that runs it.

A script is read once, called by SHA (EVALSHA) and re-sent whole (EVAL, which also caches it)
when Redis answers NOSCRIPT: after SCRIPT FLUSH, a restart or a failover. A file may start
with ``--#include other.lua`` lines to prepend shared helper functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import NoScriptError

_INCLUDE = "--#include "


def _read(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    parts = []
    for line in lines:
        if line.startswith(_INCLUDE):
            parts.append(_read(path.parent / line[len(_INCLUDE) :].strip()))
        else:
            parts.append(line)
    return "".join(parts)


class Script:
    """One Lua script, run by SHA with a transparent reload on NOSCRIPT."""

    def __init__(self, path: Path) -> None:
        self.name = path.stem
        self.source = _read(path)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def __call__(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"Script({self.name})"


def load(module_file: str, name: str) -> Script:
    """The script ``name``.lua in the directory of ``module_file`` (pass ``__file__``)."""
    return Script(Path(module_file).parent / f"{name}.lua")
