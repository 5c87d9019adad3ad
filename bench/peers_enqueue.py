"""Time one enqueue run inside a system's virtualenv, for bench/peers.py.

    <venv>/bin/python bench/peers_enqueue.py SYSTEM one|bulk COUNT

SYSTEM is cog, huey, dramatiq or bare (the module bench/peers_SYSTEM.py). Prints the seconds
the enqueue took, import and start-up excluded.
"""

from __future__ import annotations

import importlib
import sys
import time


def main() -> None:
    system, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode not in ("one", "bulk"):
        raise SystemExit(f"enqueue mode must be one or bulk, not {mode!r}")
    module = importlib.import_module(f"peers_{system}")
    enqueue = module.enqueue_one if mode == "one" else module.enqueue_bulk
    started = time.perf_counter()
    enqueue(count)
    print(f"{time.perf_counter() - started:.6f}")


if __name__ == "__main__":
    main()
