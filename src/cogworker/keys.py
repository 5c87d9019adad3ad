"""Every Redis key name cogworker reads or writes, in one place.

The names are the Ruby gem's, byte for byte, so a Ruby and a Python process can share one
Redis. There is no configurable namespace. Two families carry no ``cogworker:`` prefix:
``status:<jid>`` and everything under ``periodic:``. Identities contain ``:``, so a key is
never split on ``:``; callers strip a known prefix instead.
"""

from __future__ import annotations

QUEUE_PREFIX = "cogworker:queue:"
QUEUES = "cogworker:queues"
PAUSED_QUEUES = "cogworker:paused_queues"
LIVE_QUEUES = "cogworker:live_queues"
SCHEDULE = "cogworker:schedule"
RETRY = "cogworker:retry"
DEAD = "cogworker:dead"

INPROGRESS_PREFIX = "cogworker:inprogress:"
INPROGRESS_IDENTITIES = "cogworker:inprogress_identities"
LAST_BEAT = "cogworker:last_beat"
ORPHANINGS_PREFIX = "cogworker:orphanings:"
REPEAT_ORPHANS = "cogworker:repeat_orphans"
UNSETTLED = "cogworker:unsettled"
UNSETTLED_QUARANTINE = "cogworker:quarantine:cogworker:unsettled:records"

PROCESSES = "cogworker:processes"
PROCESS_PREFIX = "cogworker:process:"
WORKERS_PREFIX = "cogworker:workers:"
SIGNAL_PREFIX = "cogworker:signal:"

STATS_PROCESSED = "cogworker:stats:processed"
STATS_FAILED = "cogworker:stats:failed"
THROUGHPUT_PREFIX = "cogworker:throughput:"
JOB_ATTEMPTS_PREFIX = "cogworker:job_attempts:"
HISTORY_ALL = "cogworker:history:all"
HISTORY_SUCCESS = "cogworker:history:success"
HISTORY_FAILED = "cogworker:history:failed"
HISTORY_DAILY_PREFIX = "cogworker:history:daily:"
# the history index: Python-side only (a Ruby process neither writes nor trims it)
HISTORY_INDEX_TIME = "cogworker:history:index:time"
HISTORY_INDEX_DURATION = "cogworker:history:index:duration"
HISTORY_INDEX_ROWS = "cogworker:history:index:rows"
HISTORY_INDEX_META = "cogworker:history:index:meta"
HISTORY_INDEX_VALUES_PREFIX = "cogworker:history:index:values:"
HISTORY_INDEX_BY_PREFIX = "cogworker:history:index:by:"
HISTORY_INDEX_SORT_PREFIX = "cogworker:history:index:sort:"
# per job class metrics: Python-side only, one hash per minute, per ten minutes and per hour
CLASS_METRICS_MINUTE_PREFIX = "cogworker:class_metrics:minute:"
CLASS_METRICS_TEN_MINUTES_PREFIX = "cogworker:class_metrics:ten_minutes:"
CLASS_METRICS_HOUR_PREFIX = "cogworker:class_metrics:hour:"
STATUS_PREFIX = "status:"

UNIQUE_PREFIX = "cogworker:unique:"
PERIODIC_RUNNING_PREFIX = "periodic:running:"
PERIODIC_LAST_SLOT_PREFIX = "periodic:last_slot:"
PERIODIC_LOCK_PREFIX = "periodic:lock:"
PERIODIC_SCHEDULE = "periodic:schedule"
PERIODIC_DISABLED = "periodic:disabled"

QUARANTINE_PREFIX = "cogworker:quarantine:"
# Python-side extra (a Ruby process neither writes nor reads it): basic fetch's record that
# one fetched attempt of a job was filed into retry or dead
FILED_ATTEMPT_PREFIX = "cogworker:filed:"


def queue(name: str) -> str:
    """The list holding the jobs waiting on queue ``name``."""
    return QUEUE_PREFIX + name


def queue_name(key: str) -> str:
    """The queue name of a ``cogworker:queue:<name>`` key."""
    return key[len(QUEUE_PREFIX) :] if key.startswith(QUEUE_PREFIX) else key


def inprogress(identity: str) -> str:
    """A reliable-fetch process's list of jobs it has taken and not yet settled."""
    return INPROGRESS_PREFIX + identity


