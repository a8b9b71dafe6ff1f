"""Damaged and missing shards under each on_error policy: a clear error
naming URL, byte offset and sample (raise), or the epoch goes on and what was
skipped is counted (skip) and warned about (warn). Never a hang, never a
silently short epoch."""

from __future__ import annotations

import gzip
import logging
import os
import pickle
import tarfile
import warnings

import pytest
from torch.utils.data import DataLoader

import fastio
from tests.shards import batch_keys, check_sample, key_of, write


def damage_tar(written) -> tuple[str, int, int]:
    """Cut the second shard inside sample 5; returns the URL, the key of that
    sample and the key after the shard's last sample (keys are stored positions)."""
    url = written.urls[1]
    dataset = fastio.Dataset(written.pattern, shuffle=False)
    layout = dataset.layouts[1]
    first_key, count = dataset.counts[0], dataset.counts[1]
    cut = int(layout.starts[5]) + 700  # inside sample 5's first member
    with open(url, "r+b") as handle:
        handle.truncate(cut)
    return url, first_key + 5, first_key + count


def damage_tfrecord(written) -> tuple[str, int, int]:
    """Flip a payload byte of record 4 of the third shard (its data CRC fails)."""
    url = written.urls[2]
    layout = fastio.Dataset(url, format="tfrecord", shuffle=False).layouts[0]
    offset = int(layout.starts[4])
    with open(url, "r+b") as handle:
        handle.seek(offset + 20)
        byte = handle.read(1)
        handle.seek(offset + 20)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return url, offset, 4


def damage_parquet(written) -> str:
    url = written.urls[0]
    size = os.path.getsize(url)
    with open(url, "r+b") as handle:
        handle.seek(size - 40)
        handle.write(b"\xff" * 30)  # inside the footer's thrift metadata
    return url


@pytest.fixture
def tars(tmp_path):
    return write("webdataset", tmp_path / "wds", shards=4, per_shard=20)


def test_truncated_tar(tars, caplog) -> None:
    url, cut_key, end_key = damage_tar(tars)
    # The cut shard is no longer what its index says: it is read as a never-seen
    # shard would be, and the cut shows while reading.
    with pytest.raises(fastio.TruncatedShardError) as caught:
        list(fastio.Dataset(tars.pattern))
    assert caught.value.url == url
    assert caught.value.offset > 0
    assert str(caught.value).startswith(f"{url} at byte {caught.value.offset}")
    # skip: every other sample arrives, the cut one is counted.
    with caplog.at_level(logging.WARNING, logger="fastio"):
        dataset = fastio.Dataset(tars.pattern, on_error="skip")
        got = [key_of("webdataset", s) for s in dataset]
    assert len(got) == len(set(got)) == dataset.total
    # Every sample before the cut stays, the last one too: the member cut off
    # does not belong to it. The cut one is counted; the shard held no more.
    lost = set(range(cut_key, end_key))
    assert set(got) == {row["key"] for row in tars.samples} - lost
    assert dataset.stats()["skipped"] == 1
    assert "skipped" in caplog.text
    # warn: the same, with a warning naming the URL.
    dataset = fastio.Dataset(tars.pattern, on_error="warn")
    with pytest.warns(fastio.SkippedSamplesWarning, match=url):
        assert len(list(dataset)) == len(got)


