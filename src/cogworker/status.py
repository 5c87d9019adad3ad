"""Job status (optional): where each job is, its progress, and fields it stores.

    cogworker.status.enable(config, expiration=1800)      # adds both middleware

    class ImportJob(cogworker.Job):
        def perform(self, path: str) -> None:
            for done, total in import_rows(path):
                cogworker.status.at(self.jid, done * 100 // total, f"{done} rows")
            cogworker.status.store(self.jid, rows=total)

    cogworker.status.status(jid)   # "queued", "working", "retrying", "complete", "failed"
    cogworker.status.get(jid)      # every field, as strings

A job's status lives in ``status:<jid>`` (a hash, every value a string) for ``expiration``
seconds after its last update. Writes are best-effort: they never change a job's fate.

Each run of a job starts clean: its ``working`` write removes the progress and error fields
an earlier attempt left (``ATTEMPT_FIELDS``), so a job that failed once and then succeeded
shows no error. Fields the job stored itself with ``store`` are its own data and stay.

Only a push's ``queued`` write is sent at once (the push has just reached Redis, and the
pusher may read it back). What is written while a job runs (its states, ``at``, ``store``,
``mark_failed``, its run history) goes through the config's background writer
(``status_writer``), a thread sending the writes in order, so a job never waits for them nor
for a Redis that doesn't answer. ``flush(config)`` waits for them and a stopping worker calls
``close(config)`` (both from ``status_writer``). In a testing mode statuses live in
``testing.memory`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis

from cogworker import failure, keys, redis_errors, testing, wire
from cogworker.config import Config, default_config
from cogworker.middleware import JobInstance
from cogworker.status_writer import Writer as Writer
from cogworker.status_writer import close as close
from cogworker.status_writer import flush as flush
from cogworker.status_writer import writer as writer
from cogworker.wire import Payload

if TYPE_CHECKING:
    from redis.client import Pipeline

logger = logging.getLogger("cogworker")

DEFAULT_EXPIRATION = 1800
STATES = ("queued", "working", "retrying", "complete", "failed")
ATTEMPT_FIELDS = ("pct", "message", "error_class", "error_message")
"""Written by one run (progress, its error); removed when the next run starts."""

def enable(config: Config, expiration: int = DEFAULT_EXPIRATION) -> None:
    """Record the status of every job pushed and run with ``config``."""
    if isinstance(expiration, bool) or not isinstance(expiration, int) or expiration < 1:
        raise ValueError(
            f"status expiration must be a positive whole number of seconds, got {expiration!r}"
        )
    config.client_middleware.add(StatusClientMiddleware, config, expiration)
    config.server_middleware.add(StatusServerMiddleware, config, expiration)


def _expiration(config: Config) -> int:
    """The expiration ``enable`` gave ``config`` (kept with its middleware), else the default."""
    arguments = config.server_middleware.arguments(StatusServerMiddleware)
    return int(arguments[1]) if arguments is not None else DEFAULT_EXPIRATION


# -- writing -----------------------------------------------------------------------------------


def _strings(fields: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in fields.items() if value is not None}


def _queue_save(
    pipe: Pipeline, jid: str, values: dict[str, str], expiration: int, clear: Iterable[str]
) -> None:
    key, removed = keys.status(jid), tuple(clear)
    if removed:
        pipe.hdel(key, *removed)
    if values:
        pipe.hset(key, mapping=values)  # type: ignore[arg-type]
    pipe.expire(key, expiration)


def write(
    config: Config,
    jid: str,
    fields: dict[str, Any],
    expiration: int | None = None,
    *,
    clear: Iterable[str] = (),
) -> None:
    """Remove the ``clear`` fields, HSET the non-None ``fields`` (as strings) and refresh the
    TTL; best-effort, sent in the background (see ``Writer``)."""
    values, removed = _strings(fields), tuple(clear)
    if not values and not removed:
        return
    ttl = expiration or _expiration(config)
    if testing.active():
        testing.memory.save_status(jid, values, ttl, removed)
        return
    writer(config).submit(
        "Status", jid, config.redis(), lambda pipe: _queue_save(pipe, jid, values, ttl, removed)
    )


def _write_now(config: Config, jid: str, fields: dict[str, Any], expiration: int) -> None:
    """``write``, sent before returning: for the push's own ``queued`` write."""
    values = _strings(fields)
    if testing.active():
        testing.memory.save_status(jid, values, expiration)
        return
    try:
        pipe = config.redis().pipeline(transaction=False)
        _queue_save(pipe, jid, values, expiration, ())
        pipe.execute()
    except redis.RedisError as error:
        redis_errors.reporter.report("Status", error)


