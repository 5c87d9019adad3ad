"""The ``acyclic_modules`` import-linter contract (tools/import_cycles.py) on tiny packages
written to a temporary directory: it is broken by a cycle however the import is written (at
the top, inside a function, under TYPE_CHECKING), names the modules, and is kept otherwise."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_contracts() -> ModuleType:
    path = ROOT / "tools" / "import_cycles.py"
    spec = importlib.util.spec_from_file_location("import_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import_cycles = _load_contracts()


def write_package(root: Path, name: str, modules: dict[str, str]) -> None:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module, text in modules.items():
        (package / f"{module}.py").write_text(textwrap.dedent(text))


def check(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(root))
    graph = grimp.build_graph(name, cache_dir=None)
    contract = import_cycles.AcyclicModulesContract(
        "No import cycles", {}, {"packages": [name]}
    )
    return contract.check(graph, verbose=False)


CYCLE = {
    "a": "from planted import b\n",
    "b": "def later():\n    from planted import c\n",
    "c": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from planted import a\n"
    ),
    "d": "from planted import a\n",  # imports into the cycle, is not part of it
}


def test_a_planted_cycle_breaks_the_contract_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(tmp_path, "planted", CYCLE)
    result = check(tmp_path, "planted", monkeypatch)
    assert result.kept is False  # type: ignore[attr-defined]
    (cycle,) = result.metadata["cycles"]  # type: ignore[attr-defined]
    assert cycle["modules"] == ["planted.a", "planted.b", "planted.c"]
    assert [(importer, imported) for importer, imported, _ in cycle["steps"]] == [
        ("planted.a", "planted.b"),
        ("planted.b", "planted.c"),
        ("planted.c", "planted.a"),
    ]
    assert [lines for _, _, lines in cycle["steps"]] == ["1", "2", "3"]


def test_two_separate_cycles_are_both_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(
        tmp_path,
        "twice",
        {
            "a": "from twice import b\n",
            "b": "from twice import a\n",
            "c": "from twice import d\n",
            "d": "import twice.c\n",
        },
    )
    result = check(tmp_path, "twice", monkeypatch)
    groups = [cycle["modules"] for cycle in result.metadata["cycles"]]  # type: ignore[attr-defined]
    assert groups == [["twice.a", "twice.b"], ["twice.c", "twice.d"]]


def test_a_layered_package_keeps_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_package(
        tmp_path,
        "layered",
        {
            "low": "X = 1\n",
            "middle": "from layered import low\n",
            "high": "from layered import low, middle\n",
        },
    )
    result = check(tmp_path, "layered", monkeypatch)
    assert result.kept is True  # type: ignore[attr-defined]
    assert result.metadata["cycles"] == []  # type: ignore[attr-defined]


def test_lint_imports_fails_on_a_cycle_through_the_configured_contract_type(
    tmp_path: Path,
) -> None:
    """The type as ``contract_types`` names it in pyproject.toml, run by ``lint-imports``."""
    write_package(tmp_path, "planted", CYCLE)
    settings = tmp_path / "contracts.toml"
    settings.write_text(
        textwrap.dedent(
            """\
            [tool.importlinter]
            root_package = "planted"
            contract_types = ["acyclic_modules: tools.import_cycles.AcyclicModulesContract"]

            [[tool.importlinter.contracts]]
            name = "No import cycles"
            type = "acyclic_modules"
            packages = ["planted"]
            """
        )
    )
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), str(settings), "--no-cache"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "deprecated" not in result.stderr
    assert "No import cycles BROKEN" in result.stdout
    assert "planted.a, planted.b, planted.c" in result.stdout
    assert "planted.b -> planted.c (l. 2)" in result.stdout