def test_tfrecord_with_a_bad_crc(tmp_path) -> None:
    written = write("tfrecord", tmp_path, shards=4, per_shard=15)
    url, offset, record = damage_tfrecord(written)
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(fastio.Dataset(written.pattern))
    assert (caught.value.url, caught.value.offset) == (url, offset)
    assert "data checksum" in str(caught.value)
    dataset = fastio.Dataset(written.pattern, on_error="skip", shuffle=False)
    got = [key_of("tfrecord", s) for s in dataset]
    # Exactly the bad record is missing: the scan resynchronises after it.
    bad_key = sum(fastio.Dataset(u, format="tfrecord").total for u in written.urls[:2]) + record
    assert got == [row["key"] for row in written.samples if row["key"] != bad_key]
    assert dataset.stats()["skipped"] == 1
    warned = fastio.Dataset(written.pattern, on_error="warn", shuffle=False)
    with pytest.warns(fastio.SkippedSamplesWarning, match="checksum") as caught_warnings:
        assert [key_of("tfrecord", s) for s in warned] == got
    assert f"byte {offset}" in str(caught_warnings[0].message)
    # verify=False delivers every record, the damaged one as it is on disk
    # (protobuf parsing is no integrity check: that is what the CRC is for).
    raw = list(fastio.Dataset(written.pattern, verify=False, example=False, shuffle=False))
    assert len(raw) == len(written.samples)
    intact = list(fastio.Dataset(written.pattern, example=False, shuffle=False, on_error="skip"))
    assert [r for r in raw if r not in intact] == [raw[bad_key]]


def test_through_dataloader_workers_the_error_keeps_its_type_and_fields(tmp_path) -> None:
    """torch re-raises a worker's error as ``type(error)(text)``: a fastio
    error stays itself (``except fastio.CorruptRecordError`` catches it), its
    URL, offset and record read back from the text."""
    written = write("tfrecord", tmp_path, shards=4, per_shard=15)
    url, offset, record = damage_tfrecord(written)
    loader = DataLoader(fastio.Dataset(written.pattern), batch_size=4, num_workers=2,
                        collate_fn=list)  # fmt: skip
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(loader)
    assert (caught.value.url, caught.value.offset, caught.value.record) == (url, offset, record)
    assert "DataLoader worker" in str(caught.value)  # torch's text, with the worker's traceback


@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent workers"])
def test_the_main_process_counts_what_its_workers_skipped(tmp_path, persistent) -> None:
    """The workers skip; the process that made the dataset (and reads what
    they deliver) sees it in its stats, each place of damage once (each
    worker of each pass meets it again): delivered + skipped is what the
    shards hold, every epoch, as in one process."""
    written = write("tfrecord", tmp_path, shards=4, per_shard=15)
    url, _, _ = damage_tfrecord(written)
    missing = written.urls[0]
    held = len(written.samples) - fastio.Dataset(missing, format="tfrecord").total
    os.unlink(missing)
    dataset = fastio.Dataset(written.pattern, on_error="skip", index_dir=tmp_path / "index")
    loader = DataLoader(dataset, batch_size=4, num_workers=2, persistent_workers=persistent,
                        collate_fn=list)  # fmt: skip
    for _ in range(2):
        counted_once(dataset, sum(len(batch) for batch in loader), held, missing, url)


def counted_once(dataset: fastio.Dataset, delivered: int, held: int, missing: str,
                 damaged: str) -> None:  # fmt: skip
    """The missing shard and the damaged record, each counted once so far:
    delivered + skipped is what the shards hold."""
    stats = dataset.stats()
    assert delivered + stats["skipped"] == held
    assert (stats["skipped"], stats["shards_skipped"]) == (1, 1)
    assert sorted(missing in error for error in stats["errors"]) == [False, True]
    assert any(damaged in error and "checksum" in error for error in stats["errors"])


@pytest.mark.parametrize("seen", [True, False], ids=["indexed", "never seen"])
def test_one_process_counts_each_place_of_damage_once(tmp_path, seen) -> None:
    """Without workers too, each epoch meets a damaged record again, and a
    never-seen shard that cannot be opened is met at open and again by the
    pass that streams it: each counts once, and delivered + skipped is what
    the shards hold, every epoch."""
    written = write("tfrecord", tmp_path / "shards", shards=4, per_shard=15)
    url, _, _ = damage_tfrecord(written)  # found by the index beside the shards
    if not seen:
        for index in (tmp_path / "shards").glob("*.fastio-index*"):
            index.unlink()
    missing = written.urls[0]
    counted = fastio.Dataset(missing, format="tfrecord", index_dir=tmp_path / "count")
    held = len(written.samples) - sum(1 for _ in counted)
    os.unlink(missing)
    dataset = fastio.Dataset(written.pattern, on_error="skip", index_dir=tmp_path / "index")
    for _ in range(3):
        counted_once(dataset, sum(1 for _ in dataset), held, missing, url)


