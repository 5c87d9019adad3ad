"""The job payload on the wire: Ruby-compatible JSON, digests, normalisation, retry budget."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from runtime_support import RUBY_VECTORS

import cogworker
from cogworker import keys, wire

VECTORS_FILE = RUBY_VECTORS
VECTORS: list[dict[str, str]] = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))["vectors"]
JID = re.compile(r"\A[0-9a-f]{24}\Z")


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# -- the Ruby vectors -----------------------------------------------------------------------


def test_vector_file_is_not_empty() -> None:
    assert len(VECTORS) >= 13


@pytest.mark.parametrize("vector", VECTORS, ids=[v["args_input"] for v in VECTORS])
def test_vector_encodes_byte_identically(vector: dict[str, str]) -> None:
    args = json.loads(vector["args_input"])
    encoded = wire.dumps(args)
    assert encoded == vector["args_json_ruby"]
    assert encoded.encode("utf-8") == vector["args_json_ruby"].encode("utf-8")


@pytest.mark.parametrize("vector", VECTORS, ids=[v["args_input"] for v in VECTORS])
def test_vector_unique_digest_and_key(vector: dict[str, str]) -> None:
    args = json.loads(vector["args_input"])
    digest = sha1("AccJob|default|" + wire.dumps(args))
    assert digest == vector["unique_digest"]
    assert keys.unique(digest) == vector["unique_key"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["args_input"] for v in VECTORS])
def test_vector_pjid(vector: dict[str, str]) -> None:
    args = json.loads(vector["args_input"])
    assert sha1("*/5 * * * *|ReportJob|" + wire.dumps(args)) == vector["pjid"]


def test_vector_digests_are_distinct() -> None:
    assert len({v["unique_digest"] for v in VECTORS}) == len(VECTORS)
    assert len({v["pjid"] for v in VECTORS}) == len(VECTORS)


# -- encoding details -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ruby"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (100.0, "100.0"),
        (0.1, "0.1"),
        (0.0001, "0.0001"),
        (1e-5, "1.0e-05"),
        (2.5e-8, "2.5e-08"),
        (123456789012345.67, "123456789012345.67"),
        (1e15, "1.0e+15"),
        (1.5e15, "1.5e+15"),
        (1e16, "1.0e+16"),
        (1e20, "1.0e+20"),
        (-1e20, "-1.0e+20"),
        (-1e-5, "-1.0e-05"),
        (1.5e300, "1.5e+300"),
        (123456789012345680000.0, "1.2345678901234568e+20"),
        (5e-324, "5.0e-324"),
    ],
)
def test_ruby_float_layout(value: float, ruby: str) -> None:
    assert wire.ruby_float(value) == ruby
    assert wire.dumps([value]) == f"[{ruby}]"
    assert float(ruby) == value  # the layout still round-trips


def test_floats_nested_in_objects_use_ruby_layout() -> None:
    value = {"a": [1e20, {"b": 1e-7}], "c": (2e16,), "d": 1}
    assert wire.dumps(value) == '{"a":[1.0e+20,{"b":1.0e-07}],"c":[2.0e+16],"d":1}'


def test_dumps_is_compact_raw_utf8_and_keeps_key_order() -> None:
    value = {"z": "zwölf/😀", "a": [1, True, None], "m": {"y": 1, "x": 2}}
    assert wire.dumps(value) == '{"z":"zwölf/😀","a":[1,true,null],"m":{"y":1,"x":2}}'


def test_dumps_escapes_like_ruby_in_the_slow_path_too() -> None:
    # a big float forces the slow path; strings must come out as in the fast path
    text = 'q"b\\s\t\n\x01é'
    fast = wire.dumps([text])
    assert fast == '["q\\"b\\\\s\\t\\n\\u0001é"]'
    assert wire.dumps([text, 1e20]) == fast[:-1] + ",1.0e+20]"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_dumps_refuses_non_finite_floats(bad: float) -> None:
    with pytest.raises(ValueError):
        wire.dumps([bad])
    with pytest.raises(ValueError):
        wire.dumps([1e20, bad])  # slow path


def test_loads_round_trip() -> None:
    value = {"class": "X", "args": [1, 1.5, "é", [1e20]]}
    assert wire.loads(wire.dumps(value)) == value
    assert wire.loads(wire.dumps(value).encode("utf-8")) == value


# -- jid ------------------------------------------------------------------------------------


def test_new_jid_format_and_uniqueness() -> None:
    jids = {wire.new_jid() for _ in range(2000)}
    assert len(jids) == 2000
    assert all(JID.match(jid) for jid in jids)


# -- normalize ------------------------------------------------------------------------------


def test_normalize_fills_every_default() -> None:
    before = time.time()
    job = wire.normalize({"class": "SomeJob"})
    after = time.time()
    assert set(job) == {"class", "jid", "queue", "args", "retry", "created_at"}
    assert job["class"] == "SomeJob"
    assert JID.match(job["jid"])
    assert job["queue"] == "default"
    assert job["args"] == []
    assert job["retry"] is True
    assert isinstance(job["created_at"], float)
    assert before <= job["created_at"] <= after


def test_normalize_keeps_given_values_and_unknown_keys() -> None:
    item = {
        "class": "SomeJob",
        "jid": "0123456789abcdef01234567",
        "queue": "low",
        "args": [1, "a"],
        "retry": 3,
        "created_at": 12.5,
        "tags": ["x"],
        "lock_run": "while_executing",
    }
    job = wire.normalize(item)
    assert job == item
    assert job is not item


def test_normalize_does_not_mutate_its_input() -> None:
    item: dict[str, Any] = {"class": "SomeJob"}
    wire.normalize(item)
    assert item == {"class": "SomeJob"}


def test_normalize_replaces_null_fields_except_retry() -> None:
    job = wire.normalize(
        {
            "class": "SomeJob",
            "jid": None,
            "queue": None,
            "args": None,
            "created_at": None,
            "retry": None,
        }
    )
    assert JID.match(job["jid"])
    assert job["queue"] == "default"
    assert job["args"] == []
    assert isinstance(job["created_at"], float)
    assert "retry" in job and job["retry"] is None  # a present null stays null


def test_normalize_keeps_retry_false() -> None:
    assert wire.normalize({"class": "SomeJob", "retry": False})["retry"] is False


def test_normalize_stringifies_keys_and_class() -> None:
    class Named(cogworker.Job, queue="wire"):
        name = "Wire::NamedJob"

        def perform(self) -> None:
            pass

    job = wire.normalize({"class": Named, 7: "seven"})
    assert job["class"] == "Wire::NamedJob"
    assert job["7"] == "seven"
    assert 7 not in job
    assert wire.normalize({"class": 12})["class"] == "12"


def test_normalize_needs_a_class() -> None:
    with pytest.raises(ValueError, match="class"):
        wire.normalize({"args": [1]})
    with pytest.raises(ValueError, match="class"):
        wire.normalize({"class": None})


# -- max_retries ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ({"retry": True}, 25),
        ({"retry": None}, 25),
        ({}, 25),
        ({"retry": False}, 0),
        ({"retry": 0}, 0),
        ({"retry": 3}, 3),
        ({"retry": 100}, 100),
        ({"retry": 4.9}, 4),
        ({"retry": 2.0}, 2),
        ({"retry": "4"}, 4),
        ({"retry": "lots"}, 0),
        ({"retry": ""}, 0),
        ({"retry": {}}, 0),
        ({"retry": {"n": 3}}, 0),
        ({"retry": []}, 0),
        ({"retry": [3]}, 0),
    ],
    ids=repr,
)
def test_max_retries(job: dict[str, Any], expected: int) -> None:
    result = wire.max_retries(job)
    assert result == expected
    assert type(result) is int


def test_default_retry_budget_constant() -> None:
    assert wire.DEFAULT_MAX_RETRY_ATTEMPTS == 25


# -- check_args -----------------------------------------------------------------------------


def test_check_args_accepts_json_values_and_returns_a_list() -> None:
    args = ("s", 1, -(2**70), 1.5, True, False, None, [1, [2]], (3, 4), {"k": {"n": [1.0]}})
    assert wire.check_args(args, "J") == list(args)
    assert wire.check_args(iter([1, 2]), "J") == [1, 2]


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (datetime(2024, 1, 1, tzinfo=UTC), "argument 2"),
        ({1, 2}, "argument 2"),
        (object(), "argument 2"),
        (math.nan, "argument 2"),
        (math.inf, "argument 2"),
        (-math.inf, "argument 2"),
        ({1: "a"}, "argument 2"),
        (b"bytes", "argument 2"),
        ([1, {2}], "argument 2[1]"),
        ({"k": math.nan}, "argument 2['k']"),
    ],
    ids=repr,
)
def test_check_args_names_the_bad_argument(bad: Any, where: str) -> None:
    with pytest.raises(TypeError) as raised:
        wire.check_args(["ok", 1, bad], "Some::Job")
    message = str(raised.value)
    assert "Some::Job" in message
    assert where in message
