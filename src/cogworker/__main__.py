"""``python -m cogworker``: the same as the ``cogworker`` command."""

from cogworker.cli import main

main()
