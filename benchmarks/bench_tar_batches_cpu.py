"""WebDataset tar: ``.batches(n)`` beside per-sample iteration, as CPU time per sample.

    python benchmarks/bench_tar_batches_cpu.py --case-dir /path/to/large-7273x110000

``--case-dir`` is one case of the datasets ``benchmarks/bench_datasets.py``
writes (it holds ``manifest.json`` and a ``webdataset/`` copy). Batches of
110 KB samples span several reads and shards; the point of this measurement
is what gathering them costs next to handing out each sample. Wall-clock
rates swing on a shared machine; CPU time per sample does much less, and the
thread split says which thread a change relieves. Each method reports, per
sample: samples/s, the CPU time of the thread that iterates (the one a
training loop waits on) and of the whole process (reader threads included).

Every run is a fresh process that reads the shards once untimed first (warm
page cache, index built) and times the next pass; methods run in a rotated
order for ``--repeats`` rounds; medians are printed with each method's ratio
to per-sample iteration (samples/s, and its CPU over the method's). Every
payload's length is read, as a consumer would touch it.
"""

from __future__ import annotations

import json
from pathlib import Path

from _cpu_per_sample import main, timed_pass

METHODS = ("fastio samples", "fastio batches 256", "fastio batches 1024")


def _samples(method: str, url: str) -> int:
    import fastio

    with fastio.Dataset(url, format="webdataset", shuffle=False) as ds:
        if method == "fastio samples":
            return sum(len(sample["bin"]) >= 0 for sample in ds)
        import pyarrow.compute as pc

        count = 0
        for batch in ds.batches(int(method.rsplit(" ", 1)[1])):
            count += batch.num_rows
            pc.sum(pc.binary_length(batch.column("bin")))
        return count


def child(method: str, case_dir: str) -> dict[str, float]:
    manifest = json.loads(Path(case_dir, "manifest.json").read_text())
    url = manifest["copies"]["webdataset"]["url"]
    return timed_pass(lambda: _samples(method, url), manifest["case"]["samples"], "samples")


if __name__ == "__main__":
    main(__doc__.split("\n")[0], __file__, METHODS, "fastio samples", child)
