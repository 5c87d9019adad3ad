"""The floor for bench/peers.py's enqueue rows: bare redis-py LPUSHes of a job-sized JSON
payload, one round trip each, and (bulk) 1,000 values per LPUSH. No worker drains these."""

from __future__ import annotations

import json
import os
import time

import redis

URL = os.environ["PEERS_REDIS_URL"]
QUEUE = "peers:bare"
BATCH = 1_000


def payload() -> str:
    jid = os.urandom(12).hex()
    job = {"class": "IncrJob", "args": [], "queue": "default", "jid": jid}
    return json.dumps({**job, "created_at": time.time(), "enqueued_at": time.time()})


def enqueue_one(count: int) -> None:
    client = redis.Redis.from_url(URL)
    for _ in range(count):
        client.lpush(QUEUE, payload())


def enqueue_bulk(count: int) -> None:
    client = redis.Redis.from_url(URL)
    for start in range(0, count, BATCH):
        client.lpush(QUEUE, *(payload() for _ in range(min(BATCH, count - start))))
