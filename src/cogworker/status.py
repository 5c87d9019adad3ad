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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from cogworker import failure, keys, redis_errors, wire
from cogworker.config import Config, default_config
from cogworker.wire import Payload

if TYPE_CHECKING:
    from cogworker.job import Job

DEFAULT_EXPIRATION = 1800
STATES = ("queued", "working", "retrying", "complete", "failed")

_expirations: dict[int, int] = {}


def enable(config: Config, expiration: int = DEFAULT_EXPIRATION) -> None:
    """Record the status of every job pushed and run with ``config``."""
    _expirations[id(config)] = expiration
    config.client_middleware.add(StatusClientMiddleware, config, expiration)
    config.server_middleware.add(StatusServerMiddleware, config, expiration)


def _expiration(config: Config) -> int:
    return _expirations.get(id(config), DEFAULT_EXPIRATION)


def write(config: Config, jid: str, fields: dict[str, Any], expiration: int | None = None) -> None:
    """HSET the non-None fields (as strings) and refresh the TTL; best-effort."""
    values = {name: str(value) for name, value in fields.items() if value is not None}
    if not values:
        return
    key = keys.status(jid)
    try:
        pipe = config.redis().pipeline(transaction=False)
        pipe.hset(key, mapping=values)  # type: ignore[arg-type]
        pipe.expire(key, expiration or _expiration(config))
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


def get(jid: str, *, config: Config | None = None) -> dict[str, str] | None:
    """Every status field of the job, or None if it has no (unexpired) status."""
    found = (config or default_config()).redis().hgetall(keys.status(jid))
    return {str(k): str(v) for k, v in found.items()} or None


def status(jid: str, *, config: Config | None = None) -> str | None:
    """The job's state: queued, working, retrying, complete or failed; None if unknown."""
    value = (config or default_config()).redis().hget(keys.status(jid), "status")
    return str(value) if value is not None else None


def mark_failed(config: Config, job: Payload, error: BaseException) -> None:
    """Correct an existing status to failed (a hook ended the job after a middleware ran)."""
    jid = job.get("jid")
    try:
        exists = isinstance(jid, str) and config.redis().exists(keys.status(jid))
    except redis.RedisError as read_error:
        redis_errors.reporter.report("Status", read_error)
        return
    if exists:
        write(config, str(jid), _failure_fields(job, error, "failed"))


def _failure_fields(job: Payload, error: BaseException, state: str) -> dict[str, Any]:
    return {
        "status": state,
        "update_time": wire.now(),
        "class": job.get("class"),
        "queue": job.get("queue"),
        "error_class": failure.error_class_name(error),
        "error_message": failure.error_message(error),
    }


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
        write(
            self.config,
            str(job["jid"]),
            {"status": "queued", "update_time": wire.now(), "class": job_class, "queue": queue},
            self.expiration,
        )


class StatusServerMiddleware:
    def __init__(self, config: Config, expiration: int) -> None:
        self.config, self.expiration = config, expiration

    def __call__(
        self, worker: Job | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        jid = str(job.get("jid"))
        write(
            self.config,
            jid,
            {
                "status": "working",
                "update_time": wire.now(),
                "class": job.get("class"),
                "queue": queue,
            },
            self.expiration,
        )
        try:
            call_next()
        except BaseException as error:
            state = "failed" if failure.is_terminal(job) else "retrying"
            write(self.config, jid, _failure_fields(job, error, state), self.expiration)
            raise
        write(self.config, jid, {"status": "complete", "update_time": wire.now()}, self.expiration)
