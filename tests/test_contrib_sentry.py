"""cogworker.contrib.sentry: one event per failed run, with the job's tags and context.

The end-to-end tests run a real worker (``cogworker run -r tests/contrib_sentry_app.py``) whose
Sentry transport writes every event to a file; the others capture events in this process
with a client on a scope of their own (no ``sentry_sdk.init``: the process's global client
and integrations stay untouched for the rest of the suite).
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import sentry_sdk
from conftest import wait_for
from runtime_support import (
    ExplodingMiddleware,
    Worker,
    cogworker_env,
    started_workers,
    zset_entries,
)
from sentry_sdk.consts import DEFAULT_OPTIONS
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import cogworker
from cogworker import keys, testing
from cogworker.api.sets import retry_set
from cogworker.contrib import sentry as cogworker_sentry
from cogworker.execute import execute

APP = Path(__file__).resolve().parent / "contrib_sentry_app.py"
CHARGE = "Contrib::Sentry::Charge"
WORKER_CONFIG = "poll_interval: 0.2\nconcurrency: 2\n"

# Sentry's rule for job data, as the installed SDK has it (the suite runs on 2.x and 3.x alike):
# sentry-sdk 3 has no send_default_pii and collects job data unless data_collection says
# queues=False; 2.x before data_collection follows send_default_pii (False by default); late 2.x
# follows data_collection's queues when the user gave data_collection, else send_default_pii.
SENTRY_MAJOR = int(sentry_sdk.VERSION.split(".")[0])
SDK_OPTIONS = frozenset(DEFAULT_OPTIONS)
HAS_DATA_COLLECTION = "data_collection" in SDK_OPTIONS
HAS_SEND_DEFAULT_PII = "send_default_pii" in SDK_OPTIONS
JOB_DATA_BY_DEFAULT = SENTRY_MAJOR >= 3
JOB_DATA_ON: dict[str, Any] = (
    {"data_collection": {"queues": True}} if HAS_DATA_COLLECTION else {"send_default_pii": True}
)
"""Client options under which the installed SDK collects job data."""


# -- a real worker ------------------------------------------------------------------------------


@dataclass
class SentryWorker:
    process: Worker
    events_file: Path

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_file)


@pytest.fixture
def start_worker(tmp_path: Path, r: redis.Redis, redis_url: str) -> Iterator[Any]:
    """Starts a worker with the given options (see tests/contrib_sentry_app.py)."""
    (tmp_path / "worker.yml").write_text(WORKER_CONFIG)
    with started_workers(tmp_path) as workers:

        def start(**options: Any) -> SentryWorker:
            events = tmp_path / f"events-{len(workers.started)}.jsonl"
            env = cogworker_env(
                redis_url,
                SENTRY_EVENTS_FILE=str(events),
                CONTRIB_SENTRY_OPTIONS=json.dumps(options),
            )
            return SentryWorker(
                workers.start(["run", "-r", str(APP), "-C", "worker.yml"], env), events
            )

        yield start


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events written so far; a last line without its newline is still being written."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [json.loads(line) for line in lines]


def of_job(events: list[dict[str, Any]], jid: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("tags", {}).get("cogworker.jid") == jid]


def dead_jids(r: redis.Redis) -> set[str]:
    return {entry["jid"] for entry, _ in zset_entries(r, keys.DEAD)}


def push(client: cogworker.Client, job_class: str, *args: Any, retry: int = 1) -> str:
    jid = client.push({"class": job_class, "args": list(args), "retry": retry})
    assert jid is not None
    return jid


def exception_of(event: dict[str, Any]) -> dict[str, Any]:
    (exception,) = event["exception"]["values"]
    assert isinstance(exception, dict)
    return exception


def test_every_failure_is_one_event_saying_whether_the_job_will_be_retried(
    start_worker: Any, config: cogworker.Config, r: redis.Redis
) -> None:
    worker = start_worker()
    client = cogworker.Client(config)
    thanks = push(client, "Contrib::Sentry::Thanks")
    declined = push(client, CHARGE, "4242424242424242", 10)
    stolen = push(client, CHARGE, "stolen", 20, retry=5)
    wait_for(lambda: {declined, stolen} <= dead_jids(r), timeout=20)
    wait_for(lambda: r.get(keys.STATS_PROCESSED) == "1")  # the one success
    events = worker.events()

    assert of_job(events, thanks) == []
    first, last = of_job(events, declined)  # retried once (retry_in: at once), then dead
    assert first["tags"] == {
        "cogworker.job_class": CHARGE,
        "cogworker.queue": "default",
        "cogworker.jid": declined,
        "cogworker.will_retry": "true",
    }
    assert first["contexts"]["cogworker"] == {
        "class": CHARGE,
        "jid": declined,
        "queue": "default",
        # by default sentry-sdk 3 collects job data, 2.x does not
        "args": ["4242424242424242", 10] if JOB_DATA_BY_DEFAULT else "[Filtered]",
        "retry": 1,
        "retry_count": 0,
        "will_retry": True,
    }
    assert first["transaction"] == CHARGE
    exception = exception_of(first)
    assert (exception["type"], exception["value"]) == ("ValueError", "card declined for 10")
    mechanism = exception["mechanism"]  # sentry-sdk 3 adds its exception_id
    assert (mechanism["type"], mechanism["handled"]) == ("cogworker", False)
    assert exception["stacktrace"]["frames"][-1]["function"] == "perform"
    assert last["tags"]["cogworker.will_retry"] == "false"
    assert (
        last["contexts"]["cogworker"]["retry_count"],
        last["contexts"]["cogworker"]["will_retry"],
    ) == (1, False)

    # killed by its retry_in on the first failure, with 5 retries left: reported as final
    (killed,) = of_job(events, stolen)
    assert killed["contexts"]["cogworker"]["will_retry"] is False
    assert killed["contexts"]["cogworker"]["retry_count"] == 0
    assert len(events) == 3  # nothing else: no second event from the worker's own log lines


def test_report_after_retries_sends_only_the_final_failure_with_scrubbed_args(
    start_worker: Any, config: cogworker.Config, r: redis.Redis
) -> None:
    worker = start_worker(sentry=JOB_DATA_ON, report_after_retries=True, scrub=True)
    jid = push(cogworker.Client(config), CHARGE, "4242424242424242", 10)
    wait_for(lambda: jid in dead_jids(r), timeout=20)
    ((entry, _),) = zset_entries(r, keys.DEAD)
    assert entry["retry_count"] == 2  # it did fail twice

    (event,) = worker.events()
    assert event["contexts"]["cogworker"]["args"] == ["...4242", 10]
    assert event["contexts"]["cogworker"]["retry_count"] == 1
    assert event["tags"]["cogworker.will_retry"] == "false"


@pytest.mark.parametrize(("report_after_retries", "sent"), [(True, 0), (False, 1)])
def test_a_failure_whose_retry_then_succeeds_is_reported_only_by_default(
    start_worker: Any,
    config: cogworker.Config,
    r: redis.Redis,
    report_after_retries: bool,
    sent: int,
) -> None:
    worker = start_worker(report_after_retries=report_after_retries)
    jid = push(cogworker.Client(config), "Contrib::Sentry::Flaky", "test:flaky", retry=3)
    ((entry, _),) = wait_for(lambda: zset_entries(r, keys.RETRY))  # the first run failed
    assert (entry["jid"], entry["error_class"]) == (jid, "ConnectionError")
    (raw,) = r.zrange(keys.RETRY, 0, -1)
    retry_set(r).retry_now(raw)  # not the backoff's 15 s or more
    wait_for(lambda: r.get(keys.STATS_PROCESSED) == "1")
    assert r.get("test:flaky") == "2"  # ran twice: failed, then succeeded
    assert worker.process.stop() == 0  # anything still queued is flushed at the stop
    events = worker.events()
    assert len(of_job(events, jid)) == sent == len(events)
    if sent:
        assert events[0]["tags"]["cogworker.will_retry"] == "true"


def test_events_held_by_the_transport_are_flushed_when_the_worker_stops(
    start_worker: Any, config: cogworker.Config, r: redis.Redis
) -> None:
    worker = start_worker(held=True)  # a transport that sends only what it's flushed
    stolen = push(cogworker.Client(config), CHARGE, "stolen", 20)
    wait_for(lambda: stolen in dead_jids(r))
    assert worker.events() == []  # reported, but held
    assert worker.process.stop() == 0
    (event,) = worker.events()
    assert event["tags"]["cogworker.jid"] == stolen
    assert "shutdown handler" not in worker.process.output()


# -- in this process ----------------------------------------------------------------------------


class ListTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(dict(event))


def capturing_client(**client_options: Any) -> tuple[sentry_sdk.Client, list[dict[str, Any]]]:
    """A client with no integrations, and the list its events go to."""
    transport = ListTransport()
    client = sentry_sdk.Client(
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
        **client_options,
    )
    return client, transport.events


@contextlib.contextmanager
def on_own_scope(client: sentry_sdk.Client) -> Iterator[None]:
    with sentry_sdk.isolation_scope() as scope:
        scope.set_client(client)
        yield
    client.close()


@contextlib.contextmanager
def captured(**client_options: Any) -> Iterator[list[dict[str, Any]]]:
    """Events sent in the block, by a client set on a scope of its own."""
    client, events = capturing_client(**client_options)
    with on_own_scope(client):
        yield events


class Refused(cogworker.Job):
    name = "ContribSentry::Refused"

    def perform(self, email: str) -> None:
        sentry_sdk.capture_message("about to refuse")
        raise PermissionError(f"{email} may not")


def test_inline_run_reports_a_final_failure_with_args_when_queue_data_is_collected(
    config: cogworker.Config,
) -> None:
    cogworker_sentry.instrument(config)
    with captured(**JOB_DATA_ON) as events, testing.inline():
        with pytest.raises(PermissionError):
            cogworker.Client(config).push({"class": Refused.name, "args": ["ada@example.com"]})
        sentry_sdk.capture_message("after the job")
    message, failure, after = events
    # the job's own event carries its tags too; nothing of the job is left after it
    assert message["tags"]["cogworker.job_class"] == Refused.name
    assert "cogworker.will_retry" not in message["tags"]
    assert failure["contexts"]["cogworker"]["args"] == ["ada@example.com"]
    assert failure["contexts"]["cogworker"]["will_retry"] is False  # inline retries nothing
    assert "tags" not in after or "cogworker.jid" not in after["tags"]
    assert "cogworker" not in after.get("contexts", {})


def job_payload(retry_count: int | None) -> dict[str, Any]:
    job: dict[str, Any] = {"class": Refused.name, "jid": "b" * 24, "args": ["x"], "retry": 2}
    if retry_count is not None:
        job["retry_count"] = retry_count
    return job


def test_report_after_retries_skips_a_failure_the_retry_budget_will_retry(
    config: cogworker.Config,
) -> None:
    cogworker_sentry.instrument(config, report_after_retries=True)
    with captured() as events:
        for retry_count in (None, 1, 2):  # the third failure exhausts retry: 2
            with pytest.raises(PermissionError):
                execute(config.server_middleware, job_payload(retry_count), "default")
    failures = [event for event in events if "exception" in event]
    assert [event["contexts"]["cogworker"]["retry_count"] for event in failures] == [2]


def test_a_scrubber_that_raises_sends_no_args(
    config: cogworker.Config, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(args: list[Any]) -> list[Any]:
        raise RuntimeError("oops")

    cogworker_sentry.instrument(config, send_args=True, scrub_args=broken)
    logs = caplog.at_level(logging.ERROR, "cogworker.contrib.sentry")
    with captured() as events, logs, pytest.raises(PermissionError):
        execute(config.server_middleware, job_payload(2), "default")
    failure = next(event for event in events if "exception" in event)
    assert failure["contexts"]["cogworker"]["args"] == "[Filtered]"
    assert f"jid={'b' * 24}: scrub_args raised RuntimeError: oops" in caplog.text


def sentry_rule_cases() -> list[Any]:
    """(client options, whether the installed SDK's rule sends job args), as it applies."""
    cases = [pytest.param({}, JOB_DATA_BY_DEFAULT, id="default")]
    if HAS_SEND_DEFAULT_PII:
        cases.append(pytest.param({"send_default_pii": True}, True, id="send_default_pii"))
    if HAS_DATA_COLLECTION:
        cases += [
            pytest.param({"data_collection": {"queues": True}}, True, id="queues"),
            pytest.param({"data_collection": {"queues": False}}, False, id="no-queues"),
            pytest.param({"data_collection": {}}, True, id="queues-by-default"),
        ]
    if HAS_SEND_DEFAULT_PII and HAS_DATA_COLLECTION:  # the user's data_collection wins
        pii_but_no_queues = {"send_default_pii": True, "data_collection": {"queues": False}}
        cases.append(pytest.param(pii_but_no_queues, False, id="queues-beat-send_default_pii"))
    return cases


def args_sent(config: cogworker.Config, **client_options: Any) -> Any:
    """The args of the failure's event sent by a client with ``client_options``."""
    with warnings.catch_warnings():  # late 2.x deprecates send_default_pii; others don't
        warnings.simplefilter("ignore", DeprecationWarning)
        client, events = capturing_client(**client_options)
    with on_own_scope(client), pytest.raises(PermissionError):
        execute(config.server_middleware, job_payload(2), "default")
    reported = next(event for event in events if "exception" in event)
    return reported["contexts"]["cogworker"]["args"]


@pytest.mark.parametrize(("client_options", "sent"), sentry_rule_cases())
def test_args_follow_sentrys_rule_for_job_data(
    config: cogworker.Config, client_options: dict[str, Any], sent: bool
) -> None:
    cogworker_sentry.instrument(config)
    assert args_sent(config, **client_options) == (["x"] if sent else "[Filtered]")


def test_send_args_overrides_sentrys_rule_for_job_data(config: cogworker.Config) -> None:
    job_data_off = {"data_collection": {"queues": False}} if HAS_DATA_COLLECTION else {}
    cogworker_sentry.instrument(config, send_args=False)
    assert args_sent(config, **JOB_DATA_ON) == "[Filtered]"
    cogworker_sentry.instrument(config, send_args=True)
    assert args_sent(config, **job_data_off) == ["x"]


def test_the_installed_sdk_is_one_the_rule_cases_describe() -> None:
    # 2.x always has send_default_pii (late 2.x data_collection too); 3.x only data_collection
    assert HAS_SEND_DEFAULT_PII is (SENTRY_MAJOR == 2)
    assert HAS_DATA_COLLECTION or SENTRY_MAJOR == 2


def test_instrument_refuses_options_it_cannot_honour(config: cogworker.Config) -> None:
    with pytest.raises(ValueError, match="scrub_args would never run: send_args=False"):
        cogworker_sentry.instrument(config, send_args=False, scrub_args=list)
    with pytest.raises(TypeError, match="send_args must be True, False or None, got 'yes'"):
        cogworker_sentry.instrument(config, send_args="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scrub_args must be a callable"):
        cogworker_sentry.instrument(config, scrub_args=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="report_after_retries must be a bool"):
        cogworker_sentry.instrument(config, report_after_retries=1)  # type: ignore[arg-type]
    assert cogworker_sentry.SentryServerMiddleware not in config.server_middleware


def test_instrument_wraps_the_middleware_prepended_before_it_not_after(
    config: cogworker.Config,
) -> None:
    config.server_middleware.prepend(ExplodingMiddleware)
    cogworker_sentry.instrument(config)  # first now: outside the exploding one
    with captured() as events, pytest.raises(LookupError):
        execute(config.server_middleware, job_payload(2), "default")
    assert [exception_of(event)["type"] for event in events] == ["LookupError"]

    config.server_middleware.prepend(ExplodingMiddleware)  # now first, outside Sentry's
    with captured() as events, pytest.raises(LookupError):
        execute(config.server_middleware, job_payload(2), "default")
    assert events == []


class FlushRecorder(ListTransport):
    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[float] = []

    def flush(self, timeout: float, callback: Any = None) -> None:
        self.flushes.append(timeout)


def test_instrument_adds_one_flush_bounded_by_the_clients_shutdown_timeout(
    config: cogworker.Config,
) -> None:
    cogworker_sentry.instrument(config)
    cogworker_sentry.instrument(config, report_after_retries=True)  # replaces, adds no second
    (flush,) = config.shutdown_handlers
    transport = FlushRecorder()
    client = sentry_sdk.Client(
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
        shutdown_timeout=0.5,
    )
    with on_own_scope(client):
        flush()
    assert transport.flushes[0] == 0.5  # (closing the client flushes again)


def test_reading_events_leaves_out_a_line_still_being_written(tmp_path: Path) -> None:
    events_file = tmp_path / "events.jsonl"
    events_file.write_text('{"event_id": "a"}\n{"event_id": "b", "tags": {"cog')
    assert read_events(events_file) == [{"event_id": "a"}]
