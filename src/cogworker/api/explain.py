"""``explain(client, jid)``: where a job is now, and why it is not running (yet).

    from cogworker import api
    found = api.explain(client, jid)
    found.place                    # Place.QUEUED, Place.RUNNING, Place.DEAD, ...
    for reason in found.reasons:   # why it waits, each with a sentence for humans
        print(reason.text)

Where it looks, in the order jobs move forward (a job moving on while the search runs is
seen at least once, at worst twice; one that fails back into retry meanwhile can be missed):
the schedule and retry sets, every known queue (the ``cogworker:queues`` registry plus the
queues live processes read), every process's in-progress list and running work (live
processes, and every identity in the process and in-progress registries, dead ones
included), the dead set, the jobs parked for filing by the next recovery pass, and the run
history. Its ``status:<jid>`` hash is read first, with the fleet's state.

Cost: there is no index by jid, so each structure is read once in full, a page of 1,000
entries per round trip; only entries whose text holds the jid are parsed. The entries read
per structure are in ``Explanation.scanned``. A queue key missing from the registry and not
read by any live process is not searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, wire
from cogworker.api.explanation import Explanation, Location, Place, Run
from cogworker.api.in_progress import DEFAULT_ORPHAN_THRESHOLD
from cogworker.api.processes import ProcessSet, Work, work_of
from cogworker.api.records import JobRecord
from cogworker.api.search import Found, search_list, search_sorted_set
from cogworker.api.waiting import Fleet, missing_reason, not_found_reason, reasons


@dataclass(frozen=True)
class _Snapshot:
    now: float
    queues: list[str]
    paused: frozenset[str]
    inprogress_identities: list[str]
    registered: list[str]  # cogworker:processes, read before ProcessSet prunes it
    status: dict[str, str] | None
    orphanings: int


def _snapshot(client: redis.Redis, jid: str) -> _Snapshot:
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.smembers(keys.QUEUES)
    pipe.smembers(keys.PAUSED_QUEUES)
    pipe.smembers(keys.INPROGRESS_IDENTITIES)
    pipe.smembers(keys.PROCESSES)
    pipe.hgetall(keys.status(jid))
    pipe.get(keys.orphanings(jid))
    (seconds, micros), queues, paused, identities, registered, status, orphanings = pipe.execute()
    return _Snapshot(
        now=int(seconds) + int(micros) / 1e6,
        queues=sorted(str(name) for name in queues),
        paused=frozenset(str(name) for name in paused),
        inprogress_identities=sorted(str(name) for name in identities),
        registered=sorted(str(name) for name in registered),
        status={str(k): str(v) for k, v in status.items()} or None,
        orphanings=int(orphanings) if str(orphanings or "").isdigit() else 0,
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _set_locations(place: Place, found: Found) -> list[Location]:
    locations = []
    for record in found.records:
        job = record.item or {}
        retry = None
        if place is Place.RETRY:
            count = job.get("retry_count")
            retry = count if isinstance(count, int) and not isinstance(count, bool) else 0
        locations.append(
            Location(
                place,
                record,
                queue=record.queue,
                at=record.score,
                retry=retry,
                max_retries=wire.max_retries(job) if place is Place.RETRY else None,
                error=record.error,
            )
        )
    return locations


def _queue_locations(
    client: redis.Redis, names: list[str], jid: str, scanned: dict[str, int]
) -> list[Location]:
    locations = []
    for name in names:
        found = search_list(client, keys.queue(name), jid)
        scanned[keys.queue(name)] = found.scanned
        locations += [
            Location(Place.QUEUED, record, queue=name, position=position)
            for record, position in zip(found.records, found.positions, strict=True)
        ]
    return locations


def _process_locations(
    client: redis.Redis,
    jid: str,
    identities: list[str],
    threshold: float,
    scanned: dict[str, int],
) -> list[Location]:
    """The job's copies in in-progress lists and running work, one per copy and process."""
    if not identities:
        return []
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        pipe.lrange(keys.inprogress(identity), 0, -1)
        pipe.exists(keys.process(identity))
        pipe.hget(keys.LAST_BEAT, identity)
    replies = pipe.execute()
    running = work_of(client, identities)
    scanned[keys.INPROGRESS_PREFIX + "*"] = sum(len(replies[3 * i]) for i in range(len(identities)))
    scanned[keys.WORKERS_PREFIX + "*"] = sum(len(works) for works in running.values())
    locations = []
    for index, identity in enumerate(identities):
        listed = [JobRecord(str(raw)) for raw in replies[3 * index]]
        copies = [record for record in listed if record.jid == jid]
        works = [work for work in running.get(identity, []) if work.jid == jid]
        alive = bool(replies[3 * index + 1])
        stamp = replies[3 * index + 2]
        last_beat = int(stamp) if str(stamp or "").isdigit() else None
        recover_at = last_beat + threshold if last_beat is not None else None
        locations += _copies_at(identity, copies, works, alive, last_beat, recover_at)
    return locations


