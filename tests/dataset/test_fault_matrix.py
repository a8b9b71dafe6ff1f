"""Every format against every kind of damage, under each ``on_error`` policy,
for a never-seen dataset (its first epoch streams) and an indexed one.

One shard of two is damaged: cut inside a record's header, inside its
payload or between two records; a byte flipped in a header, a payload or a
checksum; emptied; or replaced by garbage. Under ``raise`` the error is a
FastIOError (or an OSError) naming the shard's URL, and the byte offset where
the error has one. Under ``skip`` and ``warn`` every intact sample arrives
once, the intact shard whole, and ``delivered + skipped`` is what the damaged
shard holds. The exceptions are where the damage cannot be seen:

- a payload flip in a format without checksums (tar, lines, npy, fixed) is
  delivered as it is on disk;
- a cut between records of a format without a count (TFRecord, JSONL, lines,
  fixed) leaves a valid, shorter shard; an empty one is a valid shard of no
  samples;
- garbage in place of a fixed-size-record shard is records of garbage;
- a shard that cannot be read at all (its header or footer is gone) is left
  out whole: ``shards_skipped`` counts it, the samples it held are unknowable.
"""

from __future__ import annotations

import os
import random
import struct
import tarfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fastio
from tests.shards import RECORD, key_of, write

RECORD_INDEX = 2  # the damaged record of the damaged shard (shard 0)


@dataclass
class Spans:
    """Where each record of a shard is: its start, where its payload starts,
    its end, and (for TFRecord) its data checksum."""

    starts: list[int]
    payloads: list[int]
    ends: list[int]


def tar_spans(path: str) -> Spans:
    starts, payloads, ends, seen = [], [], [], []
    with tarfile.open(path) as archive:
        for member in archive:
            key = member.name.split(".", 1)[0]
            if not seen or seen[-1] != key:
                seen.append(key)
                starts.append(member.offset)
                payloads.append(member.offset_data)
                ends.append(0)
            ends[-1] = member.offset_data + -(-member.size // 512) * 512
    return Spans(starts, payloads, ends)


def tfrecord_spans(path: str) -> Spans:
    data, starts, payloads, ends, offset = Path(path).read_bytes(), [], [], [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        starts.append(offset)
        payloads.append(offset + 12)
        offset += 12 + length + 4
        ends.append(offset)
    return Spans(starts, payloads, ends)


def line_spans(path: str) -> Spans:
    data, starts, ends, offset = Path(path).read_bytes(), [], [], 0
    while offset < len(data):
        end = data.index(b"\n", offset) + 1
        if end - offset > 1:  # blank lines are no samples
            starts.append(offset)
            ends.append(end)
        offset = end
    return Spans(starts, list(starts), ends)


def row_spans(path: str, header: int) -> Spans:
    count = (os.path.getsize(path) - header) // RECORD
    starts = [header + RECORD * row for row in range(count)]
    return Spans(starts, list(starts), [start + RECORD for start in starts])


def npy_header(path: str) -> int:
    with open(path, "rb") as handle:
        np.lib.format.read_magic(handle)
        np.lib.format.read_array_header_1_0(handle)
        return handle.tell()


def spans(format_name: str, path: str) -> Spans:
    if format_name == "webdataset":
        return tar_spans(path)
    if format_name == "tfrecord":
        return tfrecord_spans(path)
    if format_name in ("jsonl", "lines"):
        return line_spans(path)
    return row_spans(path, npy_header(path) if format_name == "npy" else 0)


def record_count(format_name: str, path: str) -> int:
    if format_name == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    if format_name == "arrow":
        import pyarrow as pa

        with pa.ipc.open_file(path) as file:
            return int(file.read_all().num_rows)
    return len(spans(format_name, path).starts)  # tarfile reads .tar.gz too


# Damage: (where, what). "cut" truncates there; "flip" inverts the byte there.
def damage(format_name: str, fault: str, path: str) -> tuple[int | None, int]:
    """Damages ``path``; returns the record first hurt (None: the whole
    shard) and how many records now lie wholly before the damage."""
    size = os.path.getsize(path)
    if fault == "empty":
        Path(path).write_bytes(b"")
        return None, 0
    if fault == "garbage":
        Path(path).write_bytes(random.Random(3).randbytes(size))
        return None, 0
    if format_name in ("parquet", "arrow") or path.endswith(".gz"):
        # Whole-file formats: a cut loses the footer (or the stream's end); a
        # flip hits the footer's magic (or a deflate block near the end).
        at = size // 2 if fault == "cut_payload" else size - (40 if path.endswith(".gz") else 2)
        apply(path, "cut" if fault.startswith("cut") else "flip", at)
        return None, 0
    layout, record = spans(format_name, path), RECORD_INDEX
    start, payload, end = layout.starts[record], layout.payloads[record], layout.ends[record]
    at = {
        "cut_header": start + 100 if format_name == "webdataset" else start + 5,
        "cut_payload": (payload + end) // 2,
        "cut_between": start,
        "flip_header": start + 100 if format_name == "webdataset" else start,
        "flip_payload": payload + 10,
        "flip_checksum": start + 148 if format_name == "webdataset" else end - 2,
    }[fault]
    if format_name == "npy" and fault in ("cut_header", "flip_header"):
        at = 20  # inside the .npy header: the shard's only header
        record = -1
    apply(path, "cut" if fault.startswith("cut") else "flip", at)
    return (None if record < 0 else record), max(record, 0)


def apply(path: str, action: str, at: int) -> None:
    with open(path, "r+b") as handle:
        if action == "cut":
            handle.truncate(at)
            return
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0xFF]))


