"""ARCHITECTURE.md names only what exists: every module, script and folder it cites is in the
tree, every ``module.attribute`` it cites can be imported, every Redis key it spells out is
one ``keys.py`` builds, and it stays under 150 lines."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from cogworker import keys

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "cogworker"
DOC = ROOT / "ARCHITECTURE.md"
FILE = re.compile(r"^[\w/]*\w\.(?:py|lua|toml)$")
FOLDER = re.compile(r"^[a-z_]+(?:/[a-z_]+)*/$")
DOTTED = re.compile(r"^([a-z_]+(?:\.[a-z_]+)*)\.([A-Za-z_]+)(?:\(.*\))?$")


def spans() -> list[str]:
    """The inline code spans, and the diagram's lines (fenced blocks) as spans of their own."""
    text = DOC.read_text()
    fenced = re.findall(r"^```\n(.*?)^```$", text, re.S | re.M)
    outside = re.sub(r"^```\n.*?^```$", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", outside) + [
        line for block in fenced for line in block.splitlines()
    ]


def words(span: str) -> list[str]:
    return [word.strip("(),") for word in span.split()]


def exists(path: str) -> bool:
    if "/" not in path.rstrip("/"):
        if path.endswith("/"):
            return (PACKAGE / path).is_dir()
        return any(PACKAGE.rglob(path)) or (ROOT / path).exists()
    return (PACKAGE / path).exists() or (ROOT / path).exists()


def test_it_is_under_200_lines() -> None:
    """Read in one sitting: the glossary, the map and one job's path."""
    assert len(DOC.read_text().splitlines()) < 200


def test_no_code_span_runs_over_a_line_end() -> None:
    """The checks below read spans line by line: one split across two lines is not read."""
    prose = re.sub(r"^```\n.*?^```$", "", DOC.read_text(), flags=re.S | re.M)
    assert [line for line in prose.splitlines() if line.count("`") % 2] == []


def test_every_module_script_and_folder_it_names_exists() -> None:
    named = {w for span in spans() for w in words(span) if FILE.match(w) or FOLDER.match(w)}
    assert {"worker/manager.py", "fetch/ack.lua"} <= named  # the diagram and the prose are read
    assert sorted(path for path in named if not exists(path)) == []


def test_every_module_attribute_it_names_imports() -> None:
    cited = [m.groups() for span in spans() if (m := DOTTED.match(span.strip()))]
    cited = [(module, name) for module, name in cited if not name.islower() or "_" in name]
    assert ("scripts", "Batch") in cited
    missing = []
    for module, name in cited:
        try:
            found = hasattr(importlib.import_module(f"cogworker.{module}"), name)
        except ImportError:
            found = False
        if not found:
            missing.append(f"{module}.{name}")
    assert missing == []


@pytest.mark.parametrize(
    "sample",
    [keys.queue("x"), keys.inprogress("x"), keys.workers("x"), keys.throughput(1)],
)
def test_the_key_prefixes_it_cites_are_the_ones_keys_builds(sample: str) -> None:
    cited = {
        word.split("<")[0]
        for span in spans()
        for word in words(span)
        if word.startswith("cogworker:")
    }
    built = {value for value in vars(keys).values() if isinstance(value, str)}
    assert sample.rsplit(":", 1)[0] + ":" in cited
    assert sorted(key for key in cited if key not in built) == []


def test_the_contrib_contract_covers_every_module_of_the_core() -> None:
    """A module added to the core is one the contract must hold too: the list in
    pyproject.toml names every top-level module and package of cogworker but contrib."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [
        entry
        for entry in contracts["contracts"]
        if entry.get("forbidden_modules") == ["cogworker.contrib"]
    ]
    core = {
        f"cogworker.{path.stem}"
        for path in PACKAGE.iterdir()
        if path.name not in ("contrib", "__init__.py", "__main__.py", "__pycache__")
        and ((path.suffix == ".py") or (path / "__init__.py").exists())
    }
    assert set(contract["source_modules"]) == core
