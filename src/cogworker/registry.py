"""Wire name -> job class, so a worker can turn a payload's ``class`` back into code.

Every job class registers itself under its wire name (an explicit ``name``, e.g. a Ruby-style
``"Admin::ReportJob"``) and under its dotted import path. A name that isn't registered is
looked up as a dotted path (``package.module.Class``) and imported once.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cogworker.job import Job

_classes: dict[str, type[Job]] = {}
_lock = threading.Lock()


class UnknownJobError(NameError):
    """A payload names a job class this process doesn't know."""

    wire_name = "NameError"  # what the Ruby gem records, and what tooling filters on


def register(job_class: type[Job], *names: str) -> None:
    with _lock:
        for name in names:
            if name:
                _classes[name] = job_class


def alias_module(old: str, new: str) -> None:
    """Also register every class of module ``old`` under module ``new``'s dotted path.

    A worker that loads ``app/jobs.py`` from a file gets a module named after the file,
    while producers import it as ``app.jobs``; both spellings must resolve.
    """
    prefix = old + "."
    with _lock:
        for name, job_class in list(_classes.items()):
            if name.startswith(prefix):
                _classes[new + "." + name[len(prefix) :]] = job_class


def resolve(name: str) -> type[Job]:
    """The job class registered as ``name``, importing a dotted path if needed."""
    job_class = _classes.get(name)
    if job_class is not None:
        return job_class
    module_name, _, _attribute = name.rpartition(".")
    if module_name and "::" not in name:
        with contextlib.suppress(ImportError):
            importlib.import_module(module_name)
        job_class = _classes.get(name)
        if job_class is not None:
            return job_class
    raise UnknownJobError(f"unknown job class {name!r}: no job is registered under that name")


def known_names() -> list[str]:
    return sorted(_classes)
