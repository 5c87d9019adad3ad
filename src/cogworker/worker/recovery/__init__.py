"""Getting jobs out of in-progress lists that nobody will settle: other processes' (orphan
recovery, ``orphans``) and this process's own (late settlements, strays and the hand-back at
shutdown, ``reconcile``)."""

from cogworker.worker.recovery.burials import JobFailedError, JobOrphanedError
from cogworker.worker.recovery.orphans import Orphans, RecoveryReport
from cogworker.worker.recovery.reconcile import Reconciler

__all__ = ["JobFailedError", "JobOrphanedError", "Orphans", "Reconciler", "RecoveryReport"]

