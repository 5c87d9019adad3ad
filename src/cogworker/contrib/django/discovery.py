"""The worker's jobs under Django: every installed app's ``jobs`` module.

The rule of Django's admin autodiscovery (``autodiscover_modules``): an app with a ``jobs``
submodule has it imported, one without is skipped, and an error raised while importing one is
an error of the worker's boot (naming the module). A payload may then name a module inside
those apps, or inside ``job_packages``; ``-r MODULE`` imports one more module (outside the
installed apps, say) and adds its package.
"""

from __future__ import annotations

import importlib

from django.apps import apps  # type: ignore[import-untyped]
from django.utils.module_loading import module_has_submodule  # type: ignore[import-untyped]

from cogworker import registry
from cogworker.registry import App, AppLoadError, describe_error

JOBS_MODULE = "jobs"


def autodiscover() -> list[str]:
    """Import the ``jobs`` module of every installed app; the names of the apps that have one."""
    found = []
    for app_config in apps.get_app_configs():
        if not module_has_submodule(app_config.module, JOBS_MODULE):
            continue
        name = f"{app_config.name}.{JOBS_MODULE}"
        try:
            importlib.import_module(name)
        except Exception as error:
            raise AppLoadError(f"loading {name} failed: {describe_error(error)}") from error
        found.append(app_config.name)
    return found


def load_jobs(extra_module: str | None) -> App:
    """The installed apps' jobs modules, then ``extra_module`` (``-r``) if given."""
    before = _job_classes()
    packages = set(autodiscover())
    target = "the jobs modules of INSTALLED_APPS"
    if extra_module:
        packages |= registry.load_app(extra_module).packages
        target += f" and {extra_module}"
    return App(target, frozenset(packages), len(_job_classes() - before))


def _job_classes() -> set[type]:
    return {registry.resolve(name) for name in registry.known_names()}
