"""The checker of bench/chaos.py: reads what a chaos run left in its work directory and judges it.

    .venv/bin/python bench/chaos_check.py WORKDIR     (re-check a run kept with --keep or failed)

It trusts only what the driver and the jobs wrote outside the Redis under test:

* ``pushes.log``     every push: ``I`` before it is sent, then ``C`` (confirmed), ``D`` (a unique
                     job's duplicate, refused) or ``U`` (raised: unknown outcome, never re-sent)
* ``exec-<pid>.log`` every execution's start and end, fsynced per line (see chaos_jobs.py)
* ``procs.json``     every worker process: when it started, how it ended (kill -9, TERM, ...)
* ``faults.json``    every fault injected, with its time span
* ``snapshot-*.json`` what was left in Redis once drained, and after the workers stopped
* ``worker-*.log``   the workers' own warnings, read only as evidence for a cause

A job that completed more than once must be explained by a cause of the first completion(s): in
flight at a kill (completed shortly before its process was killed, before its ack went out), a
Redis restart or a lost reply right after it completed, handed back at the shutdown deadline, or
a false "dead" verdict on its live process. Anything else is reported as unexplained and fails
the run, as does a lost job, anything left over, a dead set other than the jobs written to fail,
a crashed or stuck worker, or a recovery slower than the bound.

Cron entries: every slot whose whole window (from its fire time to the next) had a live,
ticking worker and a reachable Redis must have fired exactly once; an ``until_executed`` entry
may skip a slot while its previous run still holds the entry. No two runs of an
``until_executed`` entry, or of one unique job, may overlap. A slot lost or doubled, or an
overlap, passes only with a named cause (Redis unreachable during the window, a push whose reply
was lost, a false dead verdict, the claiming worker killed between claim and push).
"""

from __future__ import annotations

import calendar
import json
import math
import re
import sys
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACK_WINDOW = 1.0  # an ack leaves within ~1 ms; a completion this close to a kill was unacked
SWARM_RECOVERY = 3.0  # a reaped child's jobs are requeued within a supervisor round (0.2 s)
CRON_CLASS = "CronJob"
TICKER_READY = 6.0  # a started worker ticks within this (boot, first beat, first orphan check)
TICK_BACKOFF = 5.0  # a tick that failed looks at the entry again this much later
CLAIM_FAULTS = ("pause", "redis_restart", "client_kill")  # and acl_deny of evalsha
RELEASE_SLACK = 1.0  # a lock is released right after the run's end record (one round trip)
REDIS_FAULTS = ("pause", "redis_restart", "client_kill", "acl_deny")
CONNECTION_FAULTS = ("client_kill", "redis_restart")
DETAIL_LINES = 25


# -- records -------------------------------------------------------------------------------


@dataclass
class Push:
    jid: str
    cls: str
    kind: str
    queue: str
    delay: float
    t: float
    key: str = "-"  # which unique job (same key, same digest); "-" for the others
    outcome: str = "pending"  # confirmed | refused | unknown | pending (driver died mid-push)
    error: str = ""


@dataclass
class Execution:
    pid: int
    seq: int
    jid: str
    cls: str
    kind: str
    rc: int
    ic: int
    start: float
    slot: int | None = None  # a cron run's slot
    end: float | None = None
    result: str | None = None

    @property
    def label(self) -> str:
        return f"pid {self.pid}#{self.seq}"


@dataclass
class Proc:
    pid: int
    slot: int
    gen: int
    log: str
    started: float
    ended: float | None
    how: str | None  # kill9 | term | final | crash | stuck | None (still running)
    term_at: float | None
    identity: str | None = None
    role: str = "worker"  # worker | supervisor | child (of a swarm supervisor)


@dataclass
class Fault:
    n: int
    kind: str
    t: float
    t_end: float
    detail: dict[str, Any]

    def overlaps(self, start: float, end: float) -> bool:
        return self.t <= end and self.t_end >= start

    def short(self, origin: float) -> str:
        extra = self.detail.get("cmd") or self.detail.get("mode") or ""
        name = f"{self.kind}{'(' + str(extra) + ')' if extra else ''}"
        return f"#{self.n} {name} at +{self.t - origin:.1f}s"


@dataclass
class LogEvent:
    t: float
    pid: int
    what: str  # recovered | handed_back | stray | unexpected
    identity: str = ""
    jid: str = ""
    count: int = 0
    line: str = ""


@dataclass
class Cause:
    kind: str
    evidence: str


def refuses_evalsha(fault: Fault) -> bool:
    """An ACL rule denying EVALSHA: every script call is refused while it lasts."""
    return fault.kind == "acl_deny" and fault.detail.get("cmd") == "evalsha"


def identity_pid(identity: str) -> int | None:
    """The pid inside a process identity ``<hostname>:<pid>:<12 hex>``."""
    parts = identity.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


@dataclass
class RunData:
    run: dict[str, Any]
    pushes: dict[str, Push]
    executions: list[Execution]
    procs: dict[int, Proc]
    faults: list[Fault]
    snapshots: dict[str, dict[str, Any]]
    log_events: list[LogEvent]
    malformed: int = 0


# -- loading -------------------------------------------------------------------------------


def load_pushes(path: Path) -> dict[str, Push]:
    pushes: dict[str, Push] = {}
    if not path.exists():
        return pushes
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3:
            continue
        tag, stamp, jid = parts[0], float(parts[1]), parts[2]
        if tag == "I" and len(parts) == 4:
            cls, kind, queue, delay, *key = parts[3].split(" ")
            pushes[jid] = Push(jid, cls, kind, queue, float(delay), stamp, *key[:1])
        elif tag == "C" and jid in pushes:
            pushes[jid].outcome = "confirmed"
        elif tag == "D" and jid in pushes:
            pushes[jid].outcome = "refused"
        elif tag == "U" and jid in pushes:
            pushes[jid].outcome = "unknown"
            pushes[jid].error = parts[3] if len(parts) == 4 else ""
    return pushes