def at(jid: str, pct: int, message: str | None = None, *, config: Config | None = None) -> None:
    """Report progress of a running job: ``pct`` percent done, with an optional message."""
    write(
        config or default_config(),
        jid,
        {"status": "working", "update_time": wire.now(), "pct": pct, "message": message},
    )


def store(jid: str, *, config: Config | None = None, **fields: Any) -> None:
    """Store custom fields on a job's status (read back as strings by ``get``)."""
    write(config or default_config(), jid, fields)


def mark_failed(config: Config, job: Payload, error: BaseException) -> None:
    """Correct a job's status to failed (a hook ended the job after the status middleware
    wrote ``retrying``; sent after that write). A no-op where that middleware isn't used."""
    jid = job.get("jid")
    if not isinstance(jid, str) or StatusServerMiddleware not in config.server_middleware:
        return
    write(config, jid, _failure_fields(job, error, "failed"))


def _failure_fields(job: Payload, error: BaseException, state: str) -> dict[str, Any]:
    return {
        "status": state,
        "update_time": wire.now(),
        "class": job.get("class"),
        "queue": job.get("queue"),
        "error_class": failure.error_class_name(error),
        "error_message": failure.error_message(error),
    }


# -- reading -----------------------------------------------------------------------------------


def _caught_up(config: Config | None) -> redis.Redis:
    """The config's client, once this process's writes queued with it are sent (waiting up to
    the socket timeout, as the read itself would): a process reads what it wrote."""
    config = config or default_config()
    flush(config, config.redis_socket_timeout)
    return config.redis()


def get(jid: str, *, config: Config | None = None) -> dict[str, str] | None:
    """Every status field of the job, or None if it has no (unexpired) status."""
    if testing.active():
        return testing.memory.status(jid)
    found = _caught_up(config).hgetall(keys.status(jid))
    return {str(k): str(v) for k, v in found.items()} or None


def status(jid: str, *, config: Config | None = None) -> str | None:
    """The job's state: queued, working, retrying, complete or failed; None if unknown."""
    if testing.active():
        return (testing.memory.status(jid) or {}).get("status")
    value = _caught_up(config).hget(keys.status(jid), "status")
    return str(value) if value is not None else None


# -- middleware ----------------------------------------------------------------------------------


class StatusClientMiddleware:
    def __init__(self, config: Config, expiration: int) -> None:
        self.config, self.expiration = config, expiration

    def __call__(
        self,
        job_class: str,
        job: Payload,
        queue: str,
        redis: redis.Redis,
        call_next: Callable[[], None],
    ) -> None:
        call_next()
        if testing.current_mode() is testing.Mode.INLINE:
            return  # the push ran the job: "queued" would overwrite how it ended
        _write_now(
            self.config,
            str(job["jid"]),
            {"status": "queued", "update_time": wire.now(), "class": job_class, "queue": queue},
            self.expiration,
        )


class StatusServerMiddleware:
    def __init__(self, config: Config, expiration: int) -> None:
        self.config, self.expiration = config, expiration

    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        jid = str(job.get("jid"))
        started = {
            "status": "working",
            "update_time": wire.now(),
            "class": job.get("class"),
            "queue": queue,
        }
        write(self.config, jid, started, self.expiration, clear=ATTEMPT_FIELDS)
        try:
            call_next()
        except BaseException as error:
            state = "failed" if failure.is_terminal(job) else "retrying"
            write(self.config, jid, _failure_fields(job, error, state), self.expiration)
            raise
        write(self.config, jid, {"status": "complete", "update_time": wire.now()}, self.expiration)