@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["stored", "shuffled"])
def test_damage_behind_a_still_valid_index_costs_only_the_damaged_sample(
    tmp_path, shuffle, batches
) -> None:
    """A shard garbled after it was indexed, its size and times kept (so its
    index is still taken): decoding a read stops at the damaged header of
    sample 11, and the index says where each later sample starts, so only
    that sample is lost, not the rest of its read."""
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=30)
    url = written.urls[1]
    layout = fastio.Dataset(written.pattern, shuffle=False).layouts[1]
    lo = int(layout.starts[11])  # its first header, and on into its bytes
    hi = lo + 1000
    hit = {11}
    before = os.stat(url)
    with open(url, "r+b") as handle:
        handle.seek(lo)
        handle.write(b"\xa5" * (hi - lo))
    os.utime(url, ns=(before.st_atime_ns, before.st_mtime_ns))
    first = fastio.Dataset(written.urls[0]).total
    lost = {first + i for i in hit}
    dataset = fastio.Dataset(written.pattern, shuffle=shuffle, on_error="skip")
    if batches:
        got = sorted(key for batch in dataset.batches(7) for key in batch_keys("webdataset", batch))
    else:
        got = sorted(key_of("webdataset", sample) for sample in dataset)
    assert got == sorted(row["key"] for row in written.samples if row["key"] not in lost)
    assert dataset.stats()["skipped"] == len(hit)
    strict = fastio.Dataset(written.pattern, shuffle=False)
    with pytest.raises(fastio.DecodeError) as caught:
        list(strict)
    assert caught.value.record == min(hit)


ERRORS = [
    fastio.CorruptRecordError("data checksum does not match", "s3://b/x.tfrecord", 4096, 7),
    fastio.TruncatedShardError("shard ends inside a record", "/d/x.tar", 512),
    fastio.DecodeError("line is not JSON", "/d/a b.jsonl", 10, lost=1),
    fastio.TruncatedFileError("/d/x.tar", 100, 4096),
    fastio.ShardChangedError.of("https://h/x.tar"),
    fastio.IndexFileError("/i/x.fastio-index.npz", "/d/x.tar", "truncated or not an index"),
    fastio.HTTPStatusError(404, "Not Found", "https://h/x.tar"),
    fastio.CacheIntegrityError("s3://b/x.tar", "size differs"),
    fastio.CacheFullError("s3://b/x.tar", "does not fit"),
]
FIELDS = ["url", "offset", "record", "filename", "expected_end", "path", "problem", "status"]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_survives_torch_s_re_raise(error) -> None:
    from torch._utils import ExceptionWrapper

    try:
        raise error
    except fastio.FastIOError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(type(error)) as caught:
        wrapped.reraise()
    for field in FIELDS:
        assert getattr(caught.value, field, None) == getattr(error, field, None), field
    assert str(error) in str(caught.value)
    again = pickle.loads(pickle.dumps(error))  # and as workers send them, pickled
    assert (type(again), str(again)) == (type(error), str(error))


