"""One-shot notices after an action: a fixed key, never text taken from a request.

After an action the page shows what happened once. With JavaScript the notice is part of the
fragment the action answers with. Without it the action redirects, and the notice travels in
the session when there is one (then it can say how many jobs it concerned), else as the
``notice`` query parameter (only the key: an unknown key shows nothing, so a crafted link
can't put words on the page). Polling URLs never carry it, so it is gone at the next refresh.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

SESSION_KEY = "cogworker.notice"


class Tone(enum.Enum):
    SUCCESS = "success"
    WARNING = "warning"
    DANGER = "danger"


@dataclass(frozen=True)
class NoticeText:
    tone: Tone
    text: str
    counted: str | None = None  # with ``{count}``, used when the count is known


NOTICES: dict[str, NoticeText] = {
    "not_requeueable": NoticeText(
        Tone.DANGER,
        "This entry can't be put back on a queue: it is unreadable or names no queue of its "
        "own. Delete it instead.",
    ),
    "job_deleted": NoticeText(
        Tone.SUCCESS, "Deleted the job.", "Deleted the job ({count} copies)."
    ),
    "job_gone": NoticeText(
        Tone.WARNING, "That job was no longer there (it ran or was moved): nothing was deleted."
    ),
    "entry_gone": NoticeText(
        Tone.WARNING,
        "That entry was no longer there (it ran, moved or was changed meanwhile): nothing "
        "changed.",
    ),
    "job_requeued": NoticeText(
        Tone.SUCCESS,
        "The job is back on its queue, behind the jobs already waiting there.",
    ),
    "job_rescheduled": NoticeText(
        Tone.SUCCESS, "Rescheduled the job.", "Rescheduled the job: it is due in {count} minutes."
    ),
    "job_killed": NoticeText(
        Tone.WARNING,
        "Moved the job to the dead set: it is not retried again unless retried from there.",
    ),
    "set_cleared": NoticeText(
        Tone.SUCCESS, "Deleted every entry of the set.", "Deleted {count} entries of the set."
    ),
    "set_retried": NoticeText(
        Tone.SUCCESS,
        "Every entry of the set went back on its queue.",
        "{count} jobs went back on their queues.",
    ),
    "set_retried_partly": NoticeText(
        Tone.WARNING,
        "Some entries can't be put back on a queue (unreadable, or naming no queue of their "
        "own) and stayed: delete them instead.",
        "{count} jobs went back on their queues; the entries that can't be put back on a queue "
        "(unreadable, or naming no queue of their own) stayed: delete them instead.",
    ),
    "set_empty": NoticeText(Tone.WARNING, "The set was empty: nothing changed."),
    "queue_cleared": NoticeText(
        Tone.SUCCESS, "Deleted every job of the queue.", "Deleted {count} jobs of the queue."
    ),
    "queue_paused": NoticeText(
        Tone.WARNING,
        "Queue paused: workers take no jobs from it until it is resumed; new jobs still arrive.",
    ),
    "queue_resumed": NoticeText(Tone.SUCCESS, "Queue resumed: workers take jobs from it again."),
    "retried_all": NoticeText(
        Tone.SUCCESS,
        "The retrying jobs of the queue went back on it.",
        "{count} retrying jobs went back on the queue.",
    ),
    "nothing_to_retry": NoticeText(Tone.WARNING, "No retrying job of this queue was left."),
    "quiet_sent": NoticeText(
        Tone.SUCCESS,
        "Asked the process to go quiet: it finishes its running jobs and takes no new ones.",
    ),
    "resume_sent": NoticeText(Tone.SUCCESS, "Asked the process to take jobs again."),
    "stop_sent": NoticeText(
        Tone.WARNING, "Asked the process to stop: it finishes its running jobs, then exits."
    ),
    "not_listening": NoticeText(
        Tone.DANGER,
        "The process is listed but did not receive the command (it is not subscribed right "
        "now): nothing changed. Try again in a few seconds.",
    ),
    "process_gone": NoticeText(
        Tone.WARNING, "That process is no longer reporting in: nothing was sent."
    ),
    "intake_paused": NoticeText(
        Tone.WARNING,
        "Asked every process to go quiet: running jobs finish, no new ones start.",
        "Asked {count} processes to go quiet: running jobs finish, no new ones start.",
    ),
    "intake_resumed": NoticeText(
        Tone.SUCCESS,
        "Asked every process to take jobs again.",
        "Asked {count} processes to take jobs again.",
    ),
    "no_processes": NoticeText(Tone.WARNING, "No process is reporting in: nothing was sent."),
    "schedule_run": NoticeText(
        Tone.SUCCESS,
        "Queued one run of the entry on its queue; its schedule and last run are unchanged.",
    ),
    "schedule_held": NoticeText(
        Tone.WARNING,
        "Not run: an earlier run of this until_executed entry is still queued, retrying or "
        "running (it holds the entry's running lock), and two runs never overlap. Try again once "
        "it has finished.",
    ),
    "schedule_refused": NoticeText(
        Tone.WARNING,
        "Not run: a client middleware (a unique-job lock, say) stopped the push, so nothing "
        "was queued.",
    ),
    "schedule_gone": NoticeText(
        Tone.WARNING, "That entry is no longer published by any worker: nothing changed."
    ),
    "schedule_unreadable": NoticeText(
        Tone.DANGER,
        "That entry's published value can't be read as a job, so it can't be run. A worker "
        "publishes it again when it starts.",
    ),
    "schedule_disabled": NoticeText(
        Tone.WARNING,
        "Disabled: workers skip its slots until it is enabled again; Last run keeps the last "
        "real run.",
    ),
    "schedule_enabled": NoticeText(
        Tone.SUCCESS,
        "Enabled: workers run its next slot; the slots skipped meanwhile are not made up.",
    ),
}


@dataclass(frozen=True)
class Notice:
    key: str
    count: int | None = None

    @property
    def tone(self) -> str:
        return NOTICES[self.key].tone.value

    @property
    def text(self) -> str:
        entry = NOTICES[self.key]
        if self.count is not None and entry.counted is not None:
            return entry.counted.format(count=self.count)
        return entry.text


def notice(key: str, count: int | None = None) -> Notice:
    if key not in NOTICES:
        raise KeyError(f"unknown notice {key!r}")
    return Notice(key, count)


def has_session(request: Request) -> bool:
    return "session" in request.scope


def remember(request: Request, shown: Notice) -> str | None:
    """Keep ``shown`` for the page the redirect leads to: in the session if there is one
    (returns None), else returns the key for the ``notice`` query parameter."""
    if has_session(request):
        request.session[SESSION_KEY] = {"key": shown.key, "count": shown.count}
        return None
    return shown.key


def take(request: Request) -> Notice | None:
    """The notice waiting for this full page: popped from the session, else the ``notice``
    query parameter (a known key only)."""
    if has_session(request):
        stored: Any = request.session.pop(SESSION_KEY, None)
        if isinstance(stored, dict) and stored.get("key") in NOTICES:
            count = stored.get("count")
            return Notice(str(stored["key"]), count if isinstance(count, int) else None)
    key = request.query_params.get("notice")
    return Notice(key) if key in NOTICES else None
