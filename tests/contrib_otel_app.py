"""The worker's app module for tests/test_contrib_opentelemetry.py (``cogworker run -r`` it).

It installs the OpenTelemetry SDK as the global tracer provider (after instrumenting, as an app
may: the flush at the stop finds it then) with an exporter that appends every exported span,
as one JSON line, to the file named by ``$OTEL_SPANS_FILE``: the test reads the worker's spans
back from there. By default the processor is synchronous (SimpleSpanProcessor), so a span is in
the file as soon as it ended; with ``$OTEL_BATCH_SPANS`` set it is a BatchSpanProcessor that
exports nothing before the worker's stop (its schedule delay is ten minutes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

import cogworker
from cogworker.contrib import opentelemetry as cogworker_otel


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()  # processor threads end spans concurrently

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


cogworker_otel.instrument(cogworker.default_config())

exporter = JsonLinesExporter(os.environ["OTEL_SPANS_FILE"])
provider = TracerProvider()
if os.environ.get("OTEL_BATCH_SPANS"):
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
else:
    provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

tracer = trace.get_tracer("contrib_otel_app")


class SignupJob(cogworker.Job):
    """Opens a span of its own: it must be a child of the run's span."""

    name = "Contrib::Otel::Signup"

    def perform(self, email: str) -> None:
        with tracer.start_as_current_span("send welcome mail") as span:
            span.set_attribute("mail.to", email)


class DeclinedJob(cogworker.Job):
    """Always fails (its retry entry waits for the default backoff, 16 s or more)."""

    name = "Contrib::Otel::Declined"

    def perform(self, card: str) -> None:
        raise ValueError(f"card {card} declined")
