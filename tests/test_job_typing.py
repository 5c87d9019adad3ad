"""mypy --strict checks enqueue arguments against ``perform`` / the decorated function."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HEADER = """\
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import cogworker


class GreetingJob(cogworker.Job, queue="critical", retry=5):
    name = "TypingGreetingJob"

    def perform(self, name: str, times: int) -> None:
        pass


@cogworker.job(queue="low", retry=5)
def send_receipt(order_id: int) -> None:
    pass


client = cogworker.Client()
"""

GOOD = (
    HEADER
    + """

def enqueue_everything() -> list[str | None]:
    jids: list[str | None] = [
        GreetingJob.perform_async("Ada", 3),
        GreetingJob.perform_in(5, "Ada", 3),
        GreetingJob.perform_in(timedelta(minutes=1), "Ada", 3),
        GreetingJob.perform_at(datetime.now(timezone.utc), "Ada", 3),
        GreetingJob.perform_at(1900000000.0, "Ada", 3),
        GreetingJob.set(queue="low").perform_async("Ada", 3),
        GreetingJob.set(queue="low", retry=False).perform_in(5.5, "Ada", 3),
        send_receipt.perform_async(42),
        send_receipt.perform_in(10, 42),
        send_receipt.set(queue="other").perform_async(42),
        send_receipt.set(queue="other").perform_at(1900000000, 42),
        client.enqueue(GreetingJob, "Ada", 3),
        client.enqueue_in(5, GreetingJob, "Ada", 3),
    ]
    jids.extend(GreetingJob.perform_bulk([["Ada", 3], ["Bob", 4]]))
    send_receipt(42)
    return jids
"""
)

# (a call that mypy must reject, a text its one error message on that line must contain)
WRONG_CALLS: list[tuple[str, str]] = [
    (
        "GreetingJob.perform_async(1, 3)",
        'Argument 1 to "perform_async" of "Job" has incompatible type "int"; expected "str"',
    ),
    (
        'GreetingJob.perform_async("Ada", "3")',
        'Argument 2 to "perform_async" of "Job" has incompatible type "str"; expected "int"',
    ),
    ('GreetingJob.perform_async("Ada")', 'Missing positional argument "times"'),
    ('GreetingJob.perform_async("Ada", 3, 4)', "Too many arguments"),
    ("GreetingJob.perform_in(5, 1, 3)", 'has incompatible type "int"; expected "str"'),
    (
        'GreetingJob.perform_at(1900000000.0, "Ada", None)',
        'has incompatible type "None"; expected "int"',
    ),
    (
        'GreetingJob.set(queue="low").perform_async(1, 3)',
        'Argument 1 to "perform_async" of "Enqueuer" has incompatible type "int"; expected "str"',
    ),
    (
        'GreetingJob.set(queue="low").perform_async("Ada", [3])',
        'Argument 2 to "perform_async" of "Enqueuer" has incompatible type "list[int]"; '
        'expected "int"',
    ),
    (
        'send_receipt.perform_async("42")',
        'Argument 1 to "perform_async" of "FunctionJob" has incompatible type "str"; '
        'expected "int"',
    ),
    ("send_receipt.perform_async()", 'Missing positional argument "order_id"'),
    ('send_receipt.perform_in(10, "42")', 'has incompatible type "str"; expected "int"'),
    (
        'send_receipt.set(queue="x").perform_async("42")',
        'Argument 1 to "perform_async" of "Enqueuer" has incompatible type "str"; expected "int"',
    ),
    (
        'send_receipt.set(queue="x").perform_async(4.2)',
        'Argument 1 to "perform_async" of "Enqueuer" has incompatible type "float"; expected "int"',
    ),
    ("client.enqueue(GreetingJob, 1, 3)", 'has incompatible type "int"; expected "str"'),
    (
        'jid: str = GreetingJob.perform_async("Ada", 3)',
        'Incompatible types in assignment (expression has type "str | None", '
        'variable has type "str")',
    ),
]

BAD = (
    HEADER
    + "\n\ndef wrong_types() -> None:\n"
    + "".join(f"    {call}\n" for call, _ in WRONG_CALLS)
)

ERROR_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str]]]:
    """Run mypy --strict once over both modules; errors per file as (line, message)."""
    directory = tmp_path_factory.mktemp("typing")
    (directory / "good_usage.py").write_text(GOOD, encoding="utf-8")
    (directory / "bad_usage.py").write_text(BAD, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--no-error-summary",
            "--show-error-codes",
            "--no-pretty",
            "--no-color-output",
            "--cache-dir",
            str(directory / ".mypy_cache"),
            "good_usage.py",
            "bad_usage.py",
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    errors: dict[str, list[tuple[int, str]]] = {"good_usage.py": [], "bad_usage.py": []}
    for line in result.stdout.splitlines():
        match = ERROR_LINE.match(line)
        if match:
            errors[Path(match["file"]).name].append((int(match["line"]), match["message"]))
        else:
            assert ": note: " in line, f"unexpected mypy output: {line!r}"
    return errors


def expected_errors() -> list[tuple[int, str]]:
    """(line number in BAD, expected message text) for every wrong call."""
    numbers = {line.strip(): number for number, line in enumerate(BAD.splitlines(), start=1)}
    return [(numbers[call], text) for call, text in WRONG_CALLS]


def test_correct_usage_passes(mypy_output: dict[str, list[tuple[int, str]]]) -> None:
    assert mypy_output["good_usage.py"] == []


def test_every_wrong_call_is_reported(mypy_output: dict[str, list[tuple[int, str]]]) -> None:
    errors = mypy_output["bad_usage.py"]
    expected = expected_errors()
    assert len(expected) == len(WRONG_CALLS) == 15
    for line, text in expected:
        on_line = [message for number, message in errors if number == line]
        assert len(on_line) == 1, f"line {line}: expected one error with {text!r}, got {on_line}"
        assert text in on_line[0], f"line {line}: {on_line[0]!r} lacks {text!r}"


def test_no_error_outside_the_marked_lines(
    mypy_output: dict[str, list[tuple[int, str]]],
) -> None:
    marked = {line for line, _ in expected_errors()}
    assert [error for error in mypy_output["bad_usage.py"] if error[0] not in marked] == []
