"""Config: defaults, validation, queue weights, Redis URL resolution, server/client blocks, YAML.

No value is quietly changed: a bad queue weight, an unknown or repeated YAML key, an invalid
``$REDIS_URL`` are errors naming what was wrong.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import cogworker
from cogworker import connection
from cogworker.config import OPTION_NAMES, expand_queues
from cogworker.config import file as config_file
from cogworker.local.server import RedisServer
from cogworker.middleware import Chain

DEFAULTS: dict[str, Any] = {
    "concurrency": 10,
    "adaptive_concurrency": True,
    "queues": ["default"],
    "redis_url": connection.DEFAULT_URL,  # with REDIS_URL unset
    "job_packages": [],
    "redis_socket_timeout": 5.0,
    "fetch": "reliable",
    "fetch_idle_max_interval": 1.0,
    "orphan_threshold": 300.0,
    "max_orphanings": 3,
    "unique_lock_ttl": 86400.0,
    "periodic_catch_up": True,
    "death_handlers": [],
    "shutdown_handlers": [],
    "shutdown_timeout": 25.0,
    "heartbeat_interval": 5.0,
    "presence_ttl": 60.0,
    "poll_interval": 5.0,
    "orphan_check_interval": 60.0,
    "log_level": "INFO",
    "environment": "development",
    "tag": None,
    "max_memory": None,
    "defer_push": None,
}


def handler(job: Any, error: BaseException) -> None:
    pass


# (option, value given, value stored)
GOOD: list[tuple[str, Any, Any]] = [
    ("concurrency", 1, 1),
    ("concurrency", 50, 50),
    ("queues", ["a", "b"], ["a", "b"]),
    ("queues", "solo", ["solo"]),
    ("queues", ("x", "y,2"), ["x", "y", "y"]),
    ("redis_url", "redis://h:1/2", "redis://h:1/2"),
    ("redis_url", "unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
    ("job_packages", ["billing", "app.jobs"], ["billing", "app.jobs"]),
    ("job_packages", ("billing",), ["billing"]),
    ("job_packages", ["billing", "billing"], ["billing"]),
    ("job_packages", [], []),
    ("redis_socket_timeout", 0.5, 0.5),
    ("redis_socket_timeout", 2, 2.0),
    ("fetch", "basic", "basic"),
    ("fetch", "RELIABLE", "reliable"),
    ("fetch_idle_max_interval", 0.1, 0.1),
    ("orphan_threshold", 60, 60.0),
    ("max_orphanings", 1, 1),
    ("unique_lock_ttl", 0.5, 0.5),
    ("periodic_catch_up", False, False),
    ("adaptive_concurrency", False, False),
    ("death_handlers", [handler], [handler]),
    ("death_handlers", (handler,), [handler]),
    ("death_handlers", [], []),
    ("shutdown_handlers", [handler], [handler]),
    ("shutdown_timeout", 0, 0.0),
    ("shutdown_timeout", 8.5, 8.5),
    ("heartbeat_interval", 1, 1.0),
    ("presence_ttl", 4, 4.0),
    ("poll_interval", 0.2, 0.2),
    ("orphan_check_interval", 30, 30.0),
    ("log_level", "debug", "DEBUG"),
    ("log_level", "WARNING", "WARNING"),
    ("environment", "production", "production"),
    ("tag", "blue", "blue"),
    ("tag", None, None),
]

# (option, bad value); the error must name the option and show the value
BAD: list[tuple[str, Any]] = [
    ("concurrency", 0),
    ("concurrency", -1),
    ("concurrency", 2.5),
    ("concurrency", "10"),
    ("concurrency", True),
    ("concurrency", None),
    ("queues", 5),
    ("queues", None),
    ("redis_url", 6379),
    ("redis_url", ""),
    ("redis_url", "localhost:6379"),
    ("job_packages", "billing"),
    ("job_packages", ["billing", "bad name"]),
    ("job_packages", ["app..jobs"]),
    ("job_packages", [5]),
    ("job_packages", None),
    ("redis_socket_timeout", 0),
    ("redis_socket_timeout", -1.0),
    ("redis_socket_timeout", math.inf),
    ("redis_socket_timeout", "5"),
    ("fetch", "fast"),
    ("fetch", None),
    ("fetch", 1),
    ("fetch_idle_max_interval", 0),
    ("fetch_idle_max_interval", math.nan),
    ("orphan_threshold", -300),
    ("orphan_threshold", True),
    ("max_orphanings", 0),
    ("max_orphanings", 2.5),
    ("max_orphanings", "3"),
    ("unique_lock_ttl", 0),
    ("unique_lock_ttl", "1d"),
    ("periodic_catch_up", "yes"),
    ("adaptive_concurrency", "false"),
    ("adaptive_concurrency", 0),
    ("periodic_catch_up", 1),
    ("periodic_catch_up", None),
    ("death_handlers", handler),
    ("shutdown_handlers", [1]),
    ("death_handlers", ["not callable"]),
    ("death_handlers", None),
    ("shutdown_timeout", -1),
    ("shutdown_timeout", math.inf),
    ("heartbeat_interval", 0),
    ("presence_ttl", 0),
    ("presence_ttl", "60"),
    ("poll_interval", -5),
    ("orphan_check_interval", 0),
    ("log_level", "verbose"),
    ("log_level", 10),
    ("environment", ""),
    ("environment", None),
    ("tag", 5),
    ("max_memory", 0),
    ("max_memory", "512MB"),
    ("client_middleware", []),
    ("client_middleware", Chain),
    ("server_middleware", None),
    ("defer_push", "on_commit"),
]


# -- defaults -------------------------------------------------------------------------------


def test_defaults_cover_every_option() -> None:
    assert set(DEFAULTS) | {"client_middleware", "server_middleware"} == OPTION_NAMES


@pytest.mark.parametrize(("option", "default"), DEFAULTS.items(), ids=list(DEFAULTS))
def test_default(option: str, default: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    value = getattr(cogworker.Config(), option)
    assert value == default
    assert type(value) is type(default)


def test_default_middleware_chains_are_chains_and_per_config() -> None:
    first, second = cogworker.Config(), cogworker.Config()
    for option in ("client_middleware", "server_middleware"):
        assert isinstance(getattr(first, option), Chain)
        assert getattr(first, option) is not getattr(second, option)
    assert first.death_handlers is not second.death_handlers
    assert first.queues is not second.queues
    first.death_handlers.append(handler)
    assert second.death_handlers == []


def test_not_a_server_by_default() -> None:
    assert cogworker.Config().server is False


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("option", "value", "expected"), GOOD, ids=repr)
def test_good_value(option: str, value: Any, expected: Any) -> None:
    built = cogworker.Config(**{option: value})
    assert getattr(built, option) == expected
    assigned = cogworker.Config()
    setattr(assigned, option, value)
    assert getattr(assigned, option) == expected


@pytest.mark.parametrize(("option", "value"), BAD, ids=repr)
def test_bad_value_on_construction(option: str, value: Any) -> None:
    with pytest.raises(cogworker.ConfigError) as raised:
        cogworker.Config(**{option: value})
    assert option in str(raised.value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize(("option", "value"), BAD, ids=repr)
def test_bad_value_on_assignment_keeps_the_old_value(option: str, value: Any) -> None:
    config = cogworker.Config()
    before = getattr(config, option)
    with pytest.raises(cogworker.ConfigError) as raised:
        setattr(config, option, value)
    assert option in str(raised.value)
    assert repr(value) in str(raised.value)
    assert getattr(config, option) == before


# a bad entry of the queue list: the error names the option and shows the entry
BAD_QUEUE_ENTRIES: list[tuple[Any, str]] = [
    ([""], "''"),
    ([" ,2"], "' ,2'"),
    (["ok", 5], "5"),
    (["ok", None], "None"),
    ([["a", 2, 3]], "['a', 2, 3]"),
    ([[5, 2]], "[5, 2]"),
    # a weight that is not a positive integer is refused (it used to count as 1)
    (["a,0"], "'a,0'"),
    (["a,-2"], "'a,-2'"),
    (["a,x"], "'a,x'"),
    (["a,"], "'a,'"),
    (["a,2.5"], "'a,2.5'"),
    (["a,b,c"], "'a,b,c'"),
    ([["a", 0]], "['a', 0]"),
    ([["a", 2.0]], "['a', 2.0]"),
    ([["a", True]], "['a', True]"),
    ([("a", "-1")], "('a', '-1')"),
]


@pytest.mark.parametrize(("value", "shown"), BAD_QUEUE_ENTRIES, ids=repr)
def test_bad_queue_entry(value: Any, shown: str) -> None:
    with pytest.raises(cogworker.ConfigError) as raised:
        cogworker.Config(queues=value)
    assert "queues" in str(raised.value) and shown in str(raised.value)
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError):
        config.queues = value
    assert config.queues == ["default"]


def test_a_bad_weight_names_the_flag_it_came_from() -> None:
    with pytest.raises(cogworker.ConfigError) as raised:
        expand_queues(["critical,2", "default,0"], "-q")
    assert str(raised.value) == (
        "-q 'default,0': a queue's weight must be a positive integer, got '0'"
    )


def test_empty_queue_list_is_refused() -> None:
    with pytest.raises(cogworker.ConfigError, match="queues"):
        cogworker.Config(queues=[])
    with pytest.raises(cogworker.ConfigError, match="queues"):
        expand_queues([])


def test_config_error_is_a_value_error() -> None:
    assert issubclass(cogworker.ConfigError, ValueError)


def test_unknown_option() -> None:
    with pytest.raises(cogworker.ConfigError, match="colour"):
        cogworker.Config(colour="blue")
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError, match="colour"):
        config.colour = "blue"
    assert not hasattr(config, "colour")


def test_update_stops_at_the_first_bad_option() -> None:
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError, match="fetch"):
        config.update({"concurrency": 3, "fetch": "fast", "log_level": "DEBUG"})
    assert config.concurrency == 3
    assert config.log_level == "INFO"


def test_middleware_chain_option_accepts_a_chain() -> None:
    chain = Chain()
    assert cogworker.Config(server_middleware=chain).server_middleware is chain


# -- queue weights --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        (["a,3"], ["a", "a", "a"]),
        ([["a", 2]], ["a", "a"]),
        ([("a", "2")], ["a", "a"]),
        ([["a"]], ["a"]),
        (["a, 02"], ["a", "a"]),
        ([" a , 2 "], ["a", "a"]),
        (["critical,2", "default", ["low", 1]], ["critical", "critical", "default", "low"]),
        ("a,2", ["a", "a"]),
    ],
    ids=repr,
)
def test_queue_weight_expansion(specs: Any, expected: list[str]) -> None:
    assert expand_queues(specs) == expected
    assert cogworker.Config(queues=specs).queues == expected
    config = cogworker.Config()
    config.queues = specs
    assert config.queues == expected


# -- Redis URL ------------------------------------------------------------------------------


def test_resolve_url_explicit_env_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://from-env:1234/2")
    assert connection.resolve_url(None) == "redis://from-env:1234/2"
    assert connection.resolve_url("redis://explicit:1/0") == "redis://explicit:1/0"
    monkeypatch.setenv("REDIS_URL", "")
    assert connection.resolve_url(None) == connection.DEFAULT_URL
    monkeypatch.delenv("REDIS_URL")
    assert connection.resolve_url(None) == "redis://localhost:6379/0"
    assert connection.DEFAULT_URL == "redis://localhost:6379/0"


def test_config_without_url_uses_redis_url_env(
    monkeypatch: pytest.MonkeyPatch, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    monkeypatch.setenv("REDIS_URL", server.url)
    config = cogworker.Config()
    assert config.redis_url == server.url  # what it reads is what it connects to
    try:
        config.redis().set("where", "env server")
        direct = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert direct.get("where") == "env server"
        finally:
            direct.close()
    finally:
        config.close()


def test_redis_url_tells_the_url_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://from-env:1234/2")
    assert cogworker.Config().redis_url == "redis://from-env:1234/2"
    assert cogworker.Config(redis_url="redis://given:1/0").redis_url == "redis://given:1/0"
    config = cogworker.Config(redis_url="redis://given:1/0")
    config.redis_url = None  # back to the environment's
    assert config.redis_url == "redis://from-env:1234/2"
    monkeypatch.setenv("REDIS_URL", "")
    assert cogworker.Config().redis_url == connection.DEFAULT_URL
    monkeypatch.delenv("REDIS_URL")
    assert cogworker.Config().redis_url == "redis://localhost:6379/0"
    assert cogworker.Config().redis_url == connection.resolve_url(None)


@pytest.mark.parametrize("bad", ["foo://nowhere", "localhost:6379"])
def test_an_invalid_redis_url_env_is_an_error_naming_it(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", bad)
    with pytest.raises(cogworker.ConfigError) as raised:
        cogworker.Config()
    assert str(raised.value) == (
        f"REDIS_URL must start with redis://, rediss://, unix:// or redis+sentinel://, got {bad!r}"
    )
    # an explicit URL doesn't read the environment at all
    assert cogworker.Config(redis_url="redis://given:1/0").redis_url == "redis://given:1/0"


def test_building_a_config_talks_to_no_redis(
    monkeypatch: pytest.MonkeyPatch, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    monkeypatch.setenv("REDIS_URL", server.url)
    observer = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        before = int(observer.info("stats")["total_connections_received"])
        configs = [cogworker.Config(), cogworker.Config(concurrency=3, queues=["a,2"])]
        assert all(config.redis_url == server.url for config in configs)
        assert int(observer.info("stats")["total_connections_received"]) == before
    finally:
        observer.close()


def test_changing_redis_url_switches_server(
    config: cogworker.Config, r: redis.Redis, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    first = config.redis()
    first.set("k", "shared")
    config.redis_url = server.url
    second = config.redis()
    assert second is not first
    second.set("k", "private")
    assert r.get("k") == "shared"
    assert second.get("k") == "private"


def test_pool_size_follows_concurrency(config: cogworker.Config) -> None:
    assert config.redis().connection_pool.max_connections == 15
    config.concurrency = 20
    assert config.redis().connection_pool.max_connections == 25
    assert config.redis().ping() is True


def test_connections_name_the_library_without_reading_its_metadata_each_time(
    config: cogworker.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py 8 would read its own package metadata for every connection it opens (about
    1 ms of CPU each); the client gives it the version read once, which CLIENT SETINFO sends
    as before (Redis 7.2 and up show it in CLIENT LIST)."""

    def read_metadata() -> str:
        raise AssertionError("the package metadata was read for a connection")

    monkeypatch.setattr(redis.utils, "get_lib_version", read_metadata)
    client = config.redis()
    assert client.ping() is True
    held = connection.dedicated(client)
    held.connect()  # type: ignore[no-untyped-call]
    held.disconnect()  # type: ignore[no-untyped-call]
    pooled = client.connection_pool.get_connection()
    client.connection_pool.release(pooled)
    for opened in (pooled, held):
        info = opened.driver_info  # type: ignore[attr-defined]
        assert (info.formatted_name, info.lib_version) == ("redis-py", redis.__version__)


