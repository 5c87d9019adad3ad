"""Django integration: ``INSTALLED_APPS += ["cogworker.contrib.django"]``.

* settings: ``COGWORKER = {"redis_url": ..., "concurrency": 5, "queues": ["default"]}`` (keys
  are ``cogworker.Config`` option names, plus ``after_commit`` and ``database``; see ``conf``)
  become the process's default config when Django starts (``config()`` returns it);
* jobs: the worker imports every installed app's ``jobs`` module (``discovery``);
* ``python manage.py cogworker run|swarm|web`` with the ``cogworker`` command's flags, which
  win over the settings (``command``);
* enqueue after commit: a push inside ``transaction.atomic()`` reaches Redis when the
  transaction commits, never on a rollback; ``Job.set(after_commit=False)`` pushes at once
  (``transaction``);
* database connections closed before and after each job, as around a request (``connections``);
* the dashboard under the admin, for staff: ``path("admin/cogworker/", dashboard_urls())``,
  before the admin's own line in urls.py (``dashboard``).
"""

from __future__ import annotations

from typing import Any

from cogworker.contrib.django.apps import config
from cogworker.contrib.django.transaction import AFTER_COMMIT


def dashboard_urls(**options: Any) -> Any:
    """The dashboard's URL patterns, for ``path("admin/cogworker/", dashboard_urls())``
    (``cogworker.contrib.django.dashboard.dashboard_urls``: ``check=``, ``settings=``,
    ``namespace=``). Imported on use: the dashboard needs the web extra."""
    from cogworker.contrib.django.dashboard import dashboard_urls as patterns

    return patterns(**options)


__all__ = ["AFTER_COMMIT", "config", "dashboard_urls"]