FAULTS = ["cut_header", "cut_payload", "cut_between", "flip_header", "flip_payload",
          "flip_checksum", "empty", "garbage"]  # fmt: skip
# What each format has to damage (a format without record headers has no header to cut).
APPLIES = {
    "webdataset": FAULTS,
    "webdataset.gz": ["cut_payload", "flip_payload", "empty", "garbage"],
    "tfrecord": FAULTS,
    "jsonl": ["cut_payload", "cut_between", "flip_payload", "empty", "garbage"],
    "lines": ["cut_payload", "cut_between", "flip_payload", "empty", "garbage"],
    "npy": [
        "cut_header",
        "cut_payload",
        "cut_between",
        "flip_header",
        "flip_payload",
        "empty",
        "garbage",
    ],
    "fixed": ["cut_payload", "cut_between", "flip_payload", "empty", "garbage"],
    "parquet": ["cut_payload", "flip_header", "empty", "garbage"],
    "arrow": ["cut_payload", "flip_header", "empty", "garbage"],
}
# Damage a format cannot see (see the module's docstring): nothing is raised.
UNSEEN = {
    ("webdataset", "flip_payload"), ("npy", "flip_payload"), ("fixed", "flip_payload"),
    ("tfrecord", "cut_between"), ("jsonl", "cut_between"), ("lines", "cut_between"),
    ("lines", "cut_payload"), ("fixed", "cut_between"), ("tfrecord", "empty"),
    ("jsonl", "empty"), ("lines", "empty"), ("fixed", "empty"), ("fixed", "garbage"),
}  # fmt: skip
# Damage that costs more than the damaged record, for now.
GAPS = {
    ("tfrecord", "flip_header"): "a damaged length field loses the records after it: the "
    "scan does not search for the next header whose length checksum holds",
}
INDEXED = ("webdataset", "webdataset.gz", "tfrecord", "jsonl", "lines")  # formats with an index
CASES = [
    pytest.param(
        kind,
        fault,
        seen,
        id=f"{kind}-{fault}-{'indexed' if seen else 'never-seen'}",
        marks=[pytest.mark.xfail(reason=GAPS[kind, fault])] if (kind, fault) in GAPS else [],
    )
    for kind, faults in APPLIES.items()
    for fault in faults
    for seen in ((False, True) if kind in INDEXED else (False,))
]


