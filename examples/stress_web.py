"""The web scenario's load: concurrent clients requesting the dashboard's pages and fragments
in-process through ASGI, each request at random with or without ``HX-Request``."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

WEB_PATHS = (
    "/",
    "/overview",
    "/overview?layout=a&period=week",
    "/overview?layout=b&queue=default",
    "/overview?layout=b&queue=low",
    "/overview/redis",
    "/overview/throughput",
    "/overview/runs?period=week",
    "/overview/throughput_data",
    "/overview/runs_data?period=week",
    "/jobs",
    "/jobs?status=Retrying",
    "/jobs?status=Dead",
    "/schedules",
    "/schedules?q=report",
    "/workers",
    "/workers/summary",
    "/metrics",
)


async def hammer(
    app: Any, clients: int, duration: float, show: Callable[[str], None]
) -> dict[str, Any]:
    """``clients`` concurrent clients requesting random ``WEB_PATHS`` of ``app`` for
    ``duration`` seconds; the totals, statuses, first errors and latency percentiles."""
    chooser = random.Random(7)
    statuses: Counter[str] = Counter()
    errors: list[str] = []
    times: list[float] = []
    deadline = time.perf_counter() + duration
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://stress") as client:

        async def one_client() -> None:
            while time.perf_counter() < deadline:
                path = chooser.choice(WEB_PATHS)
                headers = {"hx-request": "true"} if chooser.random() < 0.5 else {}
                began = time.perf_counter()
                try:
                    answer = await client.get(path, headers=headers)
                    statuses[str(answer.status_code)] += 1
                    if answer.status_code != 200 and len(errors) < 20:
                        errors.append(f"{path}: {answer.status_code} {answer.text[:120]}")
                except Exception as error:  # a crash in the app: count it, keep going
                    statuses["exception"] += 1
                    if len(errors) < 20:
                        errors.append(f"{path}: {type(error).__name__}: {error}")
                times.append((time.perf_counter() - began) * 1000)

        async def report() -> None:
            started = time.perf_counter()
            while time.perf_counter() < deadline:
                await asyncio.sleep(1)
                rate = len(times) / (time.perf_counter() - started)
                show(f"{len(times):,} requests · {rate:,.0f}/s")

        started = time.perf_counter()
        await asyncio.gather(report(), *(one_client() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    quantiles = statistics.quantiles(times, n=100) if len(times) > 1 else [times[0]] * 99
    return {
        "total": len(times),
        "by_status": dict(statuses),
        "errors": errors,
        "req_per_sec": round(len(times) / elapsed, 1),
        "p50_ms": round(quantiles[49], 1),
        "p95_ms": round(quantiles[94], 1),
        "p99_ms": round(quantiles[98], 1),
        "max_ms": round(max(times), 1),
    }
