"""TFRecord per record: where the time goes, as CPU time, beside the tfrecord package.

    python benchmarks/bench_tfrecord_cpu.py --case-dir /path/to/large-7273x110000

``--case-dir`` is one case of the datasets ``benchmarks/bench_datasets.py``
writes (it holds ``manifest.json`` and a ``tfrecord/`` copy). Wall-clock rates
swing on a shared machine; CPU time per record does much less, and the thread
split says which thread a change relieves. So each method reports, per
record: samples/s, the CPU time of the thread that iterates (the one a
training loop waits on) and of the whole process (reader threads included).

Methods: fastio.Dataset over the shards (checksums checked, the default; and
``verify=False``, like for like with the package, which checks none); fastio's
stages without the Dataset (the reader's chunks alone; framing with checks;
framing and parsing each record); and the tfrecord package's
``tfrecord_loader`` (parses tf.train.Example with protobuf, as fastio parses
it natively). Every run is a fresh process that reads the files once untimed
first (warm page cache) and times the next pass; methods run in a rotated
order for ``--repeats`` rounds; medians are printed with each method's ratio
to the package (samples/s, and the package's CPU over the method's).
"""

from __future__ import annotations

import json
from pathlib import Path

from _cpu_per_sample import main, timed_pass

METHODS = (
    "reader chunks",
    "fastio framing",
    "fastio framing+parse",
    "fastio Dataset",
    "fastio Dataset verify=False",
    "tfrecord package",
)


def _records(method: str, paths: list[str], url: str) -> int:
    """One pass of ``method`` over the shards; the records it delivered (every
    payload's length is read, as a consumer would touch it)."""
    if method == "tfrecord package":
        from tfrecord.reader import tfrecord_loader

        return sum(len(r["data"]) >= 0 for p in paths for r in tfrecord_loader(p, None))
    import fastio

    if method.startswith("fastio Dataset"):
        verify = not method.endswith("verify=False")
        with fastio.Dataset(url, format="tfrecord", verify=verify, shuffle=False) as ds:
            return sum(len(sample["data"][0]) >= 0 for sample in ds)
    from fastio.formats import decode_tfrecord, parse_example

    count = 0
    with fastio.Reader() as reader:
        for path in paths:
            chunks = reader.stream([fastio.ByteRange(path, 0)])
            if method == "reader chunks":
                count += sum(1 for _ in chunks)
                continue
            records = decode_tfrecord(chunks, path)
            if method == "fastio framing":
                count += sum(1 for _ in records)
            else:  # parsed as the Dataset parses them
                count += sum(len(parse_example(r)["data"][0]) >= 0 for r in records)
    return count


def child(method: str, case_dir: str) -> dict[str, float]:
    manifest = json.loads(Path(case_dir, "manifest.json").read_text())
    copy = manifest["copies"]["tfrecord"]
    return timed_pass(lambda: _records(method, copy["paths"], copy["url"]),
                      manifest["case"]["samples"], "records",
                      check=method != "reader chunks")  # fmt: skip


if __name__ == "__main__":
    main(__doc__.split("\n")[0], __file__, METHODS, "tfrecord package", child)