# -- configure_server / configure_client ----------------------------------------------------


def test_configure_blocks_in_a_client_process(caplog: pytest.LogCaptureFixture) -> None:
    config = cogworker.Config()
    ran: list[str] = []

    def server_block(cfg: cogworker.Config) -> None:
        ran.append("server")

    def client_block(cfg: cogworker.Config) -> None:
        assert cfg is config
        ran.append("client")

    with caplog.at_level(logging.DEBUG, logger="cogworker"):
        assert config.configure_server(server_block) is server_block
        assert config.configure_client(client_block) is client_block
    assert ran == ["client"]
    assert any("configure_server skipped" in rec.getMessage() for rec in caplog.records)


def test_configure_blocks_in_a_worker_process(caplog: pytest.LogCaptureFixture) -> None:
    config = cogworker.Config()
    config.server = True
    ran: list[str] = []

    with caplog.at_level(logging.DEBUG, logger="cogworker"):

        @config.configure_server
        def server_block(cfg: cogworker.Config) -> None:
            cfg.concurrency = 3
            ran.append("server")

        @config.configure_client
        def client_block(cfg: cogworker.Config) -> None:
            ran.append("client")

    assert ran == ["server"]
    assert config.concurrency == 3
    assert callable(server_block) and callable(client_block)
    assert any("configure_client skipped" in rec.getMessage() for rec in caplog.records)


