"""Shard cache hit rate: plan-aware (Belady) eviction vs LRU over 3 epochs.

    python benchmarks/bench_cache.py                      # 64 shards of 1 MiB, ~30 s
    python benchmarks/bench_cache.py --shards 256 --shard-size 64KiB

A dataset of ``--shards`` local files stands in for a remote one (the fetch
copies the file). Each run reads 3 epochs through a fresh ``ShardCache`` holding
25, 50 or 75% of the dataset, in stored order and in the shuffled orders of
``fastio.plan._assignment.shard_order``, under:

* ``plan``: eviction by furthest next use, the plan of all 3 epochs given up front;
* ``plan, 2 ahead``: the plan re-given at every epoch for that epoch and the
  next (what a reader knows at ``set_epoch``);
* ``plan, 1 ahead``: only the current epoch (shown to make the point that the
  next epoch must be in the plan);
* ``lru``.

Reported: the hit rate over all 3 epochs, over epochs 2-3 (the first epoch
misses every shard whatever the policy, so a cache of half the dataset can hit
at most ~33% overall and ~50% after the first epoch), bytes downloaded, and
gets per second (the cache's own overhead: index transactions, copies, fsync).
Prints a table and writes JSON to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from fastio.cache._cache import INDEX_ROOM, ShardCache
from fastio.cli._options import parse_size
from fastio.plan._assignment import shard_order

EPOCHS = 3
FRACTIONS = (0.25, 0.5, 0.75)
POLICIES = {  # name: (policy, epochs of plan given at each epoch's start; 0: all, up front)
    "plan": ("plan", 0),
    "plan, 2 ahead": ("plan", 2),
    "plan, 1 ahead": ("plan", 1),
    "lru": ("lru", None),
}


def make_dataset(folder: Path, shards: int, shard_size: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    block = bytes(range(256)) * (shard_size // 256 + 1)
    urls = []
    for index in range(shards):
        path = folder / f"train-{index:04d}.tar"
        path.write_bytes(block[index % 256 : index % 256 + shard_size])
        urls.append(str(path))
    return urls


def copy_file(url: str, file) -> None:
    with open(url, "rb") as source:
        shutil.copyfileobj(source, file, 1 << 20)


def run(
    folder: Path, orders: list[list[str]], shard_size: int, fraction: float, name: str
) -> dict[str, float]:
    policy, ahead = POLICIES[name]
    max_bytes = int(len(orders[0]) * shard_size * fraction)
    hits = []
    started = time.perf_counter()
    # The fraction is of room for copies; the limit also holds the cache's index.
    with ShardCache(folder, INDEX_ROOM + max_bytes, policy) as cache:  # type: ignore[arg-type]
        if ahead == 0:
            cache.plan(url for order in orders for url in order)
        for epoch, order in enumerate(orders):
            if ahead:
                cache.plan(url for later in orders[epoch : epoch + ahead] for url in later)
            before = cache.stats()["hits"]
            for url in order:
                with cache.use(url, shard_size, copy_file):
                    pass
            hits.append(cache.stats()["hits"] - before)
        stats = cache.stats()
    seconds = time.perf_counter() - started
    gets = sum(len(order) for order in orders)
    warm = sum(len(order) for order in orders[1:])
    return {
        "hit_rate": sum(hits) / gets,
        "hit_rate_after_epoch_1": sum(hits[1:]) / warm,
        "hits_per_epoch": hits,
        "bytes_downloaded": stats["bytes_downloaded"],
        "evictions": stats["evictions"],
        "gets_per_s": gets / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--shard-size", type=parse_size, default=parse_size("1MiB"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp)")
    args = parser.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="fastio-bench-cache-"))
    urls = make_dataset(scratch / "remote", args.shards, args.shard_size)
    orders = {
        "stored": [urls] * EPOCHS,
        "shuffled": [
            [urls[i] for i in shard_order(len(urls), args.seed, epoch)] for epoch in range(EPOCHS)
        ],
    }
    rows = []
    for order_name, order in orders.items():
        for fraction in FRACTIONS:
            for name in POLICIES:
                folder = scratch / f"cache-{order_name}-{fraction}-{name.replace(' ', '')}"
                result = run(folder, order, args.shard_size, fraction, name)
                shutil.rmtree(folder)
                rows.append({"order": order_name, "cache": fraction, "policy": name, **result})
                print(f"{order_name:8} {fraction:4.0%} {name:14} hit {result['hit_rate']:6.1%}",
                      file=sys.stderr)  # fmt: skip
    shutil.rmtree(scratch / "remote")
    dataset = args.shards * args.shard_size
    print(f"\n{args.shards} shards of {args.shard_size:,} bytes, {EPOCHS} epochs "
          f"({EPOCHS * dataset / 1e6:,.0f} MB read)\n")  # fmt: skip
    print("| order | cache | policy | hit rate | hit rate, epochs 2-3 | MB downloaded "
          "| evictions | gets/s |")  # fmt: skip
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['order']} | {row['cache']:.0%} | {row['policy']} | {row['hit_rate']:.1%} "
              f"| {row['hit_rate_after_epoch_1']:.1%} | {row['bytes_downloaded'] / 1e6:,.1f} "
              f"| {row['evictions']} | {row['gets_per_s']:,.0f} |")  # fmt: skip
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    out = results / time.strftime("cache-%Y%m%d-%H%M%S.json")
    setup = {"shards": args.shards, "shard_size": args.shard_size, "epochs": EPOCHS,
             "seed": args.seed}  # fmt: skip
    out.write_text(json.dumps({**setup, "rows": rows}, indent=1))
    print(f"\nwrote {out}")
    if args.dir is None:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
