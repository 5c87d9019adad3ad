"""Getting jobs out of in-progress lists that nobody will settle: other processes' (orphan
recovery, ``orphans``) and this process's own (late settlements, strays and the hand-back at
shutdown, ``reconcile``)."""

from cogworker.worker.recovery.burials import JobFailedError, JobOrphanedError
from cogworker.worker.recovery.orphans import Orphans, RecoveryReport
from cogworker.worker.recovery.reconcile import Reconciler

__all__ = ["JobFailedError", "JobOrphanedError", "Orphans", "Reconciler", "RecoveryReport"]


def reset() -> None:
    """Nothing to forget: recovery's memory lives in the ``Orphans`` of a Manager, which a
    forked child builds afresh. Kept only while ``cli._run_swarm_child`` still calls it."""