def _copies_at(
    identity: str,
    copies: list[JobRecord],
    works: list[Work],
    alive: bool,
    last_beat: int | None,
    recover_at: float | None,
) -> list[Location]:
    def at_process(place: Place, record: JobRecord, **fields: Any) -> Location:
        orphaned = place is Place.ORPHANED
        return Location(
            place,
            record,
            identity=identity,
            process_alive=alive,
            last_beat=last_beat,
            recover_at=recover_at if orphaned else None,
            **fields,
        )

    found = []
    for index, work in enumerate(works):
        listed = index < len(copies)  # reliable fetch lists what a thread runs
        record = copies[index] if listed else JobRecord(wire.dumps(work.job))
        place = Place.RUNNING if alive else (Place.ORPHANED if listed else Place.LOST)
        found.append(
            at_process(
                place,
                record,
                queue=work.queue or record.queue,
                at=_number(work.run_at),
                thread_id=work.thread_id,
            )
        )
    for record in copies[len(works) :]:
        place = Place.TAKEN if alive else Place.ORPHANED
        found.append(at_process(place, record, queue=record.queue))
    return found


def _parked_locations(client: redis.Redis, jid: str, scanned: dict[str, int]) -> list[Location]:
    """Jobs waiting for a recovery pass to file them: repeat orphans and unsettled records."""
    found = search_list(client, keys.REPEAT_ORPHANS, jid)
    scanned[keys.REPEAT_ORPHANS] = found.scanned
    locations = [
        Location(Place.PARKED, record, queue=record.queue, target=keys.DEAD)
        for record in found.records
    ]
    records = client.lrange(keys.UNSETTLED, 0, -1)
    scanned[keys.UNSETTLED] = len(records)
    for raw in records:
        try:
            entry = wire.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and isinstance(payload := entry.get("payload"), str):
            record = JobRecord(payload, _number(entry.get("score")))
            if record.jid == jid:
                target = str(entry.get("set"))
                locations.append(Location(Place.PARKED, record, queue=record.queue, target=target))
    return locations


def _runs(found: Found) -> list[Run]:
    runs = []
    for record in found.records:
        entry = record.item or {}
        runs.append(
            Run(
                status=str(entry.get("status", "?")),
                queue=record.queue,
                started_at=_number(entry.get("started_at")),
                finished_at=_number(entry.get("finished_at")),
                error=record.error,
            )
        )
    return runs


def explain(
    client: redis.Redis, jid: str, *, orphan_threshold: float = DEFAULT_ORPHAN_THRESHOLD
) -> Explanation:
    """Where job ``jid`` is and why it waits; ``orphan_threshold`` is the workers' setting
    (it dates the recovery of a job left in progress by a process that is gone)."""
    snapshot = _snapshot(client, jid)
    live = list(ProcessSet(client))
    fleet = Fleet(snapshot.now, live, snapshot.paused)
    scanned: dict[str, int] = {}
    locations: list[Location] = []
    for key, place in ((keys.SCHEDULE, Place.SCHEDULED), (keys.RETRY, Place.RETRY)):
        found = search_sorted_set(client, key, jid)
        scanned[key] = found.scanned
        locations += _set_locations(place, found)
    names = set(snapshot.queues) | {name for process in live for name in process.queues}
    if snapshot.status and snapshot.status.get("queue"):
        names.add(snapshot.status["queue"])
    locations += _queue_locations(client, sorted(names), jid, scanned)
    identities = sorted(
        {p.identity for p in live} | set(snapshot.inprogress_identities) | set(snapshot.registered)
    )
    locations += _process_locations(client, jid, identities, orphan_threshold, scanned)
    found = search_sorted_set(client, keys.DEAD, jid)
    scanned[keys.DEAD] = found.scanned
    locations += _set_locations(Place.DEAD, found)
    locations += _parked_locations(client, jid, scanned)
    history = search_sorted_set(client, keys.HISTORY_ALL, jid)
    scanned[keys.HISTORY_ALL] = history.scanned
    why = reasons(client, jid, locations, fleet, snapshot.orphanings)
    state = (snapshot.status or {}).get("status")
    if snapshot.status and not locations and state not in ("complete", "failed"):
        why.append(missing_reason(snapshot.status))
    if not (locations or snapshot.status or history.records):
        why.append(not_found_reason(history.scanned > 0))
    return Explanation(
        jid=jid,
        checked_at=snapshot.now,
        locations=locations,
        reasons=why,
        status=snapshot.status,
        runs=_runs(history),
        history_kept=history.scanned > 0,
        scanned=scanned,
    )
