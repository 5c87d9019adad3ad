"""Wire name -> job class, and the application whose modules a payload may name.

Every job class registers itself under its wire name (an explicit ``name``, e.g. a Ruby-style
``"Admin::ReportJob"``) and under its dotted import path. A payload naming a class that isn't
registered yet may make the worker import its module, but only a module inside the
application: the packages of the app module the worker loaded (``-r``) and those of the
``job_packages`` option. Any other name is an unknown class and nothing is imported, so a
payload can never run another module's import-time code in the worker.

The classes are ``cogworker.Job`` subclasses, which register themselves as they are defined;
this module sits below the one defining ``Job`` and so holds them as plain classes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_classes: dict[str, type[Any]] = {}
_import_roots: frozenset[str] = frozenset()
_lock = threading.Lock()


class UnknownJobError(NameError):
    """A payload names a job class this process doesn't know."""

    wire_name = "NameError"  # what the Ruby gem records, and what tooling filters on


class AppLoadError(Exception):
    """The app module named by ``-r`` couldn't be found or raised while loading."""


def register(job_class: type[Any], *names: str) -> None:
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


def allow_imports(*packages: str) -> None:
    """Let a payload's dotted path import modules inside ``packages`` (each a dotted name:
    the package or module itself and everything below it)."""
    global _import_roots
    with _lock:
        _import_roots = _import_roots | frozenset(packages)


def importable(module: str) -> bool:
    """Whether ``module`` lies inside a package a payload may import from."""
    if not all(part.isidentifier() for part in module.split(".")):
        return False
    return any(module == root or module.startswith(root + ".") for root in _import_roots)


def resolve(name: str) -> type[Any]:
    """The job class registered as ``name``; a dotted path inside the application's packages
    is imported first if needed. Raises UnknownJobError (nothing imported) otherwise."""
    job_class = _classes.get(name)
    if job_class is not None:
        return job_class
    module_name, _, _attribute = name.rpartition(".")
    if module_name and "::" not in name and importable(module_name):
        try:
            importlib.import_module(module_name)
        except Exception as error:
            if not _is_missing(error, module_name):  # the app's module is broken: say how
                raise UnknownJobError(
                    f"unknown job class {name!r}: importing {module_name} raised "
                    f"{describe_error(error)}"
                ) from error
        job_class = _classes.get(name)
        if job_class is not None:
            return job_class
    raise UnknownJobError(f"unknown job class {name!r}: no job is registered under that name")


def _is_missing(error: Exception, module: str) -> bool:
    """The error says that ``module`` (or a package above it) doesn't exist."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    return bool(missing) and (module == missing or module.startswith(f"{missing}."))


def known_names() -> list[str]:
    return sorted(_classes)


# -- loading the application (``-r``) ------------------------------------------------------------


@dataclass(frozen=True)
class App:
    """What loading the app module found."""

    target: str  # as given to -r
    packages: frozenset[str]  # the dotted names a payload may import modules from
    job_classes: int  # job classes registered while it loaded


def load_app(target: str) -> App:
    """Import the app: a dotted module name, a ``.py`` file, or a package directory.

    Its packages are the top-level package of a dotted name, the package of a directory, and
    the module itself (under both its names) for a single file.
    """
    before = len(set(_classes.values()))
    path = Path(target)
    if path.is_dir():
        path = path / "__init__.py"
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise AppLoadError(f"can't load app {target!r}: no such file")
        packages = _load_file(path)
    else:
        _import_dotted(target)
        packages = frozenset({target.partition(".")[0]})
    return App(target, packages, len(set(_classes.values())) - before)


def _import_dotted(target: str) -> None:
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and target.startswith(error.name):
            raise AppLoadError(
                f"can't load app {target!r}: no module named {error.name!r}"
            ) from None
        raise AppLoadError(f"loading {target!r} failed: {describe_error(error)}") from error
    except Exception as error:
        raise AppLoadError(f"loading {target!r} failed: {describe_error(error)}") from error


def _module_name_for(path: Path) -> str:
    """A dotted module name for ``path``: relative to the working directory when inside it."""
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path.stem
    parts = [*relative.parent.parts, path.stem]
    valid = all(part.isidentifier() for part in parts)
    return ".".join(parts) if valid else path.stem


def _load_file(path: Path) -> frozenset[str]:
    package = path.name == "__init__.py"
    name = path.parent.name if package else _module_name_for(path)
    for directory in (str(path.resolve().parent), os.getcwd()):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AppLoadError(f"can't load app {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise AppLoadError(f"loading {str(path)!r} failed: {describe_error(error)}") from error
    if package or path.stem == name:
        return frozenset({name})
    # producers may know the module by either name: register its jobs under both
    sys.modules.setdefault(path.stem, module)
    alias_module(name, path.stem)
    return frozenset({name, path.stem})


def describe_error(error: BaseException) -> str:
    """``Type: first line of the message`` (``Type`` alone when it has none): for one-line
    errors and log lines."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
