"""``manage.py cogworker``: see ``cogworker.contrib.django.command``.

The arguments go to the click group untouched (Django's ``--settings`` / ``--pythonpath``,
which Django has applied already, taken out). ``call_command("cogworker", "run", "-c", "2")``
works too, with the flags after the command's name (argparse reads the first word).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser  # type: ignore[import-untyped]

from cogworker.contrib.django.command import main

# applied by Django before any command runs; the cogworker flags never see them
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def _without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in _DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


class Command(BaseCommand):  # type: ignore[misc]
    help = "cogworker run | swarm | web, with the cogworker command's flags (see --help)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def run_from_argv(self, argv: list[str]) -> None:
        # the cogworker flags are click's: hand them over untouched by argparse
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        main(_without_django_options(argv[2:]), prog)

    def handle(self, *args: Any, **options: Any) -> None:
        main(list(args), "cogworker")
