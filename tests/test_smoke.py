import json

import redis

import cogworker


class SmokeJob(cogworker.Job, queue="smoke"):
    name = "SmokeJob"

    def perform(self, who: str) -> None:
        pass


def test_push_lands_in_queue(config: cogworker.Config, r: redis.Redis) -> None:
    jid = SmokeJob.perform_async("x")
    raw = r.lindex("cogworker:queue:smoke", 0)
    assert raw is not None
    job = json.loads(raw)
    assert job["jid"] == jid and job["class"] == "SmokeJob" and job["args"] == ["x"]
    assert r.smembers("cogworker:queues") == {"smoke"}
