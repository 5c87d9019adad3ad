"""What this process keeps in memory for itself, held by one object: ``state``.

Some roles remember things that are true of this process only: the default config and its
client, the outages being logged, lock releases waiting for Redis, the background writers'
threads, the testing modes, the dashboard's session secret. Each such module hands its part
to ``state`` once, when it is imported, and keeps a name for it (``redis_errors.reporter``,
``locks.deferred``, ...) so any layer reaches its own part without importing the others: this
module imports nothing of cogworker, and every part is reset in place, so those names stay
valid.

``state.reset()`` forgets every part at once. A forked worker (a swarm's child) calls it once,
first thing: what its parent remembered is about the parent's threads, connections and jobs,
and the child must start as a fresh interpreter would. The registry of job classes is not a
part: it is what importing the app built, and a child needs it as it is.

The parts, by the module that holds each, and why each is per process:

* ``config``: the default config, made or installed in this process;
* ``client``: the default config's client, with its memo of the queues it registered;
* ``redis_errors``: the outages being logged, and since when;
* ``locks``: lock releases waiting for Redis, and the jids this process handed back at stop;
* ``status_writer``: one writer per config, each with a thread (threads don't survive a fork);
* ``testing``: the testing mode, the jobs recorded in it and the memory standing for Redis;
* ``web.settings``: the random session secret made when none is configured.
"""

from __future__ import annotations

import threading
from typing import Protocol, TypeVar


class Part(Protocol):
    """Something one process keeps in memory; ``reset`` forgets it in place."""

    def reset(self) -> None: ...


PartT = TypeVar("PartT", bound=Part)


class ProcessState:
    """The parts this process holds, by name, each registered once by its module."""

    def __init__(self) -> None:
        self._parts: dict[str, Part] = {}
        self._lock = threading.Lock()

    def hold(self, name: str, part: PartT) -> PartT:
        """Hold ``part`` under ``name`` and return it, for the module to keep a name for it."""
        with self._lock:
            if name in self._parts:
                raise ValueError(f"process state already holds a part named {name!r}")
            self._parts[name] = part
        return part

    def names(self) -> list[str]:
        """The parts held so far (those of the modules imported in this process)."""
        with self._lock:
            return sorted(self._parts)

    def reset(self) -> None:
        """Forget every part, as a fresh interpreter would start: once, in a forked child."""
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            part.reset()


state = ProcessState()
"""This process's state."""