# -- YAML config file -----------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "cogworker.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_ruby_key_form_with_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_COG_CONCURRENCY", "7")
    monkeypatch.delenv("TEST_COG_UNSET", raising=False)
    path = write(
        tmp_path,
        ":concurrency: ${TEST_COG_CONCURRENCY}\n"
        ":fetch: ${TEST_COG_UNSET:-basic}\n"
        ":log_level: debug\n",
    )
    assert config_file.load(path) == {"concurrency": 7, "fetch": "basic", "log_level": "debug"}
    config = cogworker.Config()
    assert config_file.apply(config, path) == {}
    assert (config.concurrency, config.fetch, config.log_level) == (7, "basic", "DEBUG")


def test_yaml_plain_key_form_with_env_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_COG_CONCURRENCY", raising=False)
    monkeypatch.setenv("TEST_COG_EMPTY", "")
    path = write(
        tmp_path,
        "concurrency: ${TEST_COG_CONCURRENCY:-5}\n"
        "environment: ${TEST_COG_EMPTY:-staging}\n"
        "shutdown_timeout: 8\n",
    )
    config = cogworker.Config()
    config_file.apply(config, path)
    assert (config.concurrency, config.environment, config.shutdown_timeout) == (
        5,
        "staging",
        8.0,
    )


