"""Sentry error reporting: one event for each failed run of a job.

::

    import sentry_sdk
    from cogworker.contrib import sentry as cogworker_sentry

    sentry_sdk.init(dsn=...)
    cogworker_sentry.instrument(config)   # in the worker's app module

Each run gets its own isolation scope, so breadcrumbs and tags never leak from one job to the
next on a processor thread. Every event sent during the run (the failure's, or one the job
sends itself) carries the tags ``cogworker.job_class``, ``cogworker.queue`` and
``cogworker.jid``, and a ``cogworker`` context with the class, jid, queue, args, ``retry`` (the
job's option) and ``retry_count`` (failed attempts before this run). A failure's event adds
``will_retry`` (also as the tag ``cogworker.will_retry``), its transaction is the job's class
and its mechanism is ``cogworker``, unhandled. The exception still propagates: the worker
files the failure as usual.

``will_retry`` is the worker's own decision, made before the middleware sees the exception
(``cogworker.failure.is_terminal``: the job's ``retry_in`` hook if it has one, else its retry
budget); a run in a testing mode is never retried.

Options of ``instrument``:

- ``send_args``: None (default) follows Sentry's own rule for job data: the ``queues`` flag of
  its ``data_collection`` option (sentry-sdk 3 always has it, True unless set otherwise; in 2.x
  it counts only when the user set ``data_collection``), otherwise ``send_default_pii`` (SDKs
  before ``data_collection``); True always, False never; args not sent show as ``[Filtered]``.
- ``scrub_args``: a callable given the job's args, returning what to send instead (it runs only
  when args are sent; if it raises, the args are not sent).
- ``report_after_retries``: True sends no event for a failure that will be retried, only for
  the one that ends the job (dead, killed or discarded).

``instrument`` puts the middleware first in the server chain as the chain is at the time of the
call, so it reports failures raised by the middleware already there. Another middleware
prepended later (another integration's setup, say) goes before it, outside its scope: to have
Sentry wrap that one too, call ``instrument`` after it.

A worker ends with ``os._exit``, so the SDK's own flush at exit never runs: ``instrument`` adds
a shutdown handler (``config.shutdown_handlers``) that flushes the events still queued once the
worker has stopped, waiting at most the client's ``shutdown_timeout`` (Sentry's bound for its
own flush at exit, 2 s by default).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sentry_sdk
from sentry_sdk.utils import event_from_exception

from cogworker import failure, testing

if TYPE_CHECKING:
    from cogworker.config import Config
    from cogworker.middleware import JobInstance
    from cogworker.wire import Payload

logger = logging.getLogger("cogworker.contrib.sentry")

FILTERED = "[Filtered]"
"""What Sentry's own scrubbing puts in place of a value it won't send."""
CONTEXT = "cogworker"

ArgsScrubber = Callable[[list[Any]], Any]

MECHANISM = {"type": "cogworker", "handled": False}
_PASS_CLIENT_OPTIONS = "client_options" in inspect.signature(event_from_exception).parameters
"""sentry-sdk 2.x's ``event_from_exception`` takes the client's options; 3.x reads them itself."""


@dataclass(frozen=True)
class SentryOptions:
    send_args: bool | None = None
    scrub_args: ArgsScrubber | None = None
    report_after_retries: bool = False


def instrument(
    config: Config,
    *,
    send_args: bool | None = None,
    scrub_args: ArgsScrubber | None = None,
    report_after_retries: bool = False,
) -> None:
    """Report ``config``'s failed runs to Sentry (calling it again replaces the options)."""
    if send_args is not None and not isinstance(send_args, bool):
        raise TypeError(f"send_args must be True, False or None, got {send_args!r}")
    if scrub_args is not None and not callable(scrub_args):
        raise TypeError(f"scrub_args must be a callable taking the job's args, got {scrub_args!r}")
    if scrub_args is not None and send_args is False:
        raise ValueError("scrub_args would never run: send_args=False sends no args at all")
    if not isinstance(report_after_retries, bool):
        raise TypeError(f"report_after_retries must be a bool, got {report_after_retries!r}")
    options = SentryOptions(send_args, scrub_args, report_after_retries)
    config.server_middleware.prepend(SentryServerMiddleware, options)
    if flush_queued_events not in config.shutdown_handlers:
        config.shutdown_handlers.append(flush_queued_events)


