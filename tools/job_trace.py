"""Following one job through a worker: every call and return of code in a ``cogworker``
module on the threads a job passes through, recorded with ``threading.setprofile``, and the
path it makes. Used by ``bench/job_path.py`` (the figures) and ``tests/test_job_path.py``
(ARCHITECTURE.md's "One job" list, checked).

The path is the sequence of modules on top of each thread's cogworker stack, a module counted
each time the path enters it; a *return* is an entry into a module the path had already left.
"Leaf helpers dropped" leaves out the modules that never call another cogworker module on the
path (``keys``, ``wire``, ...), as a reader following the job skips them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

THREADS = ("processor-", "fetcher", "bookkeeper")
Event = tuple[str, str, str]  # thread, "call" or "return", module


@dataclass
class Trace:
    recording: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)  # thread, event, module

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event not in ("call", "return"):
            return
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith("cogworker"):
            return
        thread = threading.current_thread().name
        if thread.startswith(THREADS):
            self.events.append((thread, event, module))


def paths(events: list[tuple[str, str, str]]) -> tuple[dict[str, list[str]], set[str]]:
    """Per thread, the module on top of its cogworker stack each time it changes; and the
    modules that call into another module (the others are leaf helpers)."""
    stacks: dict[str, list[str]] = {}
    walked: dict[str, list[str]] = {}
    calling: set[str] = set()
    for thread, event, module in events:
        stack = stacks.setdefault(thread, [])
        path = walked.setdefault(thread, [])
        if event == "call":
            if stack and stack[-1] != module:
                calling.add(stack[-1])
            stack.append(module)
        elif stack:
            stack.pop()
        top = stack[-1] if stack else None
        if top is not None and (not path or path[-1] != top):
            path.append(top)
    return walked, calling


def summarise(path: list[str], keep: Callable[[str], bool]) -> tuple[list[str], int, Counter[str]]:
    """The path without the dropped modules, how often it re-enters a module it had left,
    and those re-entries per module."""
    kept: list[str] = []
    for module in path:
        if keep(module) and (not kept or kept[-1] != module):
            kept.append(module)
    seen: set[str] = set()
    again: Counter[str] = Counter()
    for module in kept:
        if module in seen:
            again[module] += 1
        seen.add(module)
    return kept, sum(again.values()), again


def kept_paths(events: list[Event], drop_leaves: bool = True) -> dict[str, list[str]]:
    """Each thread's path, with the leaf helpers dropped (or not)."""
    walked, not_leaves = paths(events)
    keep: Callable[[str], bool] = not_leaves.__contains__ if drop_leaves else lambda module: True
    return {thread: summarise(path, keep)[0] for thread, path in walked.items()}
