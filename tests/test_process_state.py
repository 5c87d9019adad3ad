"""The process state: one object holds what this process keeps for itself, and one reset()
forgets all of it in place, as a forked worker does first thing."""

from __future__ import annotations

import os
import warnings

import pytest
import redis

import cogworker
from cogworker import locks, redis_errors, status_writer, testing
from cogworker.process_state import ProcessState, state
from cogworker.web import settings as web_settings

PARTS = [
    "default client",
    "default config",
    "deferred lock releases",
    "error reporter",
    "handed-back jids",
    "status writers",
    "testing memory",
    "testing mode",
    "web session secret",
]


class Job(cogworker.Job):
    name = "ProcessState::Job"

    def perform(self) -> None:
        pass


def test_the_state_holds_every_per_process_part_of_the_package() -> None:
    assert state.names() == PARTS


def test_a_name_is_held_once() -> None:
    held = ProcessState()
    held.hold("error reporter", redis_errors.ErrorReporter())
    with pytest.raises(ValueError, match="already holds a part named 'error reporter'"):
        held.hold("error reporter", redis_errors.ErrorReporter())


def test_reset_forgets_every_part_and_the_module_names_stay_valid(
    config: cogworker.Config,
) -> None:
    pusher = cogworker.default_client()
    assert cogworker.default_config() is config and pusher.config is config
    redis_errors.reporter.report("Somewhere", redis.ConnectionError("down"))
    locks.deferred.add("cogworker:unique:x", "jid-1")
    locks.handed_back.add("jid-2")
    writer = status_writer.writer(config)
    testing.memory.take_lock("cogworker:unique:y", "jid-3", 60)
    with testing.fake():
        Job.perform_async()
    secret = web_settings.process_secret()
    deferred, reporter = locks.deferred, redis_errors.reporter

    state.reset()

    fresh = cogworker.default_config()
    assert fresh is not config
    assert cogworker.default_client() is not pusher
    assert cogworker.default_client().config is fresh
    assert not redis_errors.reporter.in_outage("Somewhere")
    assert len(locks.deferred) == 0
    assert not locks.handed_back
    assert status_writer.writer(config) is not writer
    assert testing.memory.take_lock("cogworker:unique:y", "jid-4", 60)
    assert testing.jobs(Job) == []
    assert testing.current_mode() is testing.Mode.DISABLED
    assert web_settings.process_secret() != secret
    # reset in place: a name taken before the reset is still the part
    assert locks.deferred is deferred and redis_errors.reporter is reporter
    assert state.names() == PARTS


def test_reset_inside_a_testing_block_turns_the_mode_off(config: cogworker.Config) -> None:
    with testing.inline():
        state.reset()
        assert not testing.active()
    assert testing.current_mode() is testing.Mode.DISABLED


def test_a_forked_child_never_inherits_the_status_writers(config: cogworker.Config) -> None:
    """Any fork, not only a swarm's: a writer's thread stays in the parent."""
    parent_writer = status_writer.writer(config)
    with warnings.catch_warnings():  # newer Pythons warn on forking a threaded process
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report by exit status only
        inherited = status_writer.writer(config) is parent_writer
        os._exit(1 if inherited else 0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert status_writer.writer(config) is parent_writer
