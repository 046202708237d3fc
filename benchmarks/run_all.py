"""Run every local benchmark once (`make bench`). For ratios against upstream: `make bench-peer`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODULES = [
    "bench_codec",
    "bench_connect",
    "bench_scalar",
    "bench_image",
    "bench_vector",
    "bench_session",
    "bench_adapters",
    "bench_memory",
]

if __name__ == "__main__":
    for name in MODULES:
        print(f"\n== {name} ==")
        module = importlib.import_module(name)
        try:
            module.main([])
        except TypeError:
            module.main()
