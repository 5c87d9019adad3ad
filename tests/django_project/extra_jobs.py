"""A jobs module outside the installed apps, for ``manage.py cogworker run -r extra_jobs``."""

import cogworker


class ExtraJob(cogworker.Job, queue="shop"):
    name = "Extra::Job"

    def perform(self, marker):
        cogworker.default_config().redis().rpush(f"test:extra:{marker}", self.jid)