def flush_queued_events() -> None:
    """Sends what the client still holds, within its ``shutdown_timeout`` (a worker's exit
    skips the SDK's own flush at exit)."""
    bound = (sentry_sdk.get_client().options or {}).get("shutdown_timeout")
    sentry_sdk.flush(timeout=float(bound) if isinstance(bound, int | float) else 2.0)


def will_retry(job: Payload) -> bool:
    """Whether the worker runs ``job`` again after the failure being raised through the
    middleware now (decided before the middleware saw it)."""
    if testing.active():  # the testing modes retry nothing
        return False
    return not failure.is_terminal(job)


def _args_allowed(send_args: bool | None) -> bool:
    if send_args is not None:
        return send_args
    client = sentry_sdk.get_client()
    collection = (client.options or {}).get("data_collection")
    pii_rule = getattr(client, "should_send_default_pii", None)  # gone in sentry-sdk 3
    if pii_rule is None:  # 3.x: data_collection is always resolved, queues True by default
        return not isinstance(collection, dict) or bool(collection.get("queues", True))
    if isinstance(collection, dict) and collection.get("provided_by_user"):
        return bool(collection.get("queues"))  # late 2.x: it wins over send_default_pii
    return bool(pii_rule())


def failure_event(error: BaseException) -> tuple[Any, dict[str, Any]]:
    """The event (and its hint) reporting ``error`` as raised through the middleware."""
    options: dict[str, Any] = {}
    if _PASS_CLIENT_OPTIONS:
        options["client_options"] = sentry_sdk.get_client().options
    return event_from_exception(error, mechanism=dict(MECHANISM), **options)


def shown_args(job: Payload, options: SentryOptions) -> Any:
    """The job's args as its events show them."""
    args = job.get("args")
    if not _args_allowed(options.send_args):
        return FILTERED
    if options.scrub_args is None:
        return args
    try:
        return options.scrub_args(list(args) if isinstance(args, list) else [])
    except Exception as error:
        logger.error(
            "jid=%s: scrub_args raised %s: %s; its args are not sent to Sentry",
            job.get("jid"),
            type(error).__name__,
            error,
        )
        return FILTERED


class SentryServerMiddleware:
    """Runs the rest of the chain in a fresh isolation scope; reports what it raises."""

    def __init__(self, options: SentryOptions) -> None:
        self.options = options

    def __call__(
        self,
        worker: JobInstance | None,
        job: Payload,
        queue: str,
        call_next: Callable[[], None],
    ) -> None:
        client = sentry_sdk.get_client()
        with sentry_sdk.isolation_scope() as scope:
            if sentry_sdk.get_client() is not client:  # early 2.x forks drop a scope's client
                scope.set_client(client)
            scope.clear_breadcrumbs()  # the copy holds what came before this run
            described = self._describe(scope, job, queue)
            try:
                call_next()
            except BaseException as error:
                self._report(scope, job, described, error)
                raise

    def _describe(self, scope: sentry_sdk.Scope, job: Payload, queue: str) -> dict[str, Any]:
        job_class, jid = str(job.get("class")), str(job.get("jid"))
        scope.set_transaction_name(job_class, source="task")
        scope.set_tag("cogworker.job_class", job_class)
        scope.set_tag("cogworker.queue", queue)
        scope.set_tag("cogworker.jid", jid)
        described = {
            "class": job_class,
            "jid": jid,
            "queue": queue,
            "args": shown_args(job, self.options),
            "retry": job.get("retry"),
            "retry_count": failure.retry_count(job),
        }
        scope.set_context(CONTEXT, described)
        return described

    def _report(
        self, scope: sentry_sdk.Scope, job: Payload, described: dict[str, Any], error: BaseException
    ) -> None:
        # nothing here may raise: it would replace the job's exception on its way to the worker
        try:
            retrying = will_retry(job)
            if retrying and self.options.report_after_retries:
                return
            scope.set_context(CONTEXT, {**described, "will_retry": retrying})
            scope.set_tag("cogworker.will_retry", "true" if retrying else "false")
            event, hint = failure_event(error)
            scope.capture_event(event, hint=hint)
        except Exception as report_error:
            logger.error(
                "jid=%s: couldn't report its failure to Sentry: %s: %s",
                job.get("jid"),
                type(report_error).__name__,
                report_error,
            )
