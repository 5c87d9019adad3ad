"""Every Python block of the README runs, each in a fresh interpreter, against a real Redis.

A block is one fenced ``python`` block. The only way to leave one out is an HTML comment on the
line before its fence, ``<!-- not run: <why> -->``, for a block that needs a service the tests
can't start; the README then says why, and this file checks that every such comment gives a
reason. Each block runs in an empty working directory with ``REDIS_URL`` pointing at the test
session's server, flushed before the block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.*?) -->$")
BLOCK_TIMEOUT = 60


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None  # the reason given, if the block is marked as not run

    @property
    def label(self) -> str:
        return f"README.md:{self.line}"


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        marker = NOT_RUN.match(lines[index - 1].strip()) if index > 0 else None
        blocks.append(
            Block(
                line=index + 1,
                language=opening.group(1),
                code="\n".join(lines[index + 1 : end]) + "\n",
                not_run=marker.group(1).strip() if marker else None,
            )
        )
        index = end + 1
    return blocks


PYTHON_BLOCKS = [block for block in readme_blocks(README.read_text()) if block.language == "python"]
RUN = [block for block in PYTHON_BLOCKS if block.not_run is None]


def test_the_readme_has_python_blocks_and_every_left_out_block_says_why() -> None:
    assert len(RUN) >= 5, "the README's examples went missing"
    for block in PYTHON_BLOCKS:
        if block.not_run is not None:
            assert len(block.not_run) > 10, f"{block.label}: say why the block is not run"


def test_the_block_parser_finds_fences_and_markers() -> None:
    text = "x\n```python\nprint(1)\n```\n<!-- not run: needs a mail server -->\n```python\n2\n```\n"
    found = readme_blocks(text)
    assert [(b.line, b.code, b.not_run) for b in found] == [
        (2, "print(1)\n", None),
        (6, "2\n", "needs a mail server"),
    ]


@pytest.mark.parametrize("block", RUN, ids=[block.label for block in RUN])
def test_readme_block_runs(block: Block, r: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    environment = {**os.environ, "REDIS_URL": redis_url, "PYTHONDONTWRITEBYTECODE": "1"}
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    assert result.returncode == 0, (
        f"{block.label} failed (exit {result.returncode}):\n{block.code}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
