"""Push a few of the example's jobs to watch a worker run them:

    python -m examples.push_jobs

three greetings now and one in 10 seconds, a flaky job (fails twice, then succeeds), an async
job and two low-priority ones on queue ``low``. Redis is ``$REDIS_URL``, else
``redis://localhost:6379/0``.
"""

from __future__ import annotations

from examples import app  # noqa: F401 - sets up job status on push
from examples.jobs import FetchReportJob, FlakyJob, GreetingJob, LowPriorityJob


def main() -> None:
    pushed = [GreetingJob.perform_async(f"world {n}") for n in range(3)]
    pushed.append(GreetingJob.perform_in(10, "later"))
    flaky = FlakyJob.perform_async(2)
    pushed += [flaky, FetchReportJob.perform_async(42)]
    pushed += [LowPriorityJob.perform_async(f"batch {n}") for n in range(2)]
    print(f"pushed {len(pushed)} jobs (one due in 10 s); the flaky one is jid={flaky}:")
    print(
        f"  watch it with: python -c \"from cogworker import status; print(status.get('{flaky}'))\""
    )


if __name__ == "__main__":
    main()
