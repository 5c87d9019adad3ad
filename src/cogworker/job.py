"""Defining jobs: a ``Job`` subclass or a function decorated with ``@job``.

A class::

    class GreetingJob(cogworker.Job, queue="critical", retry=5):
        name = "GreetingJob"          # the wire name; Ruby producers use the same string

        def perform(self, name: str) -> None:
            print(f"hello {name}")

    GreetingJob.perform_async("Ada")                    # mypy checks the arguments
    GreetingJob.perform_in(timedelta(minutes=5), "Ada")
    GreetingJob.set(queue="low").perform_async("Ada")

Options are class keywords, inherited by subclasses and overridable there: ``queue``,
``retry`` (True = 25 retries, False = none, or an int), ``unique`` (``"until_executed"``)
and any other keyword, which is copied verbatim into every payload (``lock_run=...``).

A function::

    @cogworker.job(queue="low", retry=5)
    def send_receipt(order_id: int) -> None: ...

    send_receipt.perform_async(42)

``perform`` may be ``async def``; the worker then runs it on an event loop owned by the
processor thread. Arguments must be JSON values, passed positionally (the wire format has no
keyword arguments).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar, overload

from cogworker import registry
from cogworker.client import Client, Enqueuer, Performer

__all__ = ["Enqueuer", "FunctionJob", "Job", "Performer", "job"]

P = ParamSpec("P")
R = TypeVar("R")

KNOWN_OPTIONS = ("queue", "retry", "unique")


def _check_options(owner: str, options: dict[str, Any]) -> dict[str, Any]:
    """The given options without unset (None) ones; raises ValueError naming a bad one."""
    options = {key: value for key, value in options.items() if value is not None}
    queue = options.get("queue")
    if "queue" in options and (not isinstance(queue, str) or not queue):
        raise ValueError(f"{owner}: queue must be a non-empty string, got {queue!r}")
    retry = options.get("retry")
    if "retry" in options and not isinstance(retry, bool | int):
        raise ValueError(
            f"{owner}: retry must be True, False or a number of retries, got {retry!r}"
        )
    unique = options.get("unique")
    if unique is not None and unique != "until_executed":
        raise ValueError(f"{owner}: unique must be 'until_executed' or None, got {unique!r}")
    return options


class Job:
    """Base class of class-based jobs; see the module docstring for how to define one."""

    name: ClassVar[str] = ""
    """The wire name written to a payload's ``class``. Defaults to the dotted import path."""

    options: ClassVar[dict[str, Any]] = {}
    """Options copied into every payload (queue, retry, unique and any extra keys)."""

    jid: str = ""
    """The id of the job being performed; set by the worker before ``perform``."""

    def __init_subclass__(
        cls,
        *,
        queue: str | None = None,
        retry: bool | int | None = None,
        unique: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init_subclass__()
        dotted = f"{cls.__module__}.{cls.__qualname__}"
        given: dict[str, Any] = {"queue": queue, "unique": unique, **extra}
        if retry is not None:
            given["retry"] = retry
        cls.options = {**cls.options, **_check_options(dotted, given)}
        if "name" not in cls.__dict__:
            cls.name = dotted
        elif not isinstance(cls.name, str) or not cls.name:
            raise ValueError(f"{dotted}: name must be a non-empty string, got {cls.name!r}")
        registry.register(cls, cls.name, dotted)

    @classmethod
    def set(
        cls: type[Performer[P]], *, client: Client | None = None, **overrides: Any
    ) -> Enqueuer[P]:
        """Enqueue with options overridden for these calls: ``Job.set(queue="low")``."""
        job_class: type[Job] = cls  # type: ignore[assignment]
        return Enqueuer(job_class, _check_options(job_class.name, overrides), client)

    @classmethod
    def perform_async(cls: type[Performer[P]], *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue now; returns the jid, or None if a client middleware stopped the push."""
        enqueuer: Enqueuer[P] = Enqueuer(cls, {})  # type: ignore[arg-type]
        return enqueuer.perform_async(*args, **kwargs)

    @classmethod
    def perform_in(
        cls: type[Performer[P]], interval: timedelta | float, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Enqueue to run after ``interval`` (seconds or a timedelta) from now."""
        enqueuer: Enqueuer[P] = Enqueuer(cls, {})  # type: ignore[arg-type]
        return enqueuer.perform_in(interval, *args, **kwargs)

    @classmethod
    def perform_at(
        cls: type[Performer[P]], when: datetime | float, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Enqueue to run at ``when``: an aware datetime or epoch seconds."""
        enqueuer: Enqueuer[P] = Enqueuer(cls, {})  # type: ignore[arg-type]
        return enqueuer.perform_at(when, *args, **kwargs)

    @classmethod
    def perform_bulk(cls, args_list: Iterable[Sequence[Any]]) -> list[str | None]:
        """Enqueue one job per argument list, in round trips of up to 1,000 jobs."""
        return Enqueuer(cls, {}).perform_bulk(args_list)


class FunctionJob(Generic[P, R]):
    """What ``@job`` returns: the function, still callable, plus the enqueue methods."""

    def __init__(self, func: Callable[P, R], job_class: type[Job]) -> None:
        self.func = func
        self.job_class = job_class
        self.name = job_class.name
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def set(self, *, client: Client | None = None, **overrides: Any) -> Enqueuer[P]:
        return Enqueuer(self.job_class, _check_options(self.name, overrides), client)

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return Enqueuer[P](self.job_class, {}).perform_async(*args, **kwargs)

    def perform_in(
        self, interval: timedelta | float, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        return Enqueuer[P](self.job_class, {}).perform_in(interval, *args, **kwargs)

    def perform_at(self, when: datetime | float, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return Enqueuer[P](self.job_class, {}).perform_at(when, *args, **kwargs)

    def perform_bulk(self, args_list: Iterable[Sequence[Any]]) -> list[str | None]:
        return Enqueuer[P](self.job_class, {}).perform_bulk(args_list)


@overload
def job(func: Callable[P, R], /) -> FunctionJob[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str | None = None,
    retry: bool | int | None = None,
    unique: str | None = None,
    **extra: Any,
) -> Callable[[Callable[P, R]], FunctionJob[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    retry: bool | int | None = None,
    unique: str | None = None,
    **extra: Any,
) -> FunctionJob[P, R] | Callable[[Callable[P, R]], FunctionJob[P, R]]:
    """Turn a function into a job; its wire name is ``name`` or its dotted import path."""

    def wrap(target: Callable[P, R]) -> FunctionJob[P, R]:
        dotted = f"{target.__module__}.{target.__qualname__}"
        call: Callable[..., Any] = target

        def perform(self: Job, *args: Any) -> Any:
            return call(*args)

        signature = inspect.signature(target)
        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        perform.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_parameter, *signature.parameters.values()]
        )

        namespace: dict[str, Any] = {
            "perform": perform,
            "name": name or dotted,
            "__module__": target.__module__,
            "__qualname__": target.__qualname__,
        }
        job_class = type(
            target.__name__, (Job,), namespace, queue=queue, retry=retry, unique=unique, **extra
        )
        return FunctionJob(target, job_class)

    return wrap(func) if func is not None else wrap
