"""OpenTelemetry tracing: a PRODUCER span for each push, a CONSUMER span for each run.

::

    from cogworker.contrib import opentelemetry as cogworker_otel

    cogworker_otel.instrument(config)   # in the web app and in the worker's app module

Only ``opentelemetry-api`` is needed: the spans go to whatever ``TracerProvider`` the
application installs (none: they cost next to nothing and go nowhere).

The push's span (``send <queue>``) is a child of the span current at the push (say the web
request's), and its context travels in the payload under ``otel_context``, a JSON object of
the propagator's headers (W3C ``traceparent`` and ``tracestate`` with the default global
propagator). The Ruby gem and every cogworker process keep an unknown key verbatim, retries
and dead entries included, so every attempt of a job finds it. The span covers the client
middleware after it and the write to Redis, except where the write comes later: a bulk push
writes its batch after every job's span has ended, and a ``defer_push`` writes when it chooses.

The run's span (``process <queue>``) covers the whole server middleware chain and ``perform``.
Following the messaging conventions it links to the producer's context; by default it is
also its child, so a request, its push and the job's runs make one trace (a job is one
message, pushed to run on behalf of that request). ``parent_from_producer=False`` starts a
new trace per run instead, linked only: for jobs that run long after their push.

``instrument`` puts the run's middleware first in the server chain as the chain is at the
time of the call, so its span covers the middleware already there. Another middleware
prepended later (another integration's setup, say) goes before it, outside the span: to have
the span cover that one too, call ``instrument`` after it. On the client side it goes last.

A worker ends with ``os._exit``, so the SDK's own flush at exit never runs: ``instrument`` adds
a shutdown handler (``config.shutdown_handlers``) that calls the provider's ``force_flush``
once the worker has stopped, for at most ``FLUSH_TIMEOUT_MILLIS``, so spans a batching
processor still holds are exported. The provider is the one passed, else the global one as it
is at the stop; one without ``force_flush`` (the API's own) holds nothing to flush.

Attributes: ``messaging.system`` (``cogworker``), ``messaging.operation.name`` and
``messaging.operation.type`` (``send`` / ``process``), ``messaging.destination.name`` (the
queue), ``messaging.message.id`` (the jid), and in cogworker's own namespace
``messaging.cogworker.job.class`` and ``messaging.cogworker.message.retry_count`` (failed
attempts before this one). A run that raises gets the exception recorded, ``error.type`` and
status ERROR; the exception still propagates, so the worker files the failure as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import cogworker
from cogworker import failure

if TYPE_CHECKING:
    import redis

    from cogworker.config import Config
    from cogworker.middleware import JobInstance
    from cogworker.wire import Payload

logger = logging.getLogger("cogworker.contrib.opentelemetry")

CONTEXT_KEY = "otel_context"
"""The payload key holding the producer's propagation headers."""
SYSTEM = "cogworker"
TRACER_NAME = "cogworker.contrib.opentelemetry"
FLUSH_TIMEOUT_MILLIS = 5000
"""How long a stopped worker waits for its spans to be exported."""

# attribute names of the messaging semantic conventions (opentelemetry-semantic-conventions
# is not a run-time dependency: the tests check these against it)
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_DESTINATION_NAME = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
ERROR_TYPE = "error.type"
# system-specific attributes go in messaging.{system}.*, as the conventions ask
JOB_CLASS = "messaging.cogworker.job.class"
RETRY_COUNT = "messaging.cogworker.message.retry_count"


def instrument(
    config: Config,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    parent_from_producer: bool = True,
) -> None:
    """Trace ``config``'s pushes and runs, and flush the spans when a worker stops (calling it
    again replaces the settings).

    ``tracer_provider``: where the spans go; the global one (read at each span, so it may be
    installed later) if None. ``parent_from_producer``: whether a run's span is the child of
    its push's span (one trace) or only linked to it (a trace per run).
    """
    if not isinstance(parent_from_producer, bool):
        raise TypeError(f"parent_from_producer must be a bool, got {parent_from_producer!r}")
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise TypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, got {tracer_provider!r}"
        )
    tracer = trace.get_tracer(TRACER_NAME, cogworker.__version__, tracer_provider=tracer_provider)
    # last on the client side: the span and the context are only made for a push that every
    # other middleware let through; first on the server side: the span covers those there now
    config.client_middleware.add(TracingClientMiddleware, tracer)
    config.server_middleware.prepend(TracingServerMiddleware, tracer, parent_from_producer)
    others = [each for each in config.shutdown_handlers if not isinstance(each, SpanFlush)]
    config.shutdown_handlers = [*others, SpanFlush(tracer_provider)]


