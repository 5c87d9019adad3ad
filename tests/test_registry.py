"""Job-class lookup: a payload never makes a worker import a module outside the application.

A class that is registered resolves; a dotted path is imported only when its module lies
inside the app module's packages (``-r``) or inside ``job_packages``. Anything else is an
unknown class (a NameError) and nothing is imported: the modules here write a file when
imported, so an import that should not happen shows.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import Worker, cogworker_env, release, zset_entries

import cogworker
from cogworker import keys, registry


def module_source(job: str, marker: Path, *, raises: bool = False) -> str:
    """A module that leaves ``marker`` behind when imported and defines the job ``job``."""
    failure = 'raise RuntimeError("broken at import")\n' if raises else ""
    return textwrap.dedent(
        f"""
        from pathlib import Path

        import cogworker

        Path({str(marker)!r}).write_text("imported")
        {failure}

        class {job}(cogworker.Job):
            def perform(self, key):
                cogworker.default_config().redis().set(key, "ran")
        """
    )


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working directory on sys.path, and a registry that forgets what it learnt."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    monkeypatch.setattr(registry, "_import_roots", frozenset())
    before = set(sys.modules)
    try:
        yield tmp_path
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]


# -- in-process: the rule ------------------------------------------------------------------------


def test_a_dotted_path_outside_the_application_imports_nothing(isolated: Path) -> None:
    marker = isolated / "outside.imported"
    write(isolated / "outside.py", module_source("OutsideJob", marker))
    registry.allow_imports("app")
    with pytest.raises(registry.UnknownJobError, match=r"'outside\.OutsideJob'"):
        registry.resolve("outside.OutsideJob")
    assert not marker.exists()
    assert "outside" not in sys.modules
    assert issubclass(registry.UnknownJobError, NameError)


def test_a_dotted_path_inside_an_allowed_package_is_imported(isolated: Path) -> None:
    marker = isolated / "lazy.imported"
    write(isolated / "app" / "__init__.py")
    write(isolated / "app" / "deep" / "__init__.py")
    write(isolated / "app" / "deep" / "lazy.py", module_source("LazyJob", marker))
    registry.allow_imports("app")
    job_class = registry.resolve("app.deep.lazy.LazyJob")
    assert job_class.__name__ == "LazyJob"
    assert marker.read_text() == "imported"


def test_a_package_is_matched_by_whole_name_not_by_prefix(isolated: Path) -> None:
    marker = isolated / "appendix.imported"
    write(isolated / "appendix.py", module_source("AppendixJob", marker))
    registry.allow_imports("app")
    with pytest.raises(registry.UnknownJobError):
        registry.resolve("appendix.AppendixJob")
    assert not marker.exists()
    assert not registry.importable("appendix")
    assert registry.importable("app") and registry.importable("app.jobs")


def test_a_registered_class_resolves_without_any_allowed_package(isolated: Path) -> None:
    class RegisteredJob(cogworker.Job):
        name = "Registry::Registered"

        def perform(self) -> None:
            pass

    assert registry._import_roots == frozenset()
    assert registry.resolve("Registry::Registered") is RegisteredJob
    dotted = f"{RegisteredJob.__module__}.{RegisteredJob.__qualname__}"
    assert registry.resolve(dotted) is RegisteredJob


@pytest.mark.parametrize("name", ["Admin::app.Job", "app..Job", ".app.Job", "app.-x.Job"])
def test_names_that_are_not_module_paths_import_nothing(isolated: Path, name: str) -> None:
    registry.allow_imports("app")
    with pytest.raises(registry.UnknownJobError):
        registry.resolve(name)
    assert "app" not in sys.modules


def test_a_missing_module_inside_the_application_is_an_unknown_class(isolated: Path) -> None:
    write(isolated / "app" / "__init__.py")
    registry.allow_imports("app")
    with pytest.raises(registry.UnknownJobError, match="no job is registered"):
        registry.resolve("app.missing.Job")


def test_a_broken_module_inside_the_application_says_why(isolated: Path) -> None:
    marker = isolated / "broken.imported"
    write(isolated / "app" / "__init__.py")
    write(isolated / "app" / "broken.py", module_source("BrokenJob", marker, raises=True))
    write(isolated / "app" / "needs.py", "import no_such_dependency_here\n")
    registry.allow_imports("app")
    with pytest.raises(registry.UnknownJobError) as raised:
        registry.resolve("app.broken.BrokenJob")
    assert "importing app.broken raised RuntimeError: broken at import" in str(raised.value)
    with pytest.raises(registry.UnknownJobError) as missing_dependency:
        registry.resolve("app.needs.Job")
    assert "ModuleNotFoundError" in str(missing_dependency.value)
    assert "no_such_dependency_here" in str(missing_dependency.value)


# -- the app module's packages ------------------------------------------------------------------


def test_load_app_names_the_packages_a_payload_may_import_from(isolated: Path) -> None:
    jobs = "import cogworker\n\nclass AJob(cogworker.Job):\n    def perform(self): pass\n"
    write(isolated / "shop" / "__init__.py")
    write(isolated / "shop" / "jobs.py", jobs)
    write(isolated / "single.py", jobs)
    write(isolated / "nested" / "tasks.py", jobs)
    write(isolated / "pkg" / "__init__.py", jobs)
    write(isolated / "nothing.py", "x = 1\n")

    dotted = registry.load_app("shop.jobs")
    assert (dotted.packages, dotted.job_classes) == (frozenset({"shop"}), 1)
    assert registry.load_app("single.py").packages == frozenset({"single"})
    assert registry.load_app("nested/tasks.py").packages == frozenset({"nested.tasks", "tasks"})
    assert registry.load_app("pkg").packages == frozenset({"pkg"})
    empty = registry.load_app("nothing")
    assert (empty.packages, empty.job_classes) == (frozenset({"nothing"}), 0)
    assert registry._import_roots == frozenset()  # loading allows nothing by itself


# -- a real worker --------------------------------------------------------------------------------


def test_a_worker_imports_only_modules_of_its_app_and_job_packages(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    markers = {name: tmp_path / f"{name}.imported" for name in ("lazy", "invoices", "outside")}
    write(tmp_path / "shop" / "__init__.py")
    write(tmp_path / "shop" / "jobs.py", "import cogworker\n")
    write(tmp_path / "shop" / "lazy.py", module_source("LazyJob", markers["lazy"]))
    write(tmp_path / "billing" / "__init__.py")
    write(
        tmp_path / "billing" / "invoices.py",
        module_source("InvoiceJob", markers["invoices"]),
    )
    write(tmp_path / "outside.py", module_source("OutsideJob", markers["outside"]))
    write(tmp_path / "worker.yml", "poll_interval: 0.2\njob_packages: [billing]\n")
    worker = Worker(
        ["run", "-r", "shop.jobs", "-C", "worker.yml"],
        tmp_path,
        cogworker_env(redis_url),
        tmp_path / "worker.out",
    )
    settings = cogworker.Config(redis_url=redis_url)
    try:
        worker.identity(r)
        client = cogworker.Client(settings)
        for job_class, key in [
            ("shop.lazy.LazyJob", "test:lazy"),
            ("billing.invoices.InvoiceJob", "test:invoices"),
            ("outside.OutsideJob", "test:outside"),
        ]:
            client.push({"class": job_class, "args": [key], "retry": False})
        wait_for(lambda: r.get("test:lazy") == "ran" and r.get("test:invoices") == "ran")
        dead = wait_for(lambda: zset_entries(r, keys.DEAD), timeout=15)
        assert worker.stop() == 0
    finally:
        worker.kill()
        release(settings)
        print(worker.output())

    [(entry, _score)] = dead
    assert entry["class"] == "outside.OutsideJob"
    assert entry["error_class"] == "NameError"
    assert "unknown job class 'outside.OutsideJob'" in entry["error_message"]
    assert r.get("test:outside") is None
    assert not markers["outside"].exists()  # never imported
    assert markers["lazy"].exists() and markers["invoices"].exists()
    assert "registered no job class" in worker.output()  # shop.jobs defines none itself