def test_yaml_env_variable_set_to_empty_without_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_COG_EMPTY", "")
    path = write(tmp_path, "tag: '${TEST_COG_EMPTY}'\nenvironment: x${TEST_COG_EMPTY}y\n")
    assert config_file.load(path) == {"tag": "", "environment": "xy"}


def test_yaml_queues_with_weights(tmp_path: Path) -> None:
    path = write(tmp_path, ":queues:\n  - critical,2\n  - default\n  - [low, 3]\n")
    config = cogworker.Config()
    config_file.apply(config, path)
    assert config.queues == ["critical", "critical", "default", "low", "low", "low"]


def test_yaml_unset_variable_without_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_COG_UNSET", raising=False)
    path = write(tmp_path, "concurrency: ${TEST_COG_UNSET}\n")
    with pytest.raises(cogworker.ConfigError, match="TEST_COG_UNSET"):
        config_file.load(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "concurrency: 4\nconcurency: 50\n",
            "unknown key 'concurency' (did you mean 'concurrency'?)",
        ),
        (":concurrency: 4\n:queue: [a]\n", "unknown key ':queue' (did you mean 'queues'?)"),
        ("job_package: [billing]\n", "unknown key 'job_package' (did you mean 'job_packages'?)"),
        (":colour: blue\n", "unknown key ':colour' (not a cogworker option)"),
        ("verbose: true\n", "unknown key 'verbose' (not a cogworker option)"),
    ],
    ids=["typo", "ruby-form", "new-option", "colour", "verbose"],
)
def test_yaml_unknown_key_is_an_error_naming_the_nearest_option(
    tmp_path: Path, text: str, expected: str
) -> None:
    """An unknown key is an error, as an unknown key of a periodic entry is (it used to be
    logged and left out, so a typo silently kept the default)."""
    path = write(tmp_path, text)
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.load(path)
    assert str(raised.value) == f"config file {path}: {expected}"
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError):
        config_file.apply(config, path)
    assert config.concurrency == 10  # nothing of the file was applied


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("concurrency: 4\nqueues: [a]\nconcurrency: 5\n", "key 'concurrency' given twice (line 3)"),
        (
            ":concurrency: 4\nconcurrency: 5\n",
            "':concurrency' and 'concurrency' both set concurrency",
        ),
        (
            "periodic:\n  - cron: '* * * * *'\n    job: A\n    job: B\n",
            "key 'job' given twice (line 4)",
        ),
    ],
    ids=["same-spelling", "both-spellings", "inside-an-entry"],
)
def test_yaml_repeated_key_is_an_error(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.load(path)
    assert str(raised.value) == f"config file {path}: {expected}"


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = write(
        tmp_path, "periodic:\n  - &every {cron: '* * * * *', job: A}\n  - <<: *every\n    job: B\n"
    )
    assert config_file.load(path) == {
        "periodic": [{"cron": "* * * * *", "job": "A"}, {"cron": "* * * * *", "job": "B"}]
    }


def test_yaml_bad_queue_weight_names_file_key_and_entry(tmp_path: Path) -> None:
    path = write(tmp_path, ":queues:\n  - critical,2\n  - default,0\n")
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.apply(config, path)
    assert str(raised.value) == (
        f"config file {path}: queues 'default,0': a queue's weight must be a positive "
        "integer, got '0'"
    )
    assert config.queues == ["default"]


def test_yaml_job_packages(tmp_path: Path) -> None:
    config = cogworker.Config()
    config_file.apply(config, write(tmp_path, "job_packages:\n  - billing\n  - app.jobs\n"))
    assert config.job_packages == ["billing", "app.jobs"]
    with pytest.raises(cogworker.ConfigError, match="job_packages"):
        config_file.apply(config, write(tmp_path, "job_packages: billing\n", "one.yml"))
    assert config.job_packages == ["billing", "app.jobs"]


def test_yaml_periodic_key_is_returned_not_applied(tmp_path: Path) -> None:
    path = write(tmp_path, ":concurrency: 2\n:periodic:\n  - ['*/5 * * * *', ReportJob]\n")
    config = cogworker.Config()
    extras = config_file.apply(config, path)
    assert extras == {"periodic": [["*/5 * * * *", "ReportJob"]]}
    assert config.concurrency == 2


def test_yaml_bad_value_names_file_and_option(tmp_path: Path) -> None:
    path = write(tmp_path, ":fetch: fast\n")
    config = cogworker.Config()
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.apply(config, path)
    message = str(raised.value)
    assert str(path) in message and "fetch" in message and "'fast'" in message
    assert config.fetch == "reliable"


def test_yaml_empty_file(tmp_path: Path) -> None:
    assert config_file.load(write(tmp_path, "")) == {}
    assert config_file.load(write(tmp_path, "# only a comment\n", "c.yml")) == {}


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_yaml_not_a_mapping(tmp_path: Path, text: str) -> None:
    with pytest.raises(cogworker.ConfigError, match="mapping"):
        config_file.load(write(tmp_path, text))


def test_yaml_invalid_syntax_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, ":concurrency: [1, 2\n:queues:\n  - a\n")
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.load(path)
    message = str(raised.value)
    assert "\n" not in message
    assert str(path) in message and "YAML" in message


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nope.yml"
    with pytest.raises(cogworker.ConfigError) as raised:
        config_file.load(path)
    message = str(raised.value)
    assert "\n" not in message
    assert str(path) in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_presence_shorter_than_three_heartbeats_is_refused_when_a_worker_boots() -> None:
    """Either option may be set first, so the pair is checked as a worker boots."""
    short = cogworker.Config(heartbeat_interval=2, presence_ttl=5)
    with pytest.raises(cogworker.ConfigError) as refused:
        short.check_liveness()
    assert str(refused.value) == (
        "presence_ttl (5 s) must be at least three heartbeats "
        "(3 x heartbeat_interval 2 s = 6 s)"
    )
    cogworker.Config(heartbeat_interval=1, presence_ttl=3).check_liveness()
    cogworker.Config().check_liveness()


# -- pinned options: the operator's settings outrank an app's ---------------------------------


def test_update_unpinned_leaves_what_the_operator_pinned() -> None:
    config = cogworker.Config(concurrency=3, queues=["a"])
    config.pin(["concurrency"])
    kept = config.update_unpinned({"concurrency": 8, "queues": ["b"], "tag": "web"})
    assert kept == ["concurrency"]
    assert (config.concurrency, config.queues, config.tag) == (3, ["b"], "web")
    with pytest.raises(cogworker.ConfigError, match="unknown option 'concurency'"):
        config.update_unpinned({"concurency": 2})
    with pytest.raises(cogworker.ConfigError, match="can't pin unknown option 'nope'"):
        config.pin(["nope"])
    with pytest.raises(cogworker.ConfigError, match="pinned is not an option"):
        config.pinned = frozenset()  # type: ignore[misc]


def test_a_config_file_pins_the_options_it_sets(tmp_path: Path) -> None:
    config = cogworker.Config()
    config_file.apply(config, write(tmp_path, "concurrency: 4\ntag: ops\n"))
    assert config.pinned == {"concurrency", "tag"}
