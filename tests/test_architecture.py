"""ARCHITECTURE.md names only what exists: every module, script and folder it cites is in the
tree, every ``module.attribute`` it cites can be imported, every Redis key it spells out is
one ``keys.py`` builds, and it stays under 200 lines. And what it claims of the code holds:
each fate script has one writer (a fetch strategy), and no module outside ``fetch/`` asks
which fetch it holds."""

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


def test_it_is_under_240_lines() -> None:
    """Read in one sitting: the glossary, the map, one job's path and who writes its fate."""
    assert len(DOC.read_text().splitlines()) < 240


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


# -- what the document claims about the code ----------------------------------------------------

# the scripts that write the fate of a job this process handed out
FATE_SCRIPTS = {"ack", "give_back", "file_instead", "file_once", "turnover"}
STRATEGIES = {"fetch/reliable.py", "fetch/basic.py"}
LOAD = r'^(\w+) = scripts\.load\(__file__, "(\w+)"\)'


def python_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_a_fate_script_is_loaded_and_called_only_by_a_fetch_strategy() -> None:
    """One writer per fate: each fate script is loaded by a strategy module, and no other
    module loads it, or imports the constant it is held in."""
    loaders: dict[str, set[str]] = {}
    held_in: dict[str, set[str]] = {}  # constant name -> the scripts it holds
    for path in python_modules():
        text = path.read_text()
        for constant, name in re.findall(LOAD, text, re.M):
            loaders.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
            held_in.setdefault(constant, set()).add(name)
    assert {name: loaders.get(name) for name in FATE_SCRIPTS} == {
        name: loaders[name] & STRATEGIES for name in FATE_SCRIPTS
    }
    fate_constants = {c for c, names in held_in.items() if names & FATE_SCRIPTS}
    importers = {
        str(path.relative_to(PACKAGE))
        for path in python_modules()
        if re.search(
            r"from cogworker\.fetch\.(?:reliable|basic) import [^\n]*\b(?:"
            + "|".join(sorted(fate_constants))
            + r")\b",
            path.read_text(),
        )
    }
    assert importers == set()


def test_no_module_outside_fetch_asks_which_fetch_it_holds() -> None:
    """What differs between the strategies is said by the protocol (``keeps_in_progress``,
    ``takes_in_turnover``, ``settle_and_take`` returning None), never by a type or mode test."""
    asking = re.compile(
        r"isinstance\([^)]*(?:ReliableFetch|BasicFetch)|\bconfig\.fetch ==|\.mode == \"|"
        r"import (?:ReliableFetch|BasicFetch)"
    )
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in python_modules()
        if "fetch" not in path.relative_to(PACKAGE).parts[:1]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asking.search(line)
    ]
    assert found == []