def load_executions(directory: Path) -> tuple[list[Execution], int]:
    runs: dict[tuple[int, int], Execution] = {}
    malformed = 0
    for path in sorted(directory.glob("exec-*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split(" ")
            try:
                if parts[0] == "S" and len(parts) in (9, 10):
                    pid, seq = int(parts[3]), int(parts[4])
                    slot = parts[9] if len(parts) == 10 else "-"
                    runs[(pid, seq)] = Execution(
                        pid,
                        seq,
                        parts[2],
                        parts[5],
                        parts[6],
                        int(parts[7]),
                        int(parts[8]),
                        float(parts[1]),
                        None if slot == "-" else int(slot),
                    )
                elif parts[0] == "E" and len(parts) == 6:
                    execution = runs[(int(parts[3]), int(parts[4]))]
                    execution.end, execution.result = float(parts[1]), parts[5]
                else:
                    malformed += 1
            except (ValueError, KeyError):
                malformed += 1
    return sorted(runs.values(), key=lambda e: (e.start, e.pid, e.seq)), malformed


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) pid=(\d+) tid=(\S+) ([A-Z]+): (.*)$")
_RECOVERED = re.compile(r"requeued (\d+) job\(s\) left in progress by dead process (\S+)")
_REAPED = re.compile(r"swarm: requeued (\d+) job\(s\) left running by child pid=\d+ identity=(\S+);")  # noqa: E501
_STALLED = re.compile(r"Heartbeat: no beat for ([\d.]+)s")
_HANDED_BACK = re.compile(r"requeued (\d+) job\(s\) unfinished at shutdown")
_STRAY = re.compile(r"requeued stray in-progress job jid=(\S+)")
_UNEXPECTED = (
    "failed unexpectedly",
    "Exception in thread",
    "Traceback (most recent call last)",
    "Fatal Python error",
)


def _log_event(line: str, file_pid: int) -> LogEvent | None:
    match = _LOG_LINE.match(line)
    if match is None:
        if any(marker in line for marker in _UNEXPECTED):
            return LogEvent(0.0, file_pid, "unexpected", line=line.strip())
        return None
    stamp = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    pid, level, message = int(match.group(2)), match.group(4), match.group(5)
    if found := _RECOVERED.search(message) or _REAPED.search(message):
        return LogEvent(
            stamp, pid, "recovered", identity=found.group(2), count=int(found.group(1)), line=line
        )
    if found := _STALLED.search(message):
        stalled = math.ceil(float(found.group(1)))  # seconds without a beat, up to this line
        return LogEvent(stamp, pid, "stalled", count=stalled, line=line)
    if found := _HANDED_BACK.search(message):
        return LogEvent(stamp, pid, "handed_back", count=int(found.group(1)), line=line)
    if found := _STRAY.search(message):
        return LogEvent(stamp, pid, "stray", jid=found.group(1), line=line)
    processor_bug = message.startswith("Processor: ") and "Redis unavailable" not in message
    if level in ("ERROR", "CRITICAL") and (
        processor_bug or any(marker in message for marker in _UNEXPECTED)
    ):
        return LogEvent(stamp, pid, "unexpected", line=line)
    return None


def load_log_events(directory: Path, procs: dict[int, Proc]) -> list[LogEvent]:
    events: list[LogEvent] = []
    read: set[str] = set()
    for proc in procs.values():
        path = directory / proc.log
        if proc.log in read or not path.exists():
            continue  # a swarm's children write to their supervisor's log: read it once
        read.add(proc.log)
        in_record = False
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if in_record and line.startswith("    "):
                continue  # the traceback of a logged record: its first line is judged
            in_record = _LOG_LINE.match(line) is not None
            event = _log_event(line, proc.pid)
            if event is not None:
                if event.t == 0.0:
                    event.t = proc.ended or proc.started
                events.append(event)
    return events


def load(directory: Path) -> RunData:
    run = json.loads((directory / "run.json").read_text())
    procs = {int(p["pid"]): Proc(**p) for p in json.loads((directory / "procs.json").read_text())}
    faults = [Fault(**f) for f in json.loads((directory / "faults.json").read_text())]
    executions, malformed = load_executions(directory)
    snapshots = {}
    for name in ("drained", "stopped"):
        path = directory / f"snapshot-{name}.json"
        if path.exists():
            snapshots[name] = json.loads(path.read_text())
    return RunData(
        run=run,
        pushes=load_pushes(directory / "pushes.log"),
        executions=executions,
        procs=procs,
        faults=faults,
        snapshots=snapshots,
        log_events=load_log_events(directory, procs),
        malformed=malformed,
    )


# -- the verdict ---------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    value: str
    verdict: str = ""  # "OK", "FAIL" or "" (information)
    details: list[str] = field(default_factory=list)


@dataclass
class Report:
    title: str
    rows: list[Row]
    failures: list[str]
    lost: int

    @property
    def passed(self) -> bool:
        return not self.failures


class Checker:
    def __init__(self, data: RunData) -> None:
        self.data = data
        run = data.run
        self.origin = float(run["started_at"])
        cfg = run["config"]
        self.shutdown_timeout = float(cfg["shutdown_timeout"])
        self.orphan_threshold = float(cfg["orphan_threshold"])
        # a failed ack is retried by reconcile, which runs with the orphan check: every
        # orphan_check_interval, but only 5 s after a check that lost the connection
        check_every = max(
            float(cfg["orphan_check_interval"]), float(run.get("retry_after_lost_connection", 5))
        )
        self.settle_after = check_every + float(cfg["poll_interval"]) + 1.0
        self.socket_timeout = float(cfg.get("redis_socket_timeout", 5.0))
        self.presence_ttl = float(run["presence_ttl"])
        self.max_orphanings = int(cfg.get("max_orphanings", 3))
        self.beat = float(cfg["heartbeat_interval"])
        # a running cron lock's TTL (periodic/running_lock.py active_ttl)
        self.active_ttl = math.ceil(
            self.orphan_threshold
            + self.presence_ttl
            + max(float(cfg["orphan_check_interval"]), 60.0)
        )
        self.by_jid: dict[str, list[Execution]] = defaultdict(list)
        for execution in data.executions:
            self.by_jid[execution.jid].append(execution)
        self.recoveries = [e for e in data.log_events if e.what == "recovered"]
        self.handbacks = {e.pid for e in data.log_events if e.what == "handed_back"}
        self.failures: list[str] = []
        self.rows: list[Row] = []
        dead = data.snapshots.get("drained", {}).get("dead", [])
        self.dead_entries: list[dict[str, Any]] = [e for e in dead if isinstance(e, dict)]
        self.dead_by_jid: Counter[str] = Counter(str(e.get("jid")) for e in self.dead_entries)

    def at(self, t: float) -> str:
        return f"+{t - self.origin:.1f}s"

    def fail(self, row: Row, why: str) -> None:
        row.verdict = "FAIL"
        self.failures.append(f"{row.label}: {why}")

    # -- causes of a repeated completion ----------------------------------------------------

    def _delaying_faults(self, execution: Execution, start: float, end: float) -> list[Fault]:
        """Faults that can hold back the settling of ``execution`` during [start, end]."""
        found = []
        for fault in self.data.faults:
            if fault.kind not in REDIS_FAULTS or not fault.overlaps(start, end):
                continue
            if (
                fault.kind == "acl_deny"
                and execution.result == "ok"
                and fault.detail.get("cmd") not in ("lrem", "evalsha")
            ):
                continue  # an ack needs EVALSHA and LREM only
            found.append(fault)
        return sorted(found, key=lambda f: f.t)

    def _held_back(self, execution: Execution, until: float) -> list[Fault] | None:
        """The faults that kept the settling of ``execution`` from going through from its
        completion until ``until``, or None if there was a moment it would have gone through.

        The first attempts go out at once (a fault must be there within ACK_WINDOW); a failed
        one is retried with the orphan check, so after each fault there is ``settle_after``
        before the next chance.
        """
        assert execution.end is not None
        start = execution.end
        reach, used = start, []
        for fault in self._delaying_faults(execution, start - 0.05, until):
            if fault.t > reach + ACK_WINDOW:
                break
            if fault.t_end + self.settle_after > reach:
                reach = fault.t_end + self.settle_after
                used.append(fault)
        return used if used and reach >= until else None

    def _ended_unacked(self, execution: Execution, proc: Proc) -> Cause | None:
        """Its process ended (kill -9, or exit while Redis was faulty) before the ack."""
        assert execution.end is not None
        if proc.ended is None or proc.ended < execution.end:
            return None
        gap = proc.ended - execution.end
        killed = proc.how in ("kill9", "stuck")
        faults = self._held_back(execution, proc.ended)
        if faults:
            names = ", ".join(f.short(self.origin) for f in faults)
            return Cause(
                "in flight at a kill" if killed else "unacked at a stop",
                f"pid {proc.pid} {'killed -9' if killed else 'stopped (TERM)'} {gap:.3f}s after "
                f"it completed, its settling held back by {names}",
            )
        if killed and gap <= ACK_WINDOW:
            return Cause(
                "in flight at a kill",
                f"pid {proc.pid} killed -9 {gap:.3f}s after it completed, before its ack",
            )
        return None

    def _handed_back(self, execution: Execution, proc: Proc) -> Cause | None:
        assert execution.end is not None
        if proc.term_at is None or proc.pid not in self.handbacks:
            return None
        deadline = proc.term_at + self.shutdown_timeout
        ended = proc.ended if proc.ended is not None else float("inf")
        if execution.start < deadline and deadline - 0.25 <= execution.end <= ended + 0.5:
            return Cause(
                "handed back at the shutdown deadline",
                f"pid {proc.pid} got TERM at {self.at(proc.term_at)}; the job completed "
                f"{execution.end - proc.term_at:.2f}s later (deadline {self.shutdown_timeout:g}s),"
                " after it was requeued",
            )
        return None

    def _false_dead(self, execution: Execution, proc: Proc) -> Cause | None:
        end = execution.end if execution.end is not None else float("inf")
        for event in self.recoveries:
            if identity_pid(event.identity) != proc.pid:
                continue
            alive = proc.ended is None or event.t < proc.ended - 1.0
            if alive and execution.start <= event.t + 1.0 and end + ACK_WINDOW >= event.t - 1.0:
                return Cause(
                    "false dead verdict",
                    f"pid {event.pid} requeued the list of live pid {proc.pid} at "
                    f"{self.at(event.t)}",
                )
        return None

    def _redis_side(self, execution: Execution) -> Cause | None:
        assert execution.end is not None
        window = (execution.end - 0.05, execution.end + ACK_WINDOW)
        for fault in self.data.faults:
            lost_reply = fault.kind in CONNECTION_FAULTS or (
                fault.kind == "pause" and fault.t_end - fault.t >= self.socket_timeout
            )
            if not lost_reply or not fault.overlaps(*window):
                continue
            if fault.kind == "redis_restart":
                return Cause(
                    "Redis restart", f"{fault.short(self.origin)} right after it completed"
                )
            return Cause(
                "reply lost on a killed connection",
                f"{fault.short(self.origin)} right after it completed",
            )
        return None

    def cause(self, execution: Execution) -> Cause | None:
        """Why this completion may not have been recorded (so the job ran again), if any."""
        proc = self.data.procs.get(execution.pid)
        if proc is None or execution.end is None:
            return None
        for finder in (self._handed_back, self._ended_unacked, self._false_dead):
            found = finder(execution, proc)
            if found:
                return found
        return self._redis_side(execution)

    # -- checks -----------------------------------------------------------------------------

    def jobs_that_ran(self) -> set[str]:
        return set(self.by_jid)

    def check_pushes(self) -> None:
        pushes = self.data.pushes
        confirmed = [p for p in pushes.values() if p.outcome == "confirmed"]
        refused = [p for p in pushes.values() if p.outcome == "refused"]
        unknown = [p for p in pushes.values() if p.outcome not in ("confirmed", "refused")]
        ran = [p for p in unknown if p.jid in self.by_jid]
        kinds = Counter(p.kind for p in pushes.values())
        row = Row(
            "jobs pushed",
            f"{len(pushes)} (confirmed {len(confirmed)}, refused as duplicates {len(refused)}, "
            f"unknown outcome {len(unknown)}: {len(ran)} ran, {len(unknown) - len(ran)} never ran)",
        )
        row.details.append(
            "by kind: " + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
        )
        minimum = int(self.data.run.get("min_jobs", 0))
        if minimum:
            row.verdict = "OK"
            if len(confirmed) < minimum:
                self.fail(row, f"only {len(confirmed)} confirmed pushes (at least {minimum})")
        errors = Counter(p.error.split(":")[0] for p in unknown)
        if errors:
            row.details.append(
                "push errors: " + ", ".join(f"{name} {n}" for name, n in errors.most_common())
            )
        cron_jids = {e.jid for e in self.data.executions if e.cls == CRON_CLASS}
        strangers = sorted(set(self.by_jid) - set(pushes) - cron_jids)
        if strangers:
            self.fail(row, f"{len(strangers)} executed job(s) were never pushed: {strangers[:5]}")
        refused_ran = [p.jid for p in refused if p.jid in self.by_jid]
        if refused_ran:
            self.fail(row, f"{len(refused_ran)} refused duplicate(s) ran: {refused_ran[:5]}")
        self.rows.append(row)

    def check_executions(self) -> None:
        executions = self.data.executions
        ok = sum(1 for e in executions if e.result == "ok")
        failed = sum(1 for e in executions if e.result == "fail")
        cut = len(executions) - ok - failed
        row = Row(
            "completed executions",
            f"{ok + failed} (ok {ok}, failed on purpose {failed}); {cut} cut short by a "
            f"kill or shutdown",
        )
        if self.data.malformed:
            row.details.append(f"{self.data.malformed} malformed execution record(s) ignored")
        self.rows.append(row)

    def lost_jobs(self) -> list[Push]:
        lost = []
        for push in self.data.pushes.values():
            ran = push.jid in self.by_jid
            if push.outcome != "confirmed" and not ran:
                continue  # unknown outcome and never ran: not counted lost (tracked above)
            completed = push.cls != "FailingJob" and any(
                e.result == "ok" for e in self.by_jid.get(push.jid, [])
            )
            if not completed and self.dead_by_jid[push.jid] == 0:
                lost.append(push)
        return lost

    def check_lost(self) -> int:
        lost = self.lost_jobs()
        row = Row("jobs lost", str(len(lost)), "OK")
        if lost:
            self.fail(row, f"{len(lost)} confirmed job(s) never completed and not in dead")
            for push in lost[:DETAIL_LINES]:
                runs = self.by_jid.get(push.jid, [])
                row.details.append(
                    f"jid {push.jid} {push.cls}/{push.kind} pushed {self.at(push.t)} "
                    f"({push.outcome}); executions: "
                    + (", ".join(f"{e.label} {e.result or 'cut'}" for e in runs) or "none")
                )
        self.rows.append(row)
        return len(lost)

    def _repeats(self, jid: str) -> tuple[int, int, int, list[tuple[Execution, Cause | None]]]:
        """(completions, expected, allowed, each completion with its cause) of one job.

        A cause lets the job run once more; for a job written to fail, re-running a payload
        repeats the rest of its chain (a first failure brings its retry along).
        """
        push = self.data.pushes.get(jid)
        failing = push is not None and push.cls == "FailingJob"
        expected = 2 if failing else 1
        done = [e for e in self.by_jid[jid] if e.result is not None]
        allowed = expected
        explained = []
        for index, execution in enumerate(done):
            # the last completion needs no cause (nothing came after it), and once the
            # causes found account for every completion the rest need none either
            needed = index < len(done) - 1 and allowed < len(done)
            found = self.cause(execution) if needed else None
            if found is not None:
                allowed += (2 - min(execution.rc, 1)) if failing else 1
            explained.append((execution, found))
        return len(done), expected, allowed, explained

    def check_repeats(self) -> dict[str, int]:
        """Jobs completed more than once; returns how many extra runs each may have had."""
        row = Row("jobs completed more than once", "", "OK")
        extra: dict[str, int] = {}
        causes: Counter[str] = Counter()
        unexplained = 0
        for jid in self.by_jid:
            completions, expected, allowed, explained = self._repeats(jid)
            if completions <= expected:
                continue
            extra[jid] = allowed - expected
            push = self.data.pushes.get(jid)
            bad = completions > allowed
            unexplained += bad
            found = [(e, c) for e, c in explained if c is not None]
            causes.update(c.kind for _, c in found)
            head = f"jid {jid} {push.cls if push else '?'} x{completions} ({expected} expected)"
            if not bad:  # one line: the (first) cause
                execution, cause = found[0]
                more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
                row.details.append(
                    f"{head}: {execution.label} {execution.result} at "
                    f"{self.at(execution.end or 0.0)}, {cause.kind}: {cause.evidence}{more}"
                )
                continue
            row.details.append(f"{head} -- UNEXPLAINED; its executions:")
            for execution, cause in explained:
                text = f"{cause.kind}: {cause.evidence}" if cause else "no cause"
                row.details.append(
                    f"  {execution.label} {execution.result} at {self.at(execution.end or 0.0)}"
                    f" (started {self.at(execution.start)}): {text}"
                )
        row.value = f"{len(extra)} ({len(extra) - unexplained} explained, {unexplained} not)"
        if causes:
            row.value += "; causes: " + ", ".join(f"{k} {v}" for k, v in causes.most_common())
        if unexplained:
            self.fail(row, f"{unexplained} job(s) completed more than once without a cause")
        self.rows.append(row)
        return extra

    def check_leftovers(self) -> None:
        for name, label in (("drained", "left once drained"), ("stopped", "left after stop")):
            snap = self.data.snapshots.get(name)
            row = Row(label, "", "OK")
            if snap is None:
                row.value = "no snapshot (run did not get that far)"
                self.fail(row, "missing snapshot")
                self.rows.append(row)
                continue
            counts = {
                "queues": sum(snap["queues"].values()),
                "in progress": sum(snap["inprogress"].values()),
                "schedule": snap["schedule"],
                "retry": snap["retry"],
                "unsettled": snap["unsettled"],
                "repeat orphans": snap["repeat_orphans"],
            }
            row.value = ", ".join(f"{k} {v}" for k, v in counts.items())
            if any(counts.values()):
                self.fail(row, "jobs left over: " + row.value)
                for key, value in {**snap["queues"], **snap["inprogress"]}.items():
                    if value:
                        row.details.append(f"{key}: {value}")
            self.rows.append(row)

    def _recoveries_of(self, pid: int, since: float) -> list[float]:
        """When other processes requeued the in-progress list of ``pid``, from ``since`` on."""
        return [e.t for e in self.recoveries if identity_pid(e.identity) == pid and e.t >= since]

    def _list_recovered(self, proc: Proc) -> bool:
        """Whether another process requeued ``proc``'s in-progress list after it ended."""
        return proc.ended is not None and bool(self._recoveries_of(proc.pid, proc.ended - 1.0))

    def _orphaned_runs(self, jid: str) -> int:
        """Runs of ``jid`` that left the job in a dead process's list: its process was
        killed before the ack (still running, or the ack held back), or it stopped on TERM
        unable to settle (Redis faulty) and its list was recovered afterwards."""
        count = 0
        for execution in self.by_jid.get(jid, []):
            proc = self.data.procs.get(execution.pid)
            if proc is None:
                continue
            if proc.how not in ("kill9", "stuck") and not self._list_recovered(proc):
                continue
            if execution.end is None or self._ended_unacked(execution, proc) is not None:
                count += 1
        return count

    def check_dead(self, explained: dict[str, int]) -> None:
        failing_ran = {
            p.jid
            for p in self.data.pushes.values()
            if p.cls == "FailingJob" and p.jid in self.by_jid
        }
        entries = len(self.dead_entries)
        jobs = set(self.dead_by_jid)
        row = Row(
            "dead entries",
            f"{entries} entries for {len(jobs)} jobs; written to fail and ran: {len(failing_ran)}",
            "OK",
        )
        missing = failing_ran - jobs
        if missing:
            self.fail(row, f"{len(missing)} failing job(s) not in dead")
            row.details.extend(f"not in dead: {jid}" for jid in sorted(missing)[:DETAIL_LINES])
        for jid in sorted(jobs - failing_ran):
            entry = next(e for e in self.dead_entries if str(e.get("jid")) == jid)
            orphaned = self._orphaned_runs(jid)
            if (
                entry.get("error_class") == "Cogworker::ProcessDied"
                and orphaned > self.max_orphanings
            ):
                row.details.append(f"{jid}: ProcessDied after {orphaned} kills under it (design)")
                continue
            self.fail(row, f"job {jid} is in dead but was not written to fail")
            row.details.append(
                f"{jid}: {entry.get('class')} {entry.get('error_class')}: "
                f"{str(entry.get('error_message'))[:80]}"
            )
        doubled = 0
        for jid, count in self.dead_by_jid.items():
            if count > 1:
                if count - 1 <= explained.get(jid, 0):
                    doubled += 1
                else:
                    self.fail(row, f"job {jid} has {count} dead entries")
        if doubled:
            row.details.append(
                f"{doubled} job(s) with more than one dead entry, each explained by its repeats "
                "(listed above)"
            )
        self.rows.append(row)

    # -- cron entries ------------------------------------------------------------------------

    def _ticking(self) -> list[tuple[float, float]]:
        """When each worker could tick: from TICKER_READY after it started until its TERM
        (a quiet worker doesn't tick) or its end; sorted."""
        spans = []
        for proc in self.data.procs.values():
            begin = proc.started + TICKER_READY
            end = min(t for t in (proc.term_at, proc.ended, float("inf")) if t is not None)
            if end > begin:
                spans.append((begin, end))
        return sorted(spans)

    @staticmethod
    def _covered(spans: list[tuple[float, float]], start: float, end: float) -> bool:
        reach = start
        for begin, finish in spans:
            if begin > reach:
                break
            reach = max(reach, finish)
        return reach >= end

    def _claim_outage(self, start: float, end: float) -> Fault | None:
        """A fault that kept the claims of [start, end] from Redis (with the tick's back-off:
        5 s after Redis was unavailable, up to 15 s after refusals)."""
        for fault in self.data.faults:
            refused = refuses_evalsha(fault)
            if fault.kind not in CLAIM_FAULTS and not refused:
                continue
            backoff = TICK_BACKOFF * (3 if refused else 1) + 1.0
            if fault.t <= end and fault.t_end + backoff >= start:
                return fault
        return None

    def _lock_end(self, jid: str) -> float:
        """When the job ``jid`` released its lock at the latest: its last completion (a job
        that never completed may hold it to the end), or, when the release was held back by
        Redis faults until its process was killed (a deferred release dies with the process),
        when the lock expired: the active TTL after the last heartbeat that renewed it."""
        done = [e for e in self.by_jid.get(jid, []) if e.end is not None]
        if not done:
            return float("inf")
        last = max(done, key=lambda e: e.end or 0.0)
        assert last.end is not None
        proc = self.data.procs.get(last.pid)
        killed = proc is not None and proc.how in ("kill9", "stuck") and proc.ended is not None
        if killed and proc is not None and self._held_back(last, proc.ended or 0.0):
            return last.end + self.active_ttl
        return last.end

    def _lost_reply(self, start: float, end: float) -> Fault | None:
        for fault in self.data.faults:
            lost = fault.kind in CONNECTION_FAULTS or (
                fault.kind == "pause" and fault.t_end - fault.t >= self.socket_timeout
            )
            if lost and fault.overlaps(start, end):
                return fault
        return None

    def _cron_runs(self) -> dict[str, dict[int, set[str]]]:
        """entry name -> slot -> jids pushed for it (seen running, or in the dead set)."""
        fired: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        for execution in self.data.executions:
            if execution.cls == CRON_CLASS and execution.slot is not None:
                fired[execution.kind][execution.slot].add(execution.jid)
        for entry in self.dead_entries:
            args, slot = entry.get("args") or ["?"], entry.get("periodic_slot")
            if entry.get("class") == CRON_CLASS and isinstance(slot, int):
                fired[str(args[0])][slot].add(str(entry.get("jid")))
        return fired

    def check_periodic(self) -> set[str]:
        """Every judged slot fired once; returns the jids of doubled slots explained by a lost
        push reply (their runs may overlap)."""
        entries = self.data.run.get("periodic") or []
        row = Row("cron slots", "", "OK")
        doubled_jids: set[str] = set()
        if not entries:
            row.value = "no cron entries in this run"
            self.rows.append(row)
            return doubled_jids
        spans = self._ticking()
        until = self.data.run.get("periodic_disabled_at") or max(
            (f.t_end for f in self.data.faults), default=self.origin
        )
        fired = self._cron_runs()
        tally: Counter[str] = Counter()
        for entry in entries:
            name, period = entry["name"], int(entry["period"])
            slots = fired.get(name, {})
            first = int(self.origin) + period - int(self.origin) % period
            for slot in range(first, int(until) - period + 1, period):
                jids = slots.get(slot, set())
                window = (float(slot), float(slot + period))
                if len(jids) > 1:
                    # when the last of them started (a run only in the dead set: the end)
                    later = max(
                        min((e.start for e in self.by_jid.get(j, [])), default=until) for j in jids
                    )
                    fault = self._lost_reply(slot - 0.05, later)
                    if fault is None:
                        tally["doubled, unexplained"] += 1
                        self.fail(row, f"{name} slot {self.at(slot)} fired {len(jids)} times")
                        row.details.append(f"{name} slot {self.at(slot)}: jids {sorted(jids)}")
                    else:
                        tally["doubled: a push whose reply was lost"] += 1
                        doubled_jids |= jids
                        row.details.append(
                            f"{name} slot {self.at(slot)} fired twice: the push's reply was lost "
                            f"({fault.short(self.origin)}), the claim rolled back and won again"
                        )
                    continue
                if jids:
                    tally["fired once"] += 1
                    continue
                self._missed(row, entry, slot, window, spans, slots, tally)
        row.value = ", ".join(f"{k} {v}" for k, v in tally.items())
        self.rows.append(row)
        return doubled_jids

    def _missed(
        self,
        row: Row,
        entry: dict[str, Any],
        slot: int,
        window: tuple[float, float],
        spans: list[tuple[float, float]],
        slots: dict[int, set[str]],
        tally: Counter[str],
    ) -> None:
        name, period = entry["name"], int(entry["period"])
        if not self._covered(spans, *window):
            tally["not judged: no ticking worker all through its window"] += 1
            return
        if self._claim_outage(*window) is not None:
            tally["not judged: Redis unreachable in its window"] += 1
            return
        if entry.get("unique") == "until_executed":
            # blocked claims are tried again every second until the next slot comes
            last_try = slot + period - 1 - 0.5
            holders = [
                jid
                for earlier, jids in slots.items()
                if earlier < slot
                for jid in jids
                if self._lock_end(jid) >= last_try
            ]
            if holders:
                tally["skipped: the previous run still held the entry"] += 1
                return
        killed = [
            p
            for p in self.data.procs.values()
            if p.how in ("kill9", "stuck") and p.ended is not None and slot <= p.ended <= slot + 0.5
        ]
        if killed:
            tally["lost: its claimer killed -9 between claim and push"] += 1
            row.details.append(
                f"{name} slot {self.at(slot)} lost: pid {killed[0].pid} killed -9 at "
                f"{self.at(killed[0].ended or 0.0)}, right after the slot (claim won, no push)"
            )
            return
        tally["lost, unexplained"] += 1
        self.fail(row, f"{name} slot {self.at(slot)} never fired")

    def _overlaps(self, runs: list[Execution]) -> list[tuple[Execution, Execution]]:
        """Pairs of runs whose [start, end] overlap (a killed run ends at its kill)."""

        def stop(execution: Execution) -> float:
            if execution.end is not None:
                return execution.end
            proc = self.data.procs.get(execution.pid)
            return proc.ended if proc is not None and proc.ended is not None else float("inf")

        pairs: list[tuple[Execution, Execution]] = []
        ordered = sorted(runs, key=lambda e: e.start)
        for index, later in enumerate(ordered):
            pairs.extend(
                (earlier, later) for earlier in ordered[:index] if stop(earlier) > later.start
            )
        return pairs

    def _completed_before(self, execution: Execution) -> Execution | None:
        """An earlier run of the same job that ended it for good (success, or its last
        failure): ``execution`` is then an at-least-once repeat, which holds no lock."""
        for other in self.by_jid.get(execution.jid, []):
            final = other.result == "ok" or (
                other.result == "fail" and (other.cls == CRON_CLASS or other.rc >= 1)
            )
            if final and other.end is not None and other.end <= execution.start:
                return other
        return None

    def _overlap_cause(self, earlier: Execution, later: Execution, lost: set[str]) -> str | None:
        proc = self.data.procs.get(earlier.pid)
        if proc is not None:
            found = self._false_dead(earlier, proc)
            if found is not None:
                return f"{found.kind}: {found.evidence}"
            deadline = (proc.term_at or float("inf")) + self.shutdown_timeout
            handed_back = earlier.start < deadline and later.start >= deadline - 0.25
            if earlier.jid == later.jid and handed_back:
                return (
                    f"handed back at the shutdown deadline: pid {proc.pid} got TERM at "
                    f"{self.at(proc.term_at or 0.0)} and exited at {self.at(proc.ended or 0.0)}"
                )
            copies = [
                run
                for run in self.by_jid.get(earlier.jid, [])
                if run is not earlier
                and run.start >= deadline - 0.25
                and run.end is not None
                and run.end <= later.start
            ]
            copy = copies[0] if handed_back and copies else None
            if copy is not None:
                return (
                    f"handed back at the shutdown deadline: pid {proc.pid} got TERM at "
                    f"{self.at(proc.term_at or 0.0)}; its requeued copy ran in {copy.label} and "
                    f"released the entry at {self.at(copy.end or 0.0)} while the original ran on"
                )
        if earlier.jid != later.jid and (earlier.jid in lost or later.jid in lost):
            return "a push whose reply was lost (a second job got in)"
        for run in (earlier, later):
            first = self._completed_before(run) if earlier.jid != later.jid else None
            if first is not None:
                return (
                    f"{run.label} repeats jid {run.jid}, already completed by {first.label} at "
                    f"{self.at(first.end or 0.0)} (which released the lock)"
                )
        return None

    def _check_overlaps(self, row: Row, groups: dict[str, list[Execution]], lost: set[str]) -> int:
        count = 0
        for name, runs in groups.items():
            for earlier, later in self._overlaps(runs):
                count += 1
                cause = self._overlap_cause(earlier, later, lost)
                text = (
                    f"{name}: {earlier.label} (jid {earlier.jid}) and {later.label} (jid "
                    f"{later.jid}) overlapped at {self.at(later.start)}"
                )
                if cause is None:
                    self.fail(row, text)
                    row.details.append(text + " -- UNEXPLAINED")
                else:
                    row.details.append(f"{text}: {cause}")
        return count

    def check_cron_overlaps(self, doubled: set[str]) -> None:
        entries = self.data.run.get("periodic") or []
        names = {e["name"] for e in entries if e.get("unique") == "until_executed"}
        groups: dict[str, list[Execution]] = defaultdict(list)
        for execution in self.data.executions:
            if execution.cls == CRON_CLASS and execution.kind in names:
                groups[execution.kind].append(execution)
        row = Row("until_executed cron runs overlapping", "", "OK")
        runs = sum(len(g) for g in groups.values())
        count = self._check_overlaps(row, groups, doubled)
        row.value = f"{count} (of {runs} runs of {len(names)} entries)"
        self.rows.append(row)

    # -- unique jobs -------------------------------------------------------------------------

    def check_unique(self) -> None:
        groups: dict[tuple[str, str, str], list[Push]] = defaultdict(list)
        for push in self.data.pushes.values():
            if push.key != "-":
                groups[(push.cls, push.queue, push.key)].append(push)
        row = Row("unique jobs", "", "OK")
        if not groups:
            row.value = "none pushed"
            self.rows.append(row)
            return
        refused = accepted = justified_late = 0
        lost = {p.jid for p in self.data.pushes.values() if p.outcome in ("unknown", "pending")}
        runs: dict[str, list[Execution]] = {}
        for (cls, queue, key), pushes in groups.items():
            holders = [p for p in pushes if p.outcome != "refused"]
            accepted += sum(1 for p in holders if p.outcome == "confirmed")
            runs[f"{cls}/{queue}/{key}"] = [e for p in holders for e in self.by_jid.get(p.jid, [])]
            for push in pushes:
                if push.outcome != "refused":
                    continue
                refused += 1
                earlier = [h for h in holders if h.t <= push.t]
                if any(self._lock_end(h.jid) + RELEASE_SLACK >= push.t for h in earlier):
                    continue
                delayed = [h for h in earlier if self._claim_outage(self._lock_end(h.jid), push.t)]
                if delayed:
                    justified_late += 1
                    continue
                self.fail(row, f"duplicate of {cls}/{key} refused with no job holding the lock")
                row.details.append(
                    f"jid {push.jid} {cls}/{queue}/{key} refused at {self.at(push.t)}; earlier "
                    "jobs ended at "
                    + ", ".join(self.at(self._lock_end(h.jid)) for h in earlier[-3:])
                )
        overlaps = self._check_overlaps(row, runs, lost)
        row.value = (
            f"{accepted} accepted, {refused} refused as duplicates (each while an earlier one "
            f"held the lock; {justified_late} while its release waited out a Redis fault); "
            f"{len(groups)} digests; runs of one digest overlapping: {overlaps}"
        )
        self.rows.append(row)

    def check_locks(self) -> None:
        snap = self.data.snapshots.get("drained")
        row = Row("locks left once drained", "", "OK")
        if snap is None or "locks" not in snap:
            row.value = "no snapshot"
            self.rows.append(row)
            return
        unique = {k: v for k, v in snap["locks"].items() if "unique" in k}
        cron = {k: v for k, v in snap["locks"].items() if k not in unique}
        row.value = f"unique {len(unique)}, cron running locks {len(cron)}"
        for key, owner in unique.items():
            push = self.data.pushes.get(owner)
            if push is not None and push.outcome == "unknown" and owner not in self.by_jid:
                row.details.append(
                    f"{key}: held by jid {owner}, a push that raised ({push.error[:60]}) and "
                    "whose release couldn't be sent either; it expires after unique_lock_ttl"
                )
                continue
            stranded = self._release_stranded(owner)
            if stranded is not None:
                row.details.append(f"{key}: held by jid {owner}: {stranded}")
                continue
            self.fail(row, f"{key} still held by jid {owner}")
        for key, owner in cron.items():
            self.fail(row, f"{key} still held by jid {owner}")
        self.rows.append(row)

    def _release_stranded(self, jid: str) -> str | None:
        """Why the lock of a job that completed is still held, if its release was stranded: it
        completed while Redis was unreachable (the release waits to be sent again) and its
        process was killed -9 before it could be. The lock then expires after
        unique_lock_ttl."""
        runs = [e for e in self.by_jid.get(jid, []) if e.end is not None and e.result == "ok"]
        if not runs:
            return None
        last = max(runs, key=lambda e: e.start)
        proc = self.data.procs.get(last.pid)
        if proc is None or proc.how != "kill9" or proc.ended is None:
            return None
        assert last.end is not None
        faults = [f for f in self.data.faults if f.kind in CONNECTION_FAULTS or f.kind == "pause"]
        during = [f for f in faults if f.overlaps(last.end - 0.05, proc.ended)]
        if not during:
            return None
        return (
            f"it completed in pid {proc.pid} at {self.at(last.end)} during "
            f"{during[0].short(self.origin)}, and the pid was killed -9 "
            f"{proc.ended - last.end:.3f}s later, before its release could be sent again; the "
            "lock expires after unique_lock_ttl"
        )

    def check_faults(self) -> None:
        kinds = Counter(f.kind for f in self.data.faults)
        detail = Counter(
            f"{f.kind}({f.detail.get('cmd') or f.detail.get('mode')})"
            for f in self.data.faults
            if f.detail.get("cmd") or f.detail.get("mode")
        )
        total = len(self.data.faults)
        row = Row(
            "faults injected",
            f"{total}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
            "OK",
        )
        if detail:
            row.details.append(", ".join(f"{k} {v}" for k, v in sorted(detail.items())))
        skipped = int(self.data.run.get("faults_skipped", 0))
        if skipped:
            row.details.append(f"{skipped} planned fault(s) skipped (no target / Redis down)")
        minimum = int(self.data.run.get("min_faults", 0))
        if total < minimum:
            self.fail(row, f"only {total} faults injected (at least {minimum})")
        self.rows.append(row)

    def _last_reachable(self, moment: float) -> float:
        """The last time before ``moment`` a worker could have beaten (Redis not stopped or
        paused), which is when a killed worker's presence key was last refreshed at best."""
        reachable = moment
        for fault in sorted(self.data.faults, key=lambda f: -f.t):
            # a beat held up by the fault may time out, and the next one reconnect first
            settled = fault.t_end + self.socket_timeout + self.beat
            if fault.kind in ("redis_restart", "pause") and fault.t <= reachable <= settled:
                reachable = fault.t
        return reachable

    def _outage_between(self, start: float, end: float, *, scripts: bool = False) -> float:
        """The length of the restarts and pauses overlapping [start, end], and with ``scripts``
        of the denials of EVALSHA too."""
        total = 0.0
        for fault in self.data.faults:
            refused = scripts and refuses_evalsha(fault)
            counted = fault.kind in ("redis_restart", "pause") or refused
            if counted and fault.overlaps(start, end):
                total += fault.t_end - fault.t
        return total

    def _recovery_samples(self) -> list[tuple[float, float, str, str, int]]:
        """(latency, kill time, note, class, pid) for each job in flight (or unacked) at a kill
        -9 that ran again afterwards."""
        samples = []
        for proc in self.data.procs.values():
            if proc.how not in ("kill9", "stuck") or proc.ended is None:
                continue
            killed = proc.ended
            for execution in self.data.executions:
                if execution.pid != proc.pid or execution.start > killed:
                    continue
                if execution.end is not None and execution.end < killed - ACK_WINDOW:
                    continue
                if execution.result == "fail":
                    continue  # already filed into retry: the next run is its retry's anyway
                # the same payload running again (a failed one's retry runs anyway, sooner)
                again = next(
                    (
                        e
                        for e in self.by_jid[execution.jid]
                        if e.start > killed and e.rc == execution.rc and e.ic == execution.ic
                    ),
                    None,
                )
                if again is None:
                    continue
                latency = again.start - killed
                note = (
                    f"jid {execution.jid}: pid {proc.pid} killed {self.at(killed)}, ran again "
                    f"in {again.label} {latency:.1f}s later"
                )
                samples.append((latency, killed, note, execution.cls, proc.pid))
        return samples

    def _killed_again(self, pid: int, killed: float, rerun: float) -> float | None:
        """The latest kill -9 of another worker within seconds of the requeue of ``pid``'s jobs
        (the requeued jobs are taken at once; one taken by a worker killed before starting it
        waits for a second recovery), before ``rerun``."""
        requeues = self._recoveries_of(pid, killed)
        if not requeues:
            return None
        requeued = min(requeues)
        kills = [
            p.ended
            for p in self.data.procs.values()
            if p.pid != pid
            and p.how in ("kill9", "stuck")
            and p.ended is not None
            and requeued - 1.0 <= p.ended <= min(requeued + 5.0, rerun)
        ]
        return max(kills) if kills else None

    def _judge_recovery(
        self, sample: tuple[float, float, str, str, int], base: float
    ) -> tuple[bool, str | None, str | None]:
        """(a swarm child's?, why it was late, why it was too early) for one recovery."""
        latency, killed, note, cls, pid = sample
        proc = self.data.procs.get(pid)
        child = proc is not None and proc.role == "child"  # its supervisor requeues at once
        # the supervisor's requeue is a script: it is retried while EVALSHA is denied
        downtime = self._outage_between(killed, killed + latency, scripts=child)
        bound = (SWARM_RECOVERY if child else base) + downtime
        again = self._killed_again(pid, killed, killed + latency)
        if again is not None:  # recovered, taken by a worker killed too: the clock restarts
            bound = base + downtime + again - killed
            note += f" (its rescuer's batch was hit by the kill at {self.at(again)})"
        late = f"{note} (bound {bound:.1f}s)" if latency > bound else None
        # (a job written to fail can have a second chain of runs, so only the others tell)
        soon = self._last_reachable(killed) + self.presence_ttl - 2 * self.beat - 1
        early = note if not child and cls != "FailingJob" and killed + latency < soon else None
        return child, late, early

    def check_recovery(self) -> None:
        base = max(self.orphan_threshold, self.presence_ttl) + self.beat + self.settle_after + 5.0
        samples = self._recovery_samples()
        late, early, children = [], [], []
        for sample in samples:
            child, too_late, too_early = self._judge_recovery(sample, base)
            if child:
                children.append(sample)
            late += [too_late] if too_late else []
            early += [too_early] if too_early else []
        worst = max(samples, default=None)
        row = Row("longest kill -> running again", "no job was in flight at a kill", "OK")
        if worst is not None:
            row.value = (
                f"{worst[0]:.1f}s ({len(samples)} jobs); orphan_threshold "
                f"{self.orphan_threshold:g}s, presence TTL {self.presence_ttl:g}s, bound "
                f"{base:.1f}s + Redis downtime meanwhile"
            )
            row.details.append("longest: " + worst[2])
            self._recovery_notes(row, children)
        if late:
            self.fail(row, f"{len(late)} job(s) recovered later than the bound")
            row.details.extend(late[:DETAIL_LINES])
        if early:
            self.fail(row, f"{len(early)} job(s) ran again before their process could be dead")
            row.details.extend(early[:DETAIL_LINES])
        self.rows.append(row)

    def _recovery_notes(
        self, row: Row, children: list[tuple[float, float, str, str, int]]
    ) -> None:
        if children:
            worst = max(children)
            row.details.append(
                f"swarm children: {len(children)} jobs, longest {worst[0]:.2f}s (bound "
                f"{SWARM_RECOVERY:g}s + Redis downtime): {worst[2]}"
            )
        if self.presence_ttl > self.orphan_threshold:
            row.details.append(
                f"note: a killed worker's presence key lives {self.presence_ttl:g}s after its "
                f"last beat, so orphan_threshold {self.orphan_threshold:g}s can't make "
                "recovery faster than that"
            )

    def check_workers(self) -> None:
        procs = list(self.data.procs.values())
        hows = Counter(p.how or "running" for p in procs)
        stops = [
            (p.ended - p.term_at, p.pid)
            for p in procs
            if p.term_at is not None and p.ended is not None and p.how == "term"
        ]
        longest = max(stops) if stops else None
        row = Row(
            "worker processes",
            f"{len(procs)} started; ended: "
            + ", ".join(f"{k} {v}" for k, v in sorted(hows.items()))
            + (f"; longest TERM -> exit {longest[0]:.1f}s (pid {longest[1]})" if longest else ""),
            "OK",
        )
        for proc in procs:
            if proc.how in ("crash", "stuck"):
                self.fail(row, f"pid {proc.pid} {proc.how} (log {proc.log})")
        unexpected = [e for e in self.data.log_events if e.what == "unexpected"]
        if unexpected:
            self.fail(row, f"{len(unexpected)} unexpected error line(s) in worker logs")
            row.details.extend(e.line[:160] for e in unexpected[:DETAIL_LINES])
        recovered = self.recoveries
        strays = [e for e in self.data.log_events if e.what == "stray"]
        false_dead = [
            e
            for e in recovered
            if any(
                identity_pid(e.identity) == p.pid and (p.ended is None or e.t < p.ended - 1.0)
                for p in procs
            )
        ]
        if false_dead:
            row.details.extend(f"false dead verdict: {e.line[:150]}" for e in false_dead[:5])
        row.details.append(
            f"orphan recoveries {len(recovered)} (jobs {sum(e.count for e in recovered)}), "
            f"false dead verdicts {len(false_dead)}, stray requeues {len(strays)}, shutdown "
            f"hand-backs {len(self.handbacks)}"
        )
        self.rows.append(row)

    def _verdict_cause(self, event: LogEvent, proc: Proc) -> str | None:
        """Why the live process ``proc`` looked dead at ``event``: a fault that kept its beats
        from Redis, or a stall it reported itself, in the span its presence and last beat
        cover (log times are whole seconds: one more on each side)."""
        span = self.orphan_threshold + self.presence_ttl + self.beat + self.socket_timeout + 1
        start, end = event.t - span, event.t + 1
        for fault in self.data.faults:
            if fault.kind in ("pause", "redis_restart") and fault.overlaps(start, end):
                return fault.short(self.origin)
        for stall in self.data.log_events:
            if stall.what != "stalled" or stall.pid != proc.pid:
                continue
            if stall.t - stall.count - 1 <= event.t <= stall.t + 1:  # judged while it stalled
                return f"pid {proc.pid} stalled {stall.count}s (its log, {self.at(stall.t)})"
        return None

    def check_verdicts(self) -> None:
        """Every dead verdict on a process that was alive, each with its cause."""
        row = Row("dead verdicts on live processes", "none", "OK")
        live_verdicts = 0
        for event in self.recoveries:
            proc = self.data.procs.get(identity_pid(event.identity) or -1)
            if proc is None or (proc.ended is not None and event.t >= proc.ended - 1.0):
                continue
            live_verdicts += 1
            cause = self._verdict_cause(event, proc)
            line = f"pid {event.pid} judged live pid {proc.pid} dead at {self.at(event.t)}"
            if cause is None:
                self.fail(row, f"{line} with no fault or stall to explain it")
                row.details.append(f"{line}: NO CAUSE")
            else:
                row.details.append(f"{line}: {cause}")
        if live_verdicts:
            row.value = (
                f"{live_verdicts} (threshold {self.orphan_threshold:g}s, presence TTL "
                f"{self.presence_ttl:g}s)"
            )
        del row.details[DETAIL_LINES:]
        self.rows.append(row)

    def check_run(self) -> None:
        problems = self.data.run.get("problems", [])
        if problems:
            row = Row("driver", f"{len(problems)} problem(s)", "")
            self.fail(row, "; ".join(problems[:5]))
            row.details.extend(problems[:DETAIL_LINES])
            self.rows.append(row)

    def report(self) -> Report:
        self.check_pushes()
        self.check_executions()
        lost = self.check_lost()
        explained = self.check_repeats()
        self.check_leftovers()
        self.check_dead(explained)
        doubled = self.check_periodic()
        self.check_cron_overlaps(doubled)
        self.check_unique()
        self.check_locks()
        self.check_faults()
        self.check_recovery()
        self.check_workers()
        self.check_verdicts()
        self.check_run()
        run = self.data.run
        title = (
            f"cogworker chaos: seed {run['seed']}, {run['mode']}, {run['duration']:.0f}s of faults,"
            f" {run['workers']} workers x {run['config']['concurrency']} threads, "
            f"drained in {run.get('drain_seconds', float('nan')):.0f}s"
        )
        return Report(title, self.rows, self.failures, lost)


def render(report: Report) -> str:
    width = 110
    label_w, verdict_w = 32, 6
    value_w = width - label_w - verdict_w - 2
    out = ["=" * width, report.title, "-" * width]
    out.append(f"{'check':<{label_w}} {'value':<{value_w}} {'':>{verdict_w}}")
    out.append("-" * width)
    for row in report.rows:
        chunks = textwrap.wrap(row.value, value_w) or [""]
        for index, chunk in enumerate(chunks):
            label, verdict = (row.label, row.verdict) if index == 0 else ("", "")
            out.append(f"{label:<{label_w}} {chunk:<{value_w}} {verdict:>{verdict_w}}".rstrip())
        for detail in row.details:
            out.extend(
                textwrap.wrap(detail, width, initial_indent="    ", subsequent_indent="        ")
            )
    out.append("-" * width)
    verdict = "PASS" if report.passed else "FAIL"
    out.append(f"RESULT: {verdict}  (lost = {report.lost})")
    for failure in report.failures:
        out.append(f"  failed: {failure}")
    out.append("=" * width)
    return "\n".join(out)


def check(directory: Path) -> Report:
    return Checker(load(directory)).report()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    report = check(Path(argv[0]))
    print(render(report))
    return 0 if report.passed else 1


if __name__ == "__main__" and len(sys.argv) > 1:
    sys.exit(main(sys.argv[1:]))