class SpanFlush:
    """The shutdown handler: exports what the provider's processors still hold."""

    def __init__(self, tracer_provider: trace.TracerProvider | None) -> None:
        self.tracer_provider = tracer_provider

    def __call__(self) -> None:
        provider = self.tracer_provider
        if provider is None:  # the global one as it is now, set up after instrument maybe
            provider = trace.get_tracer_provider()
        force_flush = getattr(provider, "force_flush", None)
        if not callable(force_flush):  # the API's proxy or no-op provider: nothing buffered
            return
        if force_flush(timeout_millis=FLUSH_TIMEOUT_MILLIS) is False:
            logger.warning(
                "some spans were not exported within %d ms of the worker's stop",
                FLUSH_TIMEOUT_MILLIS,
            )


def _common_attributes(operation: str, job: Payload, queue: str) -> dict[str, Any]:
    return {
        MESSAGING_SYSTEM: SYSTEM,
        MESSAGING_OPERATION_NAME: operation,
        MESSAGING_OPERATION_TYPE: operation,
        MESSAGING_DESTINATION_NAME: queue,
        MESSAGING_MESSAGE_ID: str(job.get("jid")),
        JOB_CLASS: str(job.get("class")),
    }


def _record_failure(span: trace.Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_attribute(ERROR_TYPE, failure.error_class_name(error))
    span.set_status(
        Status(StatusCode.ERROR, f"{type(error).__name__}: {failure.error_message(error)}")
    )


def carried_headers(job: Payload) -> dict[str, str] | None:
    """The propagation headers in ``job``, or None when it carries none usable."""
    carried = job.get(CONTEXT_KEY)
    if not isinstance(carried, Mapping):
        return None
    headers = {key: value for key, value in carried.items() if isinstance(value, str)}
    return headers if len(headers) == len(carried) else None


def _span_context_of(headers: Mapping[str, str]) -> trace.SpanContext:
    return trace.get_current_span(propagate.extract(headers)).get_span_context()


class TracingClientMiddleware:
    """The ``send <queue>`` span around the rest of the push; puts its context in the job."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def __call__(
        self,
        job_class: str,
        job: Payload,
        queue: str,
        redis: redis.Redis,
        call_next: Callable[[], None],
    ) -> None:
        given = carried_headers(job)
        if given is None and CONTEXT_KEY in job:
            raise TypeError(
                f"{job_class}: the job's {CONTEXT_KEY!r} must be an object of string headers, "
                f"got {job[CONTEXT_KEY]!r}"
            )
        links: list[Link] = []
        if given is not None:  # a context the caller put there stays: the span links to it
            linked = _span_context_of(given)
            if linked.is_valid:
                links.append(Link(linked))
        with self.tracer.start_as_current_span(
            f"send {queue}",
            kind=SpanKind.PRODUCER,
            attributes=_common_attributes("send", job, queue),
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if given is None:
                headers: dict[str, str] = {}
                propagate.inject(headers)
                if headers:  # nothing to carry when no trace is going on
                    job[CONTEXT_KEY] = headers
            try:
                call_next()
            except BaseException as error:
                _record_failure(span, error)
                raise


class TracingServerMiddleware:
    """The ``process <queue>`` span around the rest of the chain and ``perform``."""

    def __init__(self, tracer: trace.Tracer, parent_from_producer: bool) -> None:
        self.tracer = tracer
        self.parent_from_producer = parent_from_producer

    def _parent_and_links(self, job: Payload) -> tuple[otel_context.Context | None, list[Link]]:
        headers = carried_headers(job)
        if headers is None and CONTEXT_KEY in job:
            logger.warning(
                "jid=%s: ignoring its %r, not an object of string headers",
                job.get("jid"),
                CONTEXT_KEY,
            )
        own_trace = None if self.parent_from_producer else otel_context.Context()  # a root
        if headers is None:
            return own_trace, []
        producer = propagate.extract(headers)
        linked = trace.get_current_span(producer).get_span_context()
        links = [Link(linked)] if linked.is_valid else []
        return (producer if own_trace is None else own_trace), links

    def __call__(
        self,
        worker: JobInstance | None,
        job: Payload,
        queue: str,
        call_next: Callable[[], None],
    ) -> None:
        parent, links = self._parent_and_links(job)
        attributes = _common_attributes("process", job, queue)
        attributes[RETRY_COUNT] = failure.retry_count(job)
        with self.tracer.start_as_current_span(
            f"process {queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                call_next()
            except BaseException as error:
                _record_failure(span, error)
                raise
