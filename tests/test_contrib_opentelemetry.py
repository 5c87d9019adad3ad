"""cogworker.contrib.opentelemetry: the push's PRODUCER span, the run's CONSUMER span, and the
trace context carried between them in the payload.

The end-to-end tests run a real worker (``cogworker run -r tests/contrib_otel_app.py``) whose
SDK exports every finished span as a JSON line to a file; the test process traces its side
(a real request through OpenTelemetry's ASGI middleware, and the push) with the SDK's
InMemorySpanExporter, so both halves of the trace are compared by their ids.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import messaging_attributes
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode
from runtime_support import Worker, cogworker_env, started_workers, zset_entries
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

import cogworker
from cogworker import keys, testing
from cogworker.api.sets import retry_set
from cogworker.contrib import opentelemetry as cogworker_otel
from cogworker.execute import execute

with warnings.catch_warnings():
    # Starlette asks for httpx2, which the test extra doesn't install; httpx works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

APP = Path(__file__).resolve().parent / "contrib_otel_app.py"


class Tracing:
    """The test process's side: an SDK provider whose spans stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test web app")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        (span,) = [span for span in self.spans() if span.name == name]
        return span


@pytest.fixture
def tracing(config: cogworker.Config) -> Iterator[Tracing]:
    side = Tracing()
    cogworker_otel.instrument(config, tracer_provider=side.provider)
    yield side
    side.provider.shutdown()


StartOtelWorker = Callable[..., tuple[Worker, Path]]


@pytest.fixture
def start_otel_worker(tmp_path: Path, r: redis.Redis, redis_url: str) -> Iterator[StartOtelWorker]:
    """Starts a real worker on the shared server, with more environment for its app module;
    returns it and the file its spans are written to."""
    with started_workers(tmp_path) as workers:

        def start(**more_env: str) -> tuple[Worker, Path]:
            spans = tmp_path / f"spans-{len(workers.started)}.jsonl"
            env = cogworker_env(redis_url, OTEL_SPANS_FILE=str(spans), **more_env)
            return workers.start(["run", "-r", str(APP), "-c", "2"], env), spans

        yield start


@pytest.fixture
def worker_spans(start_otel_worker: StartOtelWorker) -> Path:
    """The file a real worker writes its spans to (a synchronous exporter: at once)."""
    _, spans = start_otel_worker()
    return spans


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans written so far; a last line without its newline is still being written."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [json.loads(line) for line in lines]


