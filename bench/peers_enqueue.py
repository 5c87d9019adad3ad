"""Time one enqueue run inside a system's virtualenv, for bench/peers.py.

    <venv>/bin/python bench/peers_enqueue.py SYSTEM one|bulk|latency|io COUNT

SYSTEM is cog, huey, dramatiq or bare (the module bench/peers_SYSTEM.py). ``one`` and ``bulk``
enqueue COUNT INCR jobs; ``latency`` enqueues COUNT latency jobs 50 ms apart, each carrying the
time just before its enqueue call; ``io`` enqueues COUNT jobs that sleep 20 ms each (in bulk
where the system can). Prints the seconds the enqueueing took, import and start-up excluded.
"""

from __future__ import annotations

import importlib
import sys
import time
from types import ModuleType

from peers_systems import NAP_SECONDS

LATENCY_GAP = 0.05


def enqueue_latency(module: ModuleType, count: int) -> None:
    for _ in range(count):
        module.enqueue_latency(time.time())
        time.sleep(LATENCY_GAP)


def main() -> None:
    system, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode not in ("one", "bulk", "latency", "io"):
        raise SystemExit(f"enqueue mode must be one, bulk, latency or io, not {mode!r}")
    module = importlib.import_module(f"peers_{system}")
    started = time.perf_counter()
    if mode == "latency":
        enqueue_latency(module, count)
    elif mode == "io":
        module.enqueue_naps(count, NAP_SECONDS)
    else:
        (module.enqueue_one if mode == "one" else module.enqueue_bulk)(count)
    print(f"{time.perf_counter() - started:.6f}")


if __name__ == "__main__":
    main()
