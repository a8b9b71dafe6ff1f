"""How long ``import fastio`` takes in a fresh interpreter.

    python benchmarks/bench_import.py            # the fastest of 10 runs
    python benchmarks/bench_import.py --runs 30

The suite checks what the import loads (no heavy modules); the time it takes
depends on the machine and its load, so it is measured here. Prints the
fastest and the median run in milliseconds, and the modules fastio adds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MEASURE = """
import json, sys, time
before = set(sys.modules)
started = time.perf_counter()
import fastio
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "modules": len(set(sys.modules) - before)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        output = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                                check=True).stdout  # fmt: skip
        runs.append(json.loads(output))
    seconds = sorted(run["seconds"] for run in runs)
    print(f"import fastio: fastest {seconds[0] * 1000:.1f} ms, "
          f"median {statistics.median(seconds) * 1000:.1f} ms over {args.runs} runs; "
          f"{runs[0]['modules']} modules loaded")  # fmt: skip


if __name__ == "__main__":
    main()