def test_checksum_damage_after_indexing_is_caught_while_reading(tmp_path) -> None:
    written = write("tfrecord", tmp_path, shards=3, per_shard=15)
    dataset = fastio.Dataset(written.pattern, shuffle=False)  # indexed while intact
    stat = os.stat(written.urls[2])
    url, offset, record = damage_tfrecord(written)
    os.utime(url, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # bit rot: same size and mtime
    with pytest.raises(fastio.CorruptRecordError) as caught:
        list(dataset)
    assert (caught.value.url, caught.value.offset, caught.value.record) == (url, offset, record)
    skipping = fastio.Dataset(written.pattern, shuffle=False, on_error="skip")
    got = list(skipping)
    lost = skipping.stats()["skipped"]
    assert lost >= 1
    assert len(got) + lost == len(written.samples)


def test_samples_before_the_damage_come_before_the_error(tmp_path) -> None:
    """Under raise, the damaged shard's intact samples before the damaged
    record reach the consumer first, as written: samples leave as decoded."""
    written = write("tfrecord", tmp_path, shards=3, per_shard=15)
    dataset = fastio.Dataset(written.pattern, shuffle=False)  # indexed while intact
    stat = os.stat(written.urls[2])
    url, offset, record = damage_tfrecord(written)
    os.utime(url, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    delivered = []
    with pytest.raises(fastio.CorruptRecordError) as caught:
        delivered.extend(dataset)
    assert (caught.value.url, caught.value.offset) == (url, offset)
    before = sum(dataset.counts[:2]) + record
    assert [key_of("tfrecord", s) for s in delivered] == list(range(before))
    for sample, row in zip(delivered, written.samples, strict=False):
        check_sample("tfrecord", sample, row)


def test_corrupt_parquet_footer(tmp_path) -> None:
    written = write("parquet", tmp_path, shards=3, per_shard=20)
    url = damage_parquet(written)
    with pytest.raises(fastio.DecodeError) as caught:
        fastio.Dataset(written.pattern)
    assert caught.value.url == url
    assert "footer" in str(caught.value)
    dataset = fastio.Dataset(written.pattern, on_error="skip")
    got = [key_of("parquet", s) for s in dataset]
    after_damage = fastio.Dataset(written.urls[1])[0]["key"]  # keys are stored positions
    assert sorted(got) == [row["key"] for row in written.samples][after_damage:]
    assert dataset.stats()["shards_skipped"] == 1
    assert dataset.layouts[0].count == 0
    with pytest.warns(fastio.SkippedSamplesWarning, match="footer"):
        fastio.Dataset(written.pattern, on_error="warn")


def test_missing_shard(tars) -> None:
    missing = tars.urls[2]
    os.unlink(missing)
    with pytest.raises(FileNotFoundError) as caught:
        fastio.Dataset(tars.pattern)
    assert caught.value.filename == missing
    dataset = fastio.Dataset(tars.pattern, on_error="skip")
    assert dataset.stats()["shards_skipped"] == 1
    assert dataset.layouts[2].count == 0
    with pytest.warns(fastio.SkippedSamplesWarning, match=missing):
        fastio.Dataset(tars.pattern, on_error="warn")
    got = sorted(key_of("webdataset", s) for s in dataset)
    first, end = fastio.Dataset(tars.urls[:2]).total, fastio.Dataset(tars.urls[3])[0]
    end_key = key_of("webdataset", end)
    assert got == [row["key"] for row in tars.samples if not first <= row["key"] < end_key]


def test_shard_vanishing_mid_epoch(tars) -> None:
    dataset = fastio.Dataset(tars.pattern, shuffle=False)
    skipping = fastio.Dataset(tars.pattern, shuffle=False, on_error="skip")
    os.unlink(tars.urls[1])  # after both indexed it
    with pytest.raises(FileNotFoundError) as caught:
        list(dataset)
    assert caught.value.filename == tars.urls[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [key_of("webdataset", s) for s in skipping]
    lost = skipping.stats()["skipped"]
    assert lost == dataset.layouts[1].count
    assert len(got) == len(tars.samples) - lost
    assert skipping.stats()["position"] == len(tars.samples)  # the epoch ran to its end


@pytest.mark.parametrize("sample", [0, 7], ids=["the first sample", "a sample inside"])
@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
def test_zeros_over_a_header_are_damage_not_the_end_of_the_shard(tmp_path, sample, batches):
    """A block of zeros written over a sample's first header (a hole a crashed
    copy leaves) reads as a tar's end marker, yet data follows it: raised as
    damage where it is, and under skip the shard goes on after it, the sample
    it hit (what is left of it) counted, never the rest of the shard dropped."""
    written = write("webdataset", tmp_path / "wds", shards=2, per_shard=16, large=True,
                    index=False)  # fmt: skip
    url = written.urls[0]
    with tarfile.open(url) as archive:
        starts = {}
        for member in archive:
            starts.setdefault(member.name.split(".", 1)[0], member.offset)
    held = len(starts)
    hole = sorted(starts.values())[sample]
    with open(url, "r+b") as handle:
        handle.seek(hole)
        handle.write(bytes(4096))
    first_key = written.samples[0]["key"]

    def keys_of(dataset: fastio.Dataset) -> list[int]:
        if batches:
            return [key_of("webdataset", {"__key__": key}) for batch in dataset.batches(4)
                    for key in batch.column("__key__").to_pylist()]  # fmt: skip
        keys = []
        for item in dataset:
            keys.append(key_of("webdataset", item))
            check_sample("webdataset", item, written.samples[keys[-1]])
        return keys

    def fresh(policy: str) -> fastio.Dataset:
        return fastio.Dataset(written.pattern, format="webdataset", shuffle=False,
                              on_error=policy, index_dir=tmp_path / policy)  # fmt: skip

    with pytest.raises(fastio.CorruptRecordError) as caught:
        keys_of(fresh("raise"))
    assert caught.value.offset == hole
    assert url in str(caught.value)
    dataset = fresh("skip")
    hurt = first_key + sample
    for epoch in range(2):  # streamed, then planned by the layout it left
        keys = keys_of(dataset)
        assert sorted(keys) == [row["key"] for row in written.samples if row["key"] != hurt]
        assert dataset.stats()["skipped"] == 1  # delivered + skipped is what the shard held
        assert len([key for key in keys if key < first_key + held]) + 1 == held, epoch


def test_a_shard_cut_while_it_is_read_is_a_changed_shard(tmp_path) -> None:
    """Indexed, a shard cut short while an epoch reads it: the bytes its
    index places are gone, so it changed (ShardChangedError, naming it),
    after the samples read before the cut, never wrong bytes."""
    written = write("webdataset", tmp_path / "wds", shards=1, per_shard=60, large=True)
    url = written.urls[0]
    dataset = fastio.Dataset(written.pattern, shuffle=False, read_size=64 << 10,
                             memory_budget=256 << 10)  # fmt: skip
    samples = iter(dataset)
    first = next(samples)
    check_sample("webdataset", first, written.samples[0])
    os.truncate(url, os.path.getsize(url) // 2)
    with pytest.raises(fastio.ShardChangedError) as caught:
        for sample in samples:
            check_sample("webdataset", sample, written.samples[key_of("webdataset", sample)])
    assert caught.value.filename == url


@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
@pytest.mark.parametrize("seen", [False, True], ids=["never seen", "indexed before the cut"])
@pytest.mark.parametrize("format_name", ["webdataset", "tfrecord", "jsonl", "npy", "fixed"])
def test_a_shard_cut_short_names_the_sample_it_cuts(tmp_path, format_name, seen, batches):
    """Under raise, the error of a shard cut inside a sample names the shard,
    the byte where that sample starts and its number in the shard."""
    written = write(format_name, tmp_path / "data", shards=2, per_shard=20, index=False)
    index_dir = str(tmp_path / "index")
    with fastio.Dataset(written.pattern, index_dir=index_dir, **written.options) as intact:
        intact.index()
        sample = intact.counts[1] // 2
        start = int(intact.layouts[1].starts[sample])
    with open(written.urls[1], "r+b") as handle:
        handle.truncate(start + 3)
    if not seen:
        index_dir = str(tmp_path / "elsewhere")
    with pytest.raises(fastio.DecodeError) as caught:  # the open may find it, or the read
        dataset = fastio.Dataset(written.pattern, index_dir=index_dir, shuffle=False,
                                 **written.options)  # fmt: skip
        for _ in dataset.batches(4) if batches else dataset:
            pass
    error = caught.value
    assert (error.url, error.offset, error.record) == (written.urls[1], start, sample), error
    assert f"(record {sample})" in str(error)
    assert str(error).count("of the shard)") <= 1, error  # said once at most, however it came


@pytest.mark.parametrize("compressed", [False, True], ids=["tar", "tar.gz"])
@pytest.mark.parametrize("batches", [False, True], ids=["samples", "batches"])
@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_tar_cut_inside_a_samples_later_member_loses_that_sample(
    tmp_path, on_error, batches, compressed
) -> None:
    """webdataset's TarWriter gives each member a pax header: a shard cut
    inside a sample's second member (its pax header and ustar header whole)
    loses that sample, which is named (its number, and the damaged member),
    not delivered with a member missing."""
    import webdataset

    path = tmp_path / "cut.tar"
    with webdataset.TarWriter(str(path)) as sink:
        for n in range(8):
            sink.write({"__key__": f"s{n:03d}", "bin": bytes([n]) * 5000,
                        "cls": str(n).encode() * 3000, "txt": b"t" * 700})  # fmt: skip
    with tarfile.open(path) as archive:
        member = archive.getmember("s004.cls")  # (its offset: its pax header's)
    data = path.read_bytes()[: member.offset_data + 1000]
    if compressed:
        path.unlink()
        path = tmp_path / "cut.tar.gz"
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    dataset = fastio.Dataset(str(path), shuffle=False, on_error=on_error,
                             index_dir=tmp_path / "index")  # fmt: skip
    got: list[dict] = []

    def epoch() -> None:
        for item in dataset.batches(3) if batches else dataset:
            got.extend(item.to_pylist() if batches else [item])

    intact = [f"s{n:03d}" for n in range(4)]
    if on_error == "raise":
        with pytest.raises(fastio.TruncatedShardError) as caught:
            epoch()
        assert (caught.value.record, caught.value.offset) == (4, member.offset)
        # (A batch is not cut from a read that failed: batches may stop sooner.)
        keys = [sample["__key__"] for sample in got]
        assert keys == (intact[: len(keys)] if batches else intact)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastio.SkippedSamplesWarning)
            epoch()
        assert [sample["__key__"] for sample in got] == intact
        assert dataset.stats()["skipped"] == 1
    assert all(sample["cls"] is not None and sample["txt"] is not None for sample in got)


@pytest.mark.parametrize("seen", [False, True], ids=["never seen", "indexed"])
@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_damaged_line_stepped_over_is_named_by_its_sample(tmp_path, seen, on_error) -> None:
    written = write("jsonl", tmp_path / "data", shards=2, per_shard=20, index=seen)
    with open(written.urls[1], "rb") as handle:
        lines = handle.read().split(b"\n")
    damaged = len(lines) // 2
    lines[damaged] = b"{" + b"x" * (len(lines[damaged]) - 1)  # as long: the index still holds
    with open(written.urls[1], "wb") as handle:
        handle.write(b"\n".join(lines))
    sample = sum(1 for line in lines[:damaged] if line.strip())  # blank lines are no samples
    dataset = fastio.Dataset(written.pattern, on_error=on_error, shuffle=False)
    if on_error == "raise":
        with pytest.raises(fastio.DecodeError) as caught:
            list(dataset)
        error = str(caught.value)
    else:
        assert sum(1 for _ in dataset) == len(written.samples) - 1
        stats = dataset.stats()
        assert stats["skipped"] == 1
        [error] = stats["errors"]
    assert f"(record {sample})" in error, error
    assert error.count("of the shard)") == 1, error