def orphanings(jid: str) -> str:
    """How many times the job ``jid`` was recovered from a dead process."""
    return ORPHANINGS_PREFIX + jid


def process(identity: str) -> str:
    """A process's presence hash (``info``, ``busy``, ``quiet``), alive while it exists."""
    return PROCESS_PREFIX + identity


def workers(identity: str) -> str:
    """What each processor thread of a process is running right now."""
    return WORKERS_PREFIX + identity


def signal_channel(identity: str) -> str:
    """The pub/sub channel a process listens on for ``quiet``, ``resume`` and ``stop``."""
    return SIGNAL_PREFIX + identity


def throughput(hour: int) -> str:
    """Processed / failed counters of one hour (``floor(epoch / 3600)``), kept
    ``THROUGHPUT_TTL`` seconds."""
    return f"{THROUGHPUT_PREFIX}{hour}"


THROUGHPUT_TTL = 90_000  # 25 hours: the last full day of hourly counters is always there


def filed_attempt(jid: str, digest: str) -> str:
    """Basic fetch's marker that the attempt of job ``jid`` whose payload, as fetched, has
    ``digest`` was filed into retry or dead: a filing sent again finds it and writes nothing."""
    return f"{FILED_ATTEMPT_PREFIX}{jid}:{digest}"


def job_attempts(jid: str) -> str:
    return JOB_ATTEMPTS_PREFIX + jid


def history_daily(day: str) -> str:
    """Daily success / failure counters; ``day`` is a UTC ``YYYY-MM-DD``."""
    return HISTORY_DAILY_PREFIX + day


def history_index_values(column: str) -> str:
    """Every lowercased value of ``column`` (class, queue or status) the history index holds,
    in lexicographic order (all scores 0)."""
    return HISTORY_INDEX_VALUES_PREFIX + column


def history_index_by(column: str, value: str) -> str:
    """The refs of the runs whose ``column`` lowercased is ``value``, scored by finish time."""
    return f"{HISTORY_INDEX_BY_PREFIX}{column}:{value}"


def history_index_sort(column: str) -> str:
    """``<value> NUL <tie> NUL <ref>`` for every run (all scores 0): the runs in the order of
    a text column (class, queue, jid, status, args, error), newest first among equals."""
    return HISTORY_INDEX_SORT_PREFIX + column


def class_metrics_minute(minute: int) -> str:
    """Per job class counts and execution-time histograms of one minute
    (``floor(epoch / 60)``), kept ``CLASS_METRICS_MINUTE_TTL`` seconds."""
    return f"{CLASS_METRICS_MINUTE_PREFIX}{minute}"


def class_metrics_ten_minutes(block: int) -> str:
    """The same for ten minutes (``floor(epoch / 600)``), kept ``CLASS_METRICS_MINUTE_TTL``:
    the last hour's totals read 6 of these and at most 9 minutes, not 60 minutes."""
    return f"{CLASS_METRICS_TEN_MINUTES_PREFIX}{block}"


def class_metrics_hour(hour: int) -> str:
    """The same for one hour (``floor(epoch / 3600)``), kept ``CLASS_METRICS_HOUR_TTL``."""
    return f"{CLASS_METRICS_HOUR_PREFIX}{hour}"


CLASS_METRICS_MINUTE_TTL = 7_200  # two hours: the last full hour of minutes is always there
CLASS_METRICS_HOUR_TTL = 93_600  # 26 hours: the last full day of hours is always there


def status(jid: str) -> str:
    return STATUS_PREFIX + jid


def unique(digest: str) -> str:
    return UNIQUE_PREFIX + digest


def periodic_running(pjid: str) -> str:
    return PERIODIC_RUNNING_PREFIX + pjid


def periodic_last_slot(pjid: str) -> str:
    return PERIODIC_LAST_SLOT_PREFIX + pjid


def periodic_lock(pjid: str, slot: int) -> str:
    return f"{PERIODIC_LOCK_PREFIX}{pjid}:{slot}"


def quarantine(original: str, epoch_ms: int, suffix: str) -> str:
    """Where KeyGuard moves a key of the wrong type (``suffix`` is 8 hex characters)."""
    return f"{QUARANTINE_PREFIX}{original}:{epoch_ms}:{suffix}"