def keys_of(format_name: str, dataset: fastio.Dataset) -> list[int]:
    return [key_of(format_name, sample) for sample in dataset]


@pytest.mark.parametrize(("kind", "fault", "seen"), CASES)
def test_damage_under_each_policy(tmp_path, kind, fault, seen) -> None:
    format_name, compression = kind.split(".")[0], ("gzip" if kind.endswith(".gz") else None)
    written = write(format_name, tmp_path / "data", shards=2, per_shard=6, seed=1,
                    compression=compression, index=seen)  # fmt: skip
    url = written.urls[0]
    options = {**written.options, "shuffle": False, "fairness": False}
    if not seen:
        options["index_dir"] = tmp_path / "index"  # nothing indexed it there
    held = record_count(format_name, url)  # keys are stored positions: 0 .. held - 1
    first_hurt, intact_before = damage(format_name, fault, url)
    unseen = (kind, fault) in UNSEEN

    def fresh(policy: str, name: str) -> fastio.Dataset:
        extra = {} if seen else {"index_dir": tmp_path / name}
        return fastio.Dataset(written.pattern, **{**options, **extra}, on_error=policy)

    # raise
    if unseen:
        keys_of(format_name, fresh("raise", "raise"))  # no error
    else:
        with pytest.raises((fastio.FastIOError, OSError)) as caught:
            keys_of(format_name, fresh("raise", "raise"))
        assert url in str(caught.value), caught.value
        offset = getattr(caught.value, "offset", None)
        if offset is not None:
            assert str(offset) in str(caught.value), caught.value

    # skip: two epochs (the first streams when never seen, the second plans by
    # the index the first left), the same samples in both.
    dataset = fresh("skip", "skip")
    first = keys_of(format_name, dataset)
    stats = dataset.stats()
    skipped, errors = stats["skipped"], stats["errors"]
    dataset.set_epoch(1)
    assert sorted(key_of(format_name, sample) for sample in dataset) == sorted(first)
    assert len(first) == len(set(first))
    intact = [row["key"] for row in written.samples if row["key"] >= held]
    if (format_name, fault) == ("fixed", "garbage"):  # records of garbage, as many
        assert len(first) == len(written.samples)
        assert set(intact) <= set(first)
    else:
        assert set(first) <= {row["key"] for row in written.samples}
        assert sorted(key for key in first if key >= held) == intact  # the other shard, whole
    damaged = sorted(key for key in first if key < held)
    if unseen:
        assert skipped == stats["shards_skipped"] == 0
        assert set(range(intact_before)) <= set(damaged)
    else:
        assert any(url in error for error in errors), errors  # the damage is reported
        if compression or first_hurt is None:
            # What a damaged deflate stream held after the damage, or a shard
            # without its header, footer or any valid record, is unknowable:
            # what comes is what came before the damage.
            assert damaged == list(range(len(damaged)))
        elif fault.startswith("flip"):
            assert damaged == [key for key in range(held) if key != first_hurt]
            assert len(damaged) + skipped == held
        else:
            assert damaged == list(range(intact_before))  # every sample before the cut
            cut_off = (
                held - intact_before
                if format_name == "npy"
                # its header counts
                else (int(fault != "cut_between"))
            )  # the record cut in two, if any
            assert skipped == cut_off

    # warn: the same samples, and a warning naming the shard when any were lost
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        warned = keys_of(format_name, fresh("warn", "warn"))
    assert sorted(warned) == sorted(first)
    skipped_warnings = [w for w in caught_warnings if w.category is fastio.SkippedSamplesWarning]
    if errors:
        assert any(url in str(w.message) for w in skipped_warnings), caught_warnings
    else:
        assert skipped_warnings == []