def exported(path: Path, name: str, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
    """The first ``count`` spans called ``name`` the worker exported, waiting for them."""

    def found() -> list[dict[str, Any]] | None:
        spans = [span for span in read_spans(path) if span["name"] == name]
        return spans[:count] if len(spans) >= count else None

    return list(wait_for(found, timeout))


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"0x{trace.format_trace_id(span.context.trace_id)}"


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"0x{trace.format_span_id(span.context.span_id)}"


def test_attribute_names_are_the_installed_semantic_conventions() -> None:
    assert cogworker_otel.MESSAGING_SYSTEM == messaging_attributes.MESSAGING_SYSTEM
    assert cogworker_otel.MESSAGING_OPERATION_NAME == messaging_attributes.MESSAGING_OPERATION_NAME
    assert cogworker_otel.MESSAGING_OPERATION_TYPE == messaging_attributes.MESSAGING_OPERATION_TYPE
    assert (
        cogworker_otel.MESSAGING_DESTINATION_NAME == messaging_attributes.MESSAGING_DESTINATION_NAME
    )
    assert cogworker_otel.MESSAGING_MESSAGE_ID == messaging_attributes.MESSAGING_MESSAGE_ID
    assert cogworker_otel.ERROR_TYPE == error_attributes.ERROR_TYPE
    operations = messaging_attributes.MessagingOperationTypeValues
    assert (operations.SEND.value, operations.PROCESS.value) == ("send", "process")


def signup_app(config: cogworker.Config, tracer_provider: TracerProvider) -> ASGIApp:
    """A web app whose endpoint pushes the job, traced by OpenTelemetry's ASGI middleware."""

    def signup(request: Request) -> JSONResponse:  # sync: Starlette runs it in a thread
        jid = cogworker.Client(config).push(
            {"class": "Contrib::Otel::Signup", "args": [request.query_params["email"]]}
        )
        return JSONResponse({"jid": jid})

    app = Starlette(routes=[Route("/signup", signup, methods=["POST"])])
    return OpenTelemetryMiddleware(app, tracer_provider=tracer_provider)


def test_web_request_push_and_the_run_in_a_worker_make_one_trace(
    tracing: Tracing, config: cogworker.Config, worker_spans: Path
) -> None:
    with TestClient(signup_app(config, tracing.provider)) as web:
        response = web.post("/signup", params={"email": "ada@example.com"})
    assert response.status_code == 200
    jid = response.json()["jid"]
    (request,) = [span for span in tracing.spans() if span.kind is SpanKind.SERVER]
    assert request.instrumentation_scope is not None
    assert (request.name, request.instrumentation_scope.name) == (
        "POST /signup",
        "opentelemetry.instrumentation.asgi",
    )
    send = tracing.named("send default")
    (process,) = exported(worker_spans, "process default")
    (mail,) = exported(worker_spans, "send welcome mail")

    trace_id = hex_trace(request)
    assert {hex_trace(send), process["context"]["trace_id"], mail["context"]["trace_id"]} == {
        trace_id
    }
    # the instrumentation's request span -> send -> process -> the job's own span
    assert send.parent is not None and send.parent.span_id == request.context.span_id
    assert process["parent_id"] == hex_span(send)
    assert mail["parent_id"] == process["context"]["span_id"]
    # the conventions' link from the run to its creation context, beside the parent
    assert [link["context"]["span_id"] for link in process["links"]] == [hex_span(send)]

    assert send.kind is SpanKind.PRODUCER and process["kind"] == "SpanKind.CONSUMER"
    common = {
        "messaging.system": "cogworker",
        "messaging.destination.name": "default",
        "messaging.message.id": jid,
        "messaging.cogworker.job.class": "Contrib::Otel::Signup",
    }
    assert dict(send.attributes or {}) == {
        **common,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
    }
    assert process["attributes"] == {
        **common,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.cogworker.message.retry_count": 0,
    }
    assert process["status"]["status_code"] == "UNSET"


def test_a_failed_run_is_recorded_on_its_span_and_the_job_still_goes_to_retry(
    tracing: Tracing, config: cogworker.Config, worker_spans: Path, r: redis.Redis
) -> None:
    with tracing.tracer.start_as_current_span("POST /pay", kind=SpanKind.SERVER):
        jid = cogworker.Client(config).push(
            {"class": "Contrib::Otel::Declined", "args": ["4242"], "retry": 3}
        )
    send = tracing.named("send default")
    (first,) = exported(worker_spans, "process default")

    assert first["status"] == {
        "status_code": "ERROR",
        "description": "ValueError: card 4242 declined",
    }
    assert first["attributes"]["error.type"] == "ValueError"
    (event,) = first["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "card 4242 declined"
    assert "in perform" in event["attributes"]["exception.stacktrace"]

    # the exception reached the worker's failure handling: the job waits in the retry set,
    # carrying its trace context for the next attempt
    ((entry, _),) = wait_for(lambda: zset_entries(r, keys.RETRY))
    assert (entry["jid"], entry["retry_count"], entry["error_class"]) == (jid, 1, "ValueError")
    assert entry["otel_context"]["traceparent"].split("-")[2] == hex_span(send)[2:]

    # the next attempt (retried now) is in the same trace, one retry further
    (raw,) = r.zrange(keys.RETRY, 0, -1)
    retry_set(r).retry_now(raw)
    first_two = exported(worker_spans, "process default", count=2)
    second = first_two[1]
    assert second["attributes"]["messaging.cogworker.message.retry_count"] == 1
    assert second["context"]["trace_id"] == hex_trace(send)
    assert second["parent_id"] == hex_span(send)
    assert second["status"]["status_code"] == "ERROR"


def test_spans_a_batch_processor_holds_are_exported_when_the_worker_stops(
    start_otel_worker: StartOtelWorker, config: cogworker.Config, r: redis.Redis
) -> None:
    worker, spans = start_otel_worker(OTEL_BATCH_SPANS="1")  # exports every 10 minutes
    cogworker.Client(config).push({"class": "Contrib::Otel::Signup", "args": ["ada@example.com"]})
    wait_for(lambda: r.get(keys.STATS_PROCESSED) == "1")
    assert read_spans(spans) == []  # ended, but held by the processor
    assert worker.stop() == 0
    assert sorted(span["name"] for span in read_spans(spans)) == [
        "process default",
        "send welcome mail",
    ]
    assert "shutdown handler" not in worker.output()


def test_the_flush_at_stop_is_added_once_for_the_provider_last_given(
    config: cogworker.Config,
) -> None:
    first, last = TracerProvider(), TracerProvider()
    exporter = InMemorySpanExporter()
    last.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    cogworker_otel.instrument(config, tracer_provider=first)
    cogworker_otel.instrument(config, tracer_provider=last)
    (flush,) = config.shutdown_handlers
    last.get_tracer("test").start_span("held").end()
    assert exporter.get_finished_spans() == ()
    flush()
    assert [span.name for span in exporter.get_finished_spans()] == ["held"]
    last.shutdown()
    first.shutdown()

    # the API's own provider has no force_flush: it holds nothing, and the flush does nothing
    cogworker_otel.instrument(config, tracer_provider=trace.NoOpTracerProvider())
    (flush,) = config.shutdown_handlers
    flush()


def test_the_run_span_covers_the_middleware_prepended_before_instrument_not_after(
    tracing: Tracing, config: cogworker.Config
) -> None:
    seen: dict[str, bool] = {}

    def noting(name: str) -> type:
        class Noting:
            def __call__(self, worker: Any, job: Any, queue: str, call_next: Any) -> None:
                seen[name] = trace.get_current_span().get_span_context().is_valid
                call_next()

        return Noting

    class Ordered(cogworker.Job):
        name = "ContribOtel::Ordered"

        def perform(self) -> None:
            pass

    config.server_middleware.prepend(noting("before"))
    cogworker_otel.instrument(config, tracer_provider=tracing.provider)
    config.server_middleware.prepend(noting("after"))  # now first: outside the run's span
    execute(config.server_middleware, {"class": Ordered.name, "jid": "c" * 24}, "default")
    assert seen == {"before": True, "after": False}


def test_reading_spans_leaves_out_a_line_still_being_written(tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    spans.write_text('{"name": "process default"}\n{"name": "send welc')
    assert read_spans(spans) == [{"name": "process default"}]


def test_inline_mode_nests_the_run_in_the_push_and_the_error_reaches_the_caller(
    tracing: Tracing, config: cogworker.Config
) -> None:
    class Boom(cogworker.Job):
        name = "ContribOtel::Boom"

        def perform(self) -> None:
            raise KeyError("missing")

    with testing.inline(), pytest.raises(KeyError):
        cogworker.Client(config).push({"class": "ContribOtel::Boom"})
    send, process = tracing.named("send default"), tracing.named("process default")
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.status.status_code is StatusCode.ERROR
    assert send.status.status_code is StatusCode.ERROR  # the push raised too, inline
    assert (process.attributes or {})["error.type"] == "KeyError"


def test_link_only_runs_start_a_trace_of_their_own(config: cogworker.Config) -> None:
    side = Tracing()
    cogworker_otel.instrument(config, tracer_provider=side.provider, parent_from_producer=False)

    class Quiet(cogworker.Job):
        name = "ContribOtel::Quiet"

        def perform(self) -> None:
            pass

    with testing.inline():
        cogworker.Client(config).push({"class": "ContribOtel::Quiet"})
    send, process = side.named("send default"), side.named("process default")
    assert process.parent is None
    assert hex_trace(process) != hex_trace(send)
    assert [link.context.span_id for link in process.links] == [send.context.span_id]


def test_a_context_the_caller_put_in_the_job_is_kept_and_linked(
    tracing: Tracing, config: cogworker.Config, r: redis.Redis
) -> None:
    given = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    cogworker.Client(config).push({"class": "Contrib::Otel::Signup", "otel_context": given})
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    assert json.loads(raw)["otel_context"] == given
    (link,) = tracing.named("send default").links
    assert f"{link.context.span_id:016x}" == "b7ad6b7169203331"


def test_a_malformed_context_is_refused_at_the_push_and_ignored_by_a_run(
    tracing: Tracing, config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TypeError, match="the job's 'otel_context' must be an object of string"):
        cogworker.Client(config).push({"class": "Contrib::Otel::Signup", "otel_context": "x"})
    assert r.llen(keys.queue("default")) == 0

    ran: list[str] = []

    class Fine(cogworker.Job):
        name = "ContribOtel::Fine"

        def perform(self) -> None:
            ran.append("yes")

    job = {"class": "ContribOtel::Fine", "jid": "a" * 24, "args": [], "otel_context": [1]}
    with caplog.at_level(logging.WARNING, "cogworker.contrib.opentelemetry"):
        execute(config.server_middleware, job, "default")
    assert ran == ["yes"]
    assert tracing.named("process default").parent is None
    assert f"jid={'a' * 24}: ignoring its 'otel_context'" in caplog.text


def test_instrument_refuses_options_it_cannot_honour(config: cogworker.Config) -> None:
    with pytest.raises(TypeError, match="parent_from_producer must be a bool, got 'no'"):
        cogworker_otel.instrument(config, parent_from_producer="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be an opentelemetry"):
        cogworker_otel.instrument(config, tracer_provider=object())  # type: ignore[arg-type]
    assert cogworker_otel.TracingClientMiddleware not in config.client_middleware
    assert cogworker_otel.TracingServerMiddleware not in config.server_middleware
