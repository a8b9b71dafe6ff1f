"""A never-seen remote dataset behind an HTTP Range server that counts what
it serves: the first sample after the first bytes, every byte once in the
first epoch, a dataset index read with one request, exact resume and equal
counts in the first epoch, and an object replaced between epochs caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import fastio
from tests.servers import RangeServer, wait_for
from tests.shards import key_of, write

REPOSITORY = Path(__file__).resolve().parents[2]
READ_SIZE = 64 << 10


@pytest.fixture
def served(tmp_path):
    written = write("webdataset", tmp_path / "data", shards=16, per_shard=12, index=False)
    server = RangeServer(tmp_path / "data").start()
    yield written, server
    server.stop()


def remote(written, server) -> str:
    first, last = (os.path.basename(url) for url in (written.urls[0], written.urls[-1]))
    stem = first.rsplit("-", 1)[0]
    return server.url(f"{stem}-{{{first.split('-')[1].split('.')[0]}.."
                      f"{last.split('-')[1].split('.')[0]}}}.tar")  # fmt: skip


def dataset(written, server, tmp_path, name="index", **options) -> fastio.Dataset:
    return fastio.Dataset(remote(written, server), index_dir=tmp_path / name,
                          read_size=READ_SIZE, seed=2, **options)  # fmt: skip


def everything(written) -> Counter[int]:
    return Counter(row["key"] for row in written.samples)


def test_the_first_sample_comes_after_the_first_bytes(served, tmp_path) -> None:
    written, server = served
    ds = dataset(written, server, tmp_path)
    # The epoch's first shard (the order is the seed's): the same files, local.
    local = fastio.Dataset(written.pattern, index_dir=tmp_path / "local", seed=2)
    first_shard = os.path.basename(next(iter(local))["__url__"])
    local.close()
    # Only requests for the first shard's first bytes are answered until released.
    server.faults.hold = lambda name, offset: name != first_shard or offset >= READ_SIZE
    first: list[int] = []
    taker = threading.Thread(target=lambda: first.append(key_of("webdataset", next(iter(ds)))))
    taker.start()
    taker.join(60)
    try:
        assert first, "no sample arrived on the first shard's first bytes alone"
        assert server.faults.bytes_served < 2 * READ_SIZE
        assert sum(os.path.getsize(url) for url in written.urls) > 10 * READ_SIZE
    finally:
        server.faults.hold = None
    ds.close()


def test_the_first_epoch_reads_every_byte_once(served, tmp_path) -> None:
    written, server = served
    ds = dataset(written, server, tmp_path)
    assert Counter(key_of("webdataset", s) for s in ds) == everything(written)
    sizes = {os.path.basename(url): os.path.getsize(url) for url in written.urls}
    assert dict(server.faults.served) == sizes  # indexing included: nothing twice
    # The next epoch plans by samples from the indexes the first one left.
    assert len(ds) == len(written.samples)
    assert Counter(key_of("webdataset", s) for s in ds) == everything(written)


def test_tuning_the_first_epoch_reads_every_byte_once_and_counts_the_link(served, tmp_path
                                                                           ) -> None:  # fmt: skip
    """tune=True on a never-seen dataset: the tuner knows the epoch's bytes
    (its trials must end within a tenth of them), counts the link's bytes as
    they arrive, and neither re-reads nor loses anything. Windows of a minute
    cannot fit in a tenth of this epoch: the defaults stay."""
    written, server = served
    total = sum(os.path.getsize(url) for url in written.urls)
    with dataset(written, server, tmp_path, tune={"window_seconds": 60.0}) as ds:
        assert Counter(key_of("webdataset", s) for s in ds) == everything(written)
        stats = ds.stats()
    sizes = {os.path.basename(url): os.path.getsize(url) for url in written.urls}
    assert dict(server.faults.served) == sizes
    tuner = stats["tuner"]
    assert tuner["first_pass_bytes"] == total
    assert tuner["config"] == {"outstanding_requests": fastio.ReaderSettings().outstanding_requests}
    assert tuner["phase"] in ("explore", "settled")  # never a trial of other knobs
    assert stats["reader"]["bytes_arrived"] == server.faults.bytes_served


def test_with_the_shard_cache_the_first_sample_comes_before_the_shard_is_downloaded(
    served, tmp_path
) -> None:
    """A shard the cache does not hold yet is read as its download arrives:
    the first sample comes after the download's first answer, and the pass
    still fetches every byte once and leaves every shard in the cache."""
    from fastio.cache._cache import INDEX_ROOM

    written, server = served
    sizes = {os.path.basename(url): os.path.getsize(url) for url in written.urls}
    assert min(sizes.values()) > READ_SIZE  # the first answer never holds a whole shard
    ds = dataset(written, server, tmp_path, cache_dir=tmp_path / "cache",
                 cache_bytes=INDEX_ROOM + sum(sizes.values()), cache_prefetch=0)  # fmt: skip
    server.faults.hold_after = 1  # only the first data request is answered until released
    samples = iter(ds)
    first: list[int] = []
    taker = threading.Thread(target=lambda: first.append(key_of("webdataset", next(samples))))
    taker.start()
    taker.join(60)
    try:
        assert first, "no sample arrived on the download's first answer alone"
        assert server.faults.bytes_served < 2 * READ_SIZE
        assert ds.cache.stats()["shards_cached"] == 0
    finally:
        server.faults.hold_after = None
    rest = [key_of("webdataset", s) for s in samples]
    assert Counter(first + rest) == everything(written)
    assert dict(server.faults.served) == sizes  # every byte once, indexing included
    stats = ds.cache.stats()
    assert stats["shards_cached"] == len(sizes)
    assert stats["bytes_downloaded"] == sum(sizes.values())
    requests = server.faults.requests
    assert Counter(key_of("webdataset", s) for s in ds) == everything(written)
    assert server.faults.requests == requests  # the next epoch reads the cache alone
    ds.close()


CONSTRUCT = """
import json, sys
import fastio
ds = fastio.Dataset(sys.argv[1], index_dir=sys.argv[2])
print(json.dumps({"samples": len(ds), "read": ds.reader.stats().bytes_read}))
"""


def test_a_dataset_index_is_read_with_one_request_by_each_process(served, tmp_path) -> None:
    written, server = served
    out = tmp_path / "data" / "dataset.fastio-index.npz"  # served beside the shards
    made = subprocess.run(
        [str(Path(sys.executable).parent / "fastio-bench"), "index", remote(written, server),
         "--index", str(out), "--json"],
        capture_output=True, text=True, check=True, cwd=REPOSITORY,
    )  # fmt: skip
    assert json.loads(made.stdout)["samples"] == len(written.samples)
    sizes = {os.path.basename(url): os.path.getsize(url) for url in written.urls}
    assert dict(server.faults.served) == sizes  # indexing read every shard once
    server.faults.gets.clear()
    server.faults.served.clear()
    for process in range(3):
        result = subprocess.run(
            [sys.executable, "-c", CONSTRUCT, remote(written, server),
             str(tmp_path / str(process))],
            capture_output=True, text=True, check=True, cwd=REPOSITORY,
        )  # fmt: skip
        assert json.loads(result.stdout) == {"samples": len(written.samples), "read": 0}
    assert dict(server.faults.gets) == {"dataset.fastio-index.npz": 3}  # no shard read


def test_exact_resume_in_the_first_epoch(served, tmp_path) -> None:
    written, server = served
    full = [key_of("webdataset", s) for s in dataset(written, server, tmp_path, "full")]
    first = dataset(written, server, tmp_path, "first")
    iterator = iter(first)
    head = [key_of("webdataset", next(iterator)) for _ in range(70)]
    resumed = dataset(written, server, tmp_path, "resumed")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + [key_of("webdataset", s) for s in resumed] == full


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_equal_counts_across_two_ranks_in_the_first_epoch(served, tmp_path, remainder) -> None:
    written, server = served
    counts, got = [], Counter()
    for rank in range(2):
        ds = dataset(written, server, tmp_path, f"r{rank}", rank=rank, world_size=2,
                     remainder=remainder)  # fmt: skip
        keys = [key_of("webdataset", s) for s in ds]
        counts.append(len(keys))
        got.update(keys)
    assert counts[0] == counts[1]
    assert set(got) <= set(everything(written))


def test_indexing_a_never_seen_dataset_asks_about_many_objects_at_once(tmp_path) -> None:
    """``index()`` (what ``fastio-bench index`` and equal counts across ranks
    run) scans ``outstanding_requests`` objects at a time, and asks about
    many more at once ahead of their scans: not a round trip per object."""
    from fastio.sources._remote import STAT_REQUESTS

    shards = STAT_REQUESTS + 16
    written = write("webdataset", tmp_path / "data", shards=shards, per_shard=2, index=False)
    server = RangeServer(tmp_path / "data").start()
    server.faults.hold_heads = True
    try:
        ds = dataset(written, server, tmp_path, outstanding_requests=4)
        indexer = threading.Thread(target=ds.index)
        indexer.start()
        wait_for(lambda: sum(server.faults.heads.values()) >= STAT_REQUESTS, timeout=60)
        server.faults.hold_heads = False
        indexer.join(60)
        assert not indexer.is_alive()
        assert len(ds) == len(written.samples)
        assert sum(server.faults.heads.values()) == shards  # each object asked about once
        assert Counter(key_of("webdataset", s) for s in ds) == everything(written)
    finally:
        server.faults.hold_heads = False
        server.stop()


def test_a_shuffled_never_seen_dataset_asks_first_about_what_it_reads_first(tmp_path) -> None:
    """Shuffled, the first objects a never-seen dataset streams are not the
    first it names: those it reads first are the ones asked about at open
    (their answers then come with the dataset index's)."""
    from fastio.dataset._layouts import _ASKED_WITH_THE_INDEX
    from fastio.plan._participant import Participant
    from fastio.plan._stream import stream_shards
    from fastio.spec._dataset import ShuffleSettings

    shards = 3 * _ASKED_WITH_THE_INDEX
    written = write("webdataset", tmp_path / "data", shards=shards, per_shard=2, index=False)
    server = RangeServer(tmp_path / "data").start()
    server.faults.hold_heads = True
    try:
        ds = dataset(written, server, tmp_path)  # shuffled (the default)
        wait_for(lambda: sum(server.faults.heads.values()) >= _ASKED_WITH_THE_INDEX, timeout=60)
        asked = set(server.faults.heads)
        server.faults.hold_heads = False
        assert Counter(key_of("webdataset", s) for s in ds) == everything(written)
        # The epoch's plan: the order its stream read the objects in.
        plan = [os.path.basename(written.urls[shard]) for shard in stream_shards(
            shards, None, ShuffleSettings(seed=2), 0, Participant(0, 1))]  # fmt: skip
        assert ds._stream is not None
        assert [os.path.basename(ds.urls[shard]) for shard in ds._stream.shards] == plan
        assert sorted(server.faults.gets) == sorted(plan)
        assert asked == set(plan[:_ASKED_WITH_THE_INDEX])
        assert asked != set(sorted(plan)[:_ASKED_WITH_THE_INDEX])  # not the first named
    finally:
        server.faults.hold_heads = False
        server.stop()


def test_ranks_share_a_never_seen_dataset_by_objects(tmp_path) -> None:
    """remainder="exact": each of 2 ranks streams half the objects, whole,
    however their sizes differ (not asked before their reads, they play no
    part), and every sample comes exactly once across them."""
    big = write("webdataset", tmp_path / "data" / "big", shards=1, per_shard=200, index=False)
    small = write("webdataset", tmp_path / "data" / "small", shards=7, per_shard=3, index=False)
    server = RangeServer(tmp_path / "data").start()
    try:
        local = big.urls + small.urls
        urls = [server.url(f"{Path(url).parent.name}/{Path(url).name}") for url in local]
        held = Counter({url: sum(1 for _ in fastio.Dataset(path))
                        for url, path in zip(urls, local, strict=True)})  # fmt: skip
        got: Counter[tuple[str, int]] = Counter()
        for rank in range(2):
            ds = fastio.Dataset(urls, index_dir=tmp_path / f"r{rank}", seed=2, rank=rank,
                                world_size=2)  # fmt: skip
            samples = [(s["__url__"], key_of("webdataset", s)) for s in ds]
            mine = Counter(url for url, _ in samples)
            assert len(mine) == len(urls) // 2
            assert all(held[url] == count for url, count in mine.items())  # each whole
            got.update(samples)
        assert Counter(url for url, _ in got) == held
        assert set(got.values()) == {1}
    finally:
        server.stop()


def test_an_object_replaced_between_epochs_is_caught(served, tmp_path) -> None:
    written, server = served
    ds = dataset(written, server, tmp_path, shuffle=False)
    skipping = dataset(written, server, tmp_path, "skip", shuffle=False, on_error="skip")
    assert len(list(ds)) == len(list(skipping)) == len(written.samples)  # indexed, then
    replaced = written.urls[5]
    data = bytearray(Path(replaced).read_bytes())
    data[600] ^= 1  # another object (another ETag), the same size
    Path(replaced).write_bytes(data)
    with pytest.raises(fastio.ShardChangedError) as caught:
        list(ds)
    assert caught.value.filename.endswith(os.path.basename(replaced))
    got = list(skipping)
    assert len(got) + skipping.stats()["skipped"] == len(written.samples)
    assert len(got) == len(written.samples) - skipping.counts[5]


def test_a_never_seen_dataset_opens_without_asking_about_each_object(tmp_path) -> None:
    """Not indexed yet, a dataset opens without an answer about any object
    (a bucket of thousands does not wait for a HEAD of each before its first
    sample); its first epoch asks about its objects in reading order, many at
    once (each a small HEAD), as its reads go, and about each once."""
    from fastio.dataset._layouts import _ASKED_WITH_THE_INDEX
    from fastio.sources._remote import STAT_REQUESTS

    shards = STAT_REQUESTS + 16
    written = write("webdataset", tmp_path / "data", shards=shards, per_shard=2, index=False)
    server = RangeServer(tmp_path / "data").start()
    server.faults.hold_heads = True  # every HEAD waits, in flight, until released
    opened: list[fastio.Dataset] = []
    try:
        opener = threading.Thread(target=lambda: opened.append(
            dataset(written, server, tmp_path, outstanding_requests=4)))  # fmt: skip
        opener.start()
        opener.join(60)
        assert opened, "the dataset waited for answers about its objects to open"
        assert sum(server.faults.heads.values()) <= _ASKED_WITH_THE_INDEX
        got: list[int] = []
        with opened[0] as ds:
            taker = threading.Thread(target=lambda: got.extend(key_of("webdataset", s)
                                                              for s in ds))  # fmt: skip
            taker.start()
            wait_for(lambda: sum(server.faults.heads.values()) >= STAT_REQUESTS, timeout=60)
            assert not got  # a read waits for its object's size
            server.faults.hold_heads = False
            taker.join(60)
            assert not taker.is_alive(), "the epoch did not end once the answers came"
        assert Counter(got) == everything(written)
        assert sum(server.faults.heads.values()) == shards  # each object asked about once
    finally:
        server.faults.hold_heads = False
        server.stop()


def test_an_object_cut_after_the_open_asked_about_it_is_a_changed_shard(served, tmp_path):
    """Not indexed yet, an object the open asked about (its size, in the
    background) and cut before its read: the answers to its reads name
    another size than it had, so it changed (ShardChangedError, naming it),
    not damage (the shard is not cut as it was written)."""
    written, server = served
    ds = dataset(written, server, tmp_path, shuffle=False)
    cut = written.urls[0]  # the first read in stored order
    name = os.path.basename(cut)
    wait_for(lambda: server.faults.heads[name] >= 1)  # the open asked about it
    os.truncate(cut, os.path.getsize(cut) // 2)
    with pytest.raises(fastio.ShardChangedError) as caught:
        list(ds)
    assert caught.value.filename.endswith(name)
