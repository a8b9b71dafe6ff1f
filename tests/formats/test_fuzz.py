"""Seeded mutations of small valid shards, read through a whole dataset:
never a crash, never a hang, only the documented exceptions (FastIOError and
OSError subclasses) under ``raise``, and nothing at all under ``skip``, read
as samples and, where the format makes them natively (tar, TFRecord) or
decodes them as record batches (Parquet, Arrow), as batches.

Each format runs in a subprocess with a time limit, so that a crash in
native code or a hang fails its case instead of the suite; a hang dumps the
stacks (faulthandler) before the process is ended. The CI's sanitizer step
runs this module against an extension built with AddressSanitizer and UBSan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
# Per format. Damage that only some mutations meet (a footer block of negative
# length, a schema name that is not UTF-8, damaged offsets in an Arrow record
# batch) was found after 1,000-9,000 of them: FASTIO_FUZZ_MUTATIONS=30000 runs
# every format through that many in about 5 minutes.
MUTATIONS = int(os.environ.get("FASTIO_FUZZ_MUTATIONS", "1000"))

SCRIPT = r"""
import faulthandler, random, sys, traceback, warnings
from pathlib import Path

import fastio
from tests.shards import write

kind, folder, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
format_name, _, variant = kind.partition(".")
written = write(format_name, folder / "data", shards=1, per_shard=5, seed=2,
                compression={"gz": "gzip"}.get(variant), index=False)
if variant == "stream":  # the same rows as an Arrow IPC stream, three record batches
    import pyarrow as pa
    path = Path(written.urls[0])
    with pa.ipc.open_file(pa.py_buffer(path.read_bytes())) as file:
        table = file.read_all()
    with pa.ipc.new_stream(path, table.schema) as stream:
        stream.write_table(table, max_chunksize=2)
options = {**written.options, "shuffle": False, "fairness": False}
original = Path(written.urls[0]).read_bytes()
suffix = written.urls[0].split("-0000", 1)[1]
rng = random.Random(kind)
# Every other pair of rounds reads batches where the format makes them natively
# or decodes them as record batches, which are cut and joined into batches.
batched = format_name in ("tfrecord", "webdataset", "parquet", "arrow")


def mutate(data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3))):
        # Headers and footers are where the framing is: aim there half the time.
        size = max(len(data), 1)
        at = rng.choice((rng.randrange(min(size, 64)), size - 1 - rng.randrange(min(size, 64)),
                         rng.randrange(size)))
        span = rng.choice((1, 2, 4, 8, 64, 512))
        action = rng.choice(("flip", "flip", "cut", "random", "zero", "delete", "repeat"))
        if action == "flip":
            if data:
                data[at] ^= 1 << rng.randrange(8)
        elif action == "cut":
            del data[at:]
        elif action == "random":
            data[at:at + span] = rng.randbytes(span)
        elif action == "zero":
            data[at:at + span] = bytes(span)
        elif action == "delete":
            del data[at:at + span]
        else:
            data[at:at] = data[at:at + span]
    return bytes(data)


def read(paths: list[Path], policy: str, batches: bool) -> None:
    dataset = fastio.Dataset([str(path) for path in paths], **options, on_error=policy,
                             index_dir=folder / "index")  # fmt: skip
    try:
        for _ in dataset.batches(3) if batches else dataset:
            pass
    finally:
        dataset.close()


warnings.simplefilter("ignore")  # skip/warn report what they skip; that is not under test
# Rounds of four: one shard read alone under raise, three together under skip or warn.
for first in range(0, count, 4):
    paths = []
    for number in range(first, min(first + 4, count)):
        paths.append(folder / f"m-{number:04d}{suffix}")
        paths[-1].write_bytes(mutate(original))
    for policy, group in (("raise", paths[:1]), (("skip", "warn")[first // 4 % 2], paths[1:])):
        if not group:
            continue
        faulthandler.dump_traceback_later(60, exit=True)  # a hang: the stacks, then out
        try:
            read(group, policy, batched and first // 4 % 4 >= 2)
        except (fastio.FastIOError, OSError) as error:
            if policy != "raise":
                print(f"{kind} mutations {first}..: {error!r} escaped {policy}")
                traceback.print_exc()
                sys.exit(1)
        except BaseException:
            print(f"{kind} mutations {first}.. ({policy}): an undocumented exception")
            traceback.print_exc()
            sys.exit(1)
        finally:
            faulthandler.cancel_dump_traceback_later()
    for path in paths:
        path.unlink()
print("OK", count)
"""

KINDS = ["webdataset", "webdataset.gz", "tfrecord", "jsonl", "lines", "npy", "fixed", "parquet",
         "arrow", "arrow.stream"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_shards_raise_only_documented_errors(tmp_path, kind) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", SCRIPT, kind, str(tmp_path),
         str(MUTATIONS)],
        capture_output=True, text=True, timeout=240, cwd=REPOSITORY,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.strip().endswith(f"OK {MUTATIONS}")
