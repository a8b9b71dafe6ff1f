"""Remote shards through fsspec against real servers on loopback: an HTTP
server with Range (and faults on demand) and moto's S3 server. The same
dataset read from local files, HTTP and S3 yields identical samples."""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import pickle
import random
import shutil
import socket
import sqlite3
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import fastio
from fastio import ByteRange, RangeIgnoredError
from fastio.cache._cache import INDEX_ROOM, ShardCache
from fastio.sources._objects import absolute_path
from tests.conftest import ResourceSnapshot
from tests.servers import RangeServer, S3Server, raised_within
from tests.shards import FORMATS, key_of, write


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("served")


@pytest.fixture(scope="module")
def http(folder):
    server = RangeServer(folder).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def s3():
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_faults(http):
    http.faults = type(http.faults)()


def without_url(sample):
    """A sample without the URL it came from (which differs by source)."""
    if isinstance(sample, dict) and "__url__" in sample:
        return {k: v for k, v in sample.items() if k != "__url__"}
    return sample


def remote_pattern(written, base: str) -> str:
    return base + written.pattern.rsplit("/", 1)[1]


def test_reader_reads_ranges_as_stored(http, s3, folder) -> None:
    data = random.Random(1).randbytes(3_000_000)
    (folder / "blob.bin").write_bytes(data)
    s3_url = s3.upload(str(folder / "blob.bin"), "blob.bin")
    ranges = [(0, None), (1, 10), (4095, 70_000), (2_999_000, 1000)]
    for url, options in ((http.url("blob.bin"), {}), (s3_url, s3.storage_options())):
        with fastio.Reader(
            read_size=256 << 10, outstanding_requests=8, storage_options=options
        ) as reader:
            for offset, length in ranges:
                got = b"".join(
                    bytes(c.data) for c in reader.stream([fastio.ByteRange(url, offset, length)])
                )
                end = len(data) if length is None else offset + length
                assert got == data[offset:end]
            # The 3 MB read went as requests of 16 KiB, 32 KiB, ... 1 MiB and
            # the rest (growing: see test_remote_requests.py); each other
            # range (none longer than a read), one.
            assert reader.stats().requests == 8 + 3


@pytest.mark.parametrize("format_name", FORMATS)
def test_same_samples_from_local_http_and_s3(http, s3, folder, tmp_path, format_name) -> None:
    written = write(format_name, folder / format_name, shards=3, per_shard=15, index=False)
    for url in written.urls:
        s3.upload(url, f"{format_name}/{os.path.basename(url)}")
    options = {**written.options, "seed": 5, "shuffle_buffer": 30_000, "index_dir": tmp_path}
    local = [key_of(format_name, s) for s in fastio.Dataset(written.pattern, **options)]
    over_http = fastio.Dataset(remote_pattern(written, http.url(f"{format_name}/")), **options)
    over_s3 = fastio.Dataset(
        remote_pattern(written, f"s3://{s3.bucket}/{format_name}/"),
        storage_options=s3.storage_options(),
        **options,
    )
    assert [key_of(format_name, s) for s in over_http] == local
    assert [key_of(format_name, s) for s in over_s3] == local
    assert sorted(local) == [row["key"] for row in written.samples]
    # Samples, not only keys, are the same.
    stored = {**options, "shuffle": False}
    first_local = list(fastio.Dataset(written.pattern, **stored))
    first_http = list(
        fastio.Dataset(remote_pattern(written, http.url(f"{format_name}/")), **stored)
    )
    assert len(first_http) == len(first_local)
    mismatched = [
        i
        for i, (a, b) in enumerate(zip(first_http, first_local, strict=True))
        if repr(without_url(a)) != repr(without_url(b))
    ]
    assert not mismatched, f"samples {mismatched[:5]} differ"


def test_an_object_store_prefix_names_the_shards_under_it(s3, folder, tmp_path) -> None:
    """``s3://bucket/train/`` reads the shards directly under the prefix, as
    a local folder does: not what lies beside them, nor deeper."""
    written = write("webdataset", folder / "prefixed", shards=3, per_shard=10, index=False)
    for url in written.urls:
        s3.upload(url, f"prefixed/train/{os.path.basename(url)}")
    (folder / "readme.txt").write_text("what the shards are\n")
    s3.upload(str(folder / "readme.txt"), "prefixed/train/README.txt")
    s3.upload(written.urls[0], "prefixed/train/_SUCCESS")
    s3.upload(written.urls[0], "prefixed/train/deeper/other-0000.tar")
    options = {"storage_options": s3.storage_options(), "index_dir": tmp_path, "shuffle": False}
    with fastio.Dataset(f"s3://{s3.bucket}/prefixed/train/", **options) as dataset:
        assert dataset.urls == [f"s3://{s3.bucket}/prefixed/train/{os.path.basename(url)}"
                                for url in written.urls]  # fmt: skip
        keys = [key_of("webdataset", sample) for sample in dataset]
    assert keys == [row["key"] for row in written.samples]
    with pytest.raises(FileNotFoundError, match=r"no shard files.*train"):
        fastio.Dataset(f"s3://{s3.bucket}/prefixed/", **options)


@pytest.mark.parametrize("named", ["prefix", "glob"])
def test_a_listing_finds_the_objects_as_they_are_now(s3, folder, tmp_path, named) -> None:
    """Each dataset lists an object-store folder anew, and asks about its
    objects anew: one uploaded since an earlier listing in the process is
    read, and one replaced since it was indexed is found changed (fsspec
    keeps listings in its filesystem, shared by the process, and would
    answer from them)."""
    written = write("webdataset", folder / f"relisted-{named}", shards=3, per_shard=10,
                    index=False)  # fmt: skip
    other = write("webdataset", folder / f"other-{named}", shards=1, per_shard=17, seed=9,
                  index=False)  # fmt: skip
    key = f"relisted-{named}/train"
    names = [os.path.basename(url) for url in written.urls]
    for url, name in zip(written.urls[:2], names[:2], strict=True):
        s3.upload(url, f"{key}/{name}")
    url = f"s3://{s3.bucket}/{key}/" + ("" if named == "prefix" else "*.tar")
    options = {"storage_options": s3.storage_options(), "index_dir": tmp_path, "shuffle": False}
    counts = [sum(1 for _ in fastio.Dataset(local, index_dir=tmp_path / "local"))
              for local in written.urls]  # fmt: skip
    with fastio.Dataset(url, **options) as dataset:
        assert sum(1 for _ in dataset) == sum(counts[:2])
    s3.upload(written.urls[2], f"{key}/{names[2]}")
    with fastio.Dataset(url, **options) as dataset:
        assert len(dataset.urls) == 3
        assert sum(1 for _ in dataset) == sum(counts)
        s3.upload(other.urls[0], f"{key}/{names[0]}")  # replaced between two epochs
        dataset.set_epoch(1)
        with pytest.raises(fastio.ShardChangedError):
            list(dataset)
    replaced = sum(1 for _ in fastio.Dataset(other.urls[0], index_dir=tmp_path / "local"))
    with fastio.Dataset(url, **options) as dataset:  # the next dataset reads it as it is
        assert sum(1 for _ in dataset) == replaced + sum(counts[1:])


@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_an_s3_object_replaced_while_it_is_read(s3, tmp_path, indexed) -> None:
    """An object uploaded anew while an epoch reads it: each range is asked
    of the object as it was (S3's If-Match), so the read fails with
    ShardChangedError rather than go on in the new object's bytes (a shard
    made of both: samples of each, and one of neither)."""
    import webdataset

    def shard(tag: str) -> bytes:
        buffer = io.BytesIO()
        with webdataset.TarWriter(buffer) as sink:
            for n in range(200):
                sink.write({"__key__": f"{tag}{n:03d}", "bin": bytes([n % 251]) * 50_000})
        return buffer.getvalue()

    old, new = shard("a"), shard("b")
    assert len(old) == len(new)
    key = f"replaced-{'indexed' if indexed else 'new'}/t-0.tar"
    s3.filesystem().pipe(f"{s3.bucket}/{key}", old)
    options = {"storage_options": s3.storage_options(), "index_dir": tmp_path, "shuffle": False,
               "memory_budget": "1MiB", "remote_memory_budget": "1MiB", "outstanding_requests": 1,
               "read_size": 65536}  # fmt: skip
    url = f"s3://{s3.bucket}/{key}"
    if indexed:
        fastio.Dataset(url, **options).index().close()
    got = []
    with fastio.Dataset(url, **options) as dataset, pytest.raises(fastio.ShardChangedError):
        for sample in dataset:
            got.append(sample["__key__"])
            if len(got) == 3:
                s3.filesystem().pipe(f"{s3.bucket}/{key}", new)
    assert 3 <= len(got) < 200
    assert 3 <= len(got) < 60
    assert all(name.startswith("a") for name in got)


def test_an_empty_prefix_is_named_as_holding_nothing(s3, tmp_path) -> None:
    options = {"storage_options": s3.storage_options(), "index_dir": tmp_path}
    with pytest.raises(FileNotFoundError, match="nothing is stored under") as caught:
        fastio.Dataset(f"s3://{s3.bucket}/no-such-prefix/", **options)
    assert caught.value.filename == f"s3://{s3.bucket}/no-such-prefix/"


@pytest.mark.parametrize("named", ["shards", "prefix"])
def test_a_store_that_cannot_be_reached_is_a_fastio_error_naming_the_url(tmp_path, named
                                                                         ) -> None:  # fmt: skip
    """botocore's connection errors are no OSError: they come as fastio's,
    a ConnectionError too, naming what was asked for."""
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    options = {"key": "testing", "secret": "testing",
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
               "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}",
                                 "region_name": "us-east-1"}}  # fmt: skip
    url = "s3://data/train-{0..3}.tar" if named == "shards" else "s3://data/train/"
    with pytest.raises(fastio.RemoteConnectionError) as caught:  # noqa: SIM117 (the open too)
        with fastio.Dataset(url, storage_options=options, index_dir=tmp_path,
                            on_error="skip") as dataset:  # fmt: skip
            list(dataset)
    assert isinstance(caught.value, ConnectionError)
    assert caught.value.filename.startswith("s3://data/")


@pytest.fixture(scope="module")
def tars(folder):
    return write("webdataset", folder / "faulty", shards=4, per_shard=20, index=False)


def http_dataset(http, tars, tmp_path, **options):
    return fastio.Dataset(
        remote_pattern(tars, http.url("faulty/")),
        shuffle=False,
        index_dir=tmp_path,
        read_size=64 << 10,
        **options,
    )


def test_5xx_bursts_and_dropped_connections_are_retried(http, tars, tmp_path) -> None:
    expected = [row["key"] for row in tars.samples]
    # 7 faults may all hit one request (a stream's first goes alone): more retries than that.
    dataset = http_dataset(http, tars, tmp_path, retries=8)
    http.faults.errors_5xx, http.faults.drops = 4, 3
    assert [key_of("webdataset", s) for s in dataset] == expected
    assert http.faults.errors_5xx == http.faults.drops == 0


def test_stalls_time_out_and_are_retried(http, tars, tmp_path) -> None:
    dataset = http_dataset(http, tars, tmp_path, request_timeout=0.5)
    http.faults.stalls, http.faults.stall_seconds = 2, 30
    assert len(list(dataset)) == len(tars.samples)


@pytest.mark.parametrize("fault", ["errors_5xx", "stalls", "drops"])
def test_giving_up_names_url_offset_and_attempts(http, tars, tmp_path, fault) -> None:
    """The error a read gives up with is fastio's, of the kind of its failure
    (an HTTP status kept; a timeout or a failed connection also the built-in
    a caller may catch), naming the URL, offset and attempts."""
    dataset = http_dataset(http, tars, tmp_path, retries=2, retry_seconds=5,
                           request_timeout=0.5)  # fmt: skip
    setattr(http.faults, fault, 1000)
    with pytest.raises(fastio.FastIOError, match="gave up after 3 attempts") as caught:
        list(dataset)
    error = caught.value
    assert isinstance(error, OSError)
    assert error.filename == dataset.urls[0]
    assert "at offset 0" in str(error)
    if fault == "errors_5xx":
        assert isinstance(error, fastio.HTTPStatusError)
        assert error.status == 503
    else:
        assert isinstance(error, fastio.RemoteReadError)
        refined = TimeoutError if fault == "stalls" else ConnectionError
        assert isinstance(error, refined)
    assert pickle.loads(pickle.dumps(error)).filename == error.filename


@pytest.mark.parametrize("cache", [False, True], ids=["read", "cached"])
@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_a_server_that_answers_part_of_each_range(http, tars, tmp_path, indexed, cache) -> None:
    """A server may answer part of a range, its Content-Range saying which:
    the rest is asked for, and every sample comes whole, read or downloaded
    into the shard cache."""
    options = {"cache_dir": tmp_path / "cache", "cache_bytes": 1 << 30} if cache else {}
    http.faults.range_cap = 3001  # the index is read so too
    dataset = http_dataset(http, tars, tmp_path / "index", **options)
    if indexed:
        dataset.index()
    got = [without_url(sample) for sample in dataset]
    # (Answers of another test's reads still on their way may be recorded too.)
    assert any(length == 3001 for _, _, length in http.faults.asked)  # answered in part
    expected = [
        without_url(s)
        for s in fastio.Dataset(tars.pattern, shuffle=False, index_dir=tmp_path / "local")
    ]
    assert len(got) == len(expected) == len(tars.samples)
    assert [repr(s) for s in got] == [repr(s) for s in expected]


@pytest.mark.parametrize("cache", [False, True], ids=["read", "cached"])
@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_a_range_answered_in_another_encoding_is_refused(
    http, tars, tmp_path, indexed, cache
) -> None:
    """fastio's client asks for bytes as stored: a range answered gzip-encoded
    anyway is refused, never taken for the object's bytes (nor cached as
    them). Under raise an HTTPStatusError names the encoding and the URL;
    under skip the shards count as skipped, nothing escapes, and closing
    leaves no download's file open."""
    options = {"cache_dir": tmp_path / "cache", "cache_bytes": 1 << 30} if cache else {}

    def dataset(on_error: str) -> fastio.Dataset:
        if indexed:  # (not through the cache, which would download the shards whole)
            http_dataset(http, tars, tmp_path / on_error).index().close()
        return http_dataset(http, tars, tmp_path / on_error, on_error=on_error, retries=1,
                            **options)  # fmt: skip

    raising, skipping = dataset("raise"), dataset("skip")
    http.faults.gzip_ranges = True
    with pytest.raises(fastio.HTTPStatusError, match="answered encoded") as caught:
        list(raising)
    assert caught.value.filename in raising.urls
    raising.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastio.SkippedSamplesWarning)
        got = list(skipping)
    stats = skipping.stats()
    assert got == []
    if indexed:
        assert stats["skipped"] == len(tars.samples)
    else:
        assert stats["shards_skipped"] == len(tars.urls)
    skipping.close()
    gc.collect()
    # (A descriptor the reader's loop closes meanwhile is passed by, not raised.)
    assert not [name for name in _open_files() if str(tmp_path) in name]


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
def test_a_question_about_an_object_that_is_never_answered_times_out(
    http, folder, tmp_path, monkeypatch, client
) -> None:
    """A server that takes the question about an object's size (a HEAD) and
    never answers fails the read that needs it after ``request_timeout``,
    with a TimeoutError naming the object, through fastio's client and
    through fsspec's aiohttp alike (whose own bound is five minutes)."""
    if client == "aiohttp":
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    written = write("webdataset", folder / f"unanswered-{client}", shards=2, per_shard=3,
                    index=False)  # fmt: skip
    url = http.url(f"unanswered-{client}/" + written.pattern.rsplit("/", 1)[1])
    http.faults.hold_heads = True  # every HEAD waits until released

    def epoch() -> None:
        with fastio.Dataset(url, index_dir=tmp_path / "index", shuffle=False,
                            request_timeout=0.5, retries=0) as dataset:  # fmt: skip
            list(dataset)

    try:  # the HEAD is held until released
        error = raised_within(epoch, 120, "the read waits for an answer that never comes")
    finally:
        http.faults.hold_heads = False
    assert isinstance(error, TimeoutError)
    shards = {http.url(f"unanswered-{client}/{os.path.basename(path)}") for path in written.urls}
    assert error.filename in shards


@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
@pytest.mark.parametrize("format_name", ["webdataset", "jsonl", "lines"])
def test_a_shard_cut_by_a_failed_read(http, folder, tmp_path, format_name, indexed) -> None:
    """A shard whose read fails midway, after its retries. Under raise: the
    read's error, naming the URL and offset, not damage. Under skip: every
    sample before the failure intact, the rest of the shard left out and
    counted (never seen, the shard; indexed, its samples), every other shard
    whole. The bytes before the failure are never taken for the shard's end
    (its last record or line cut there would be reported as damage, or
    delivered cut)."""
    written = write(format_name, folder / f"cut-{format_name}", shards=3, per_shard=40,
                    index=False)  # fmt: skip
    shards = [[without_url(s) for s in fastio.Dataset(url, shuffle=False, index_dir=tmp_path / "l",
                                                      **written.options)]
              for url in written.urls]  # fmt: skip
    # The first shard: never seen, its first request is a small one (a pass
    # starts with small pieces); the later ones fail.
    name = f"cut-{format_name}/{os.path.basename(written.urls[0])}"

    def dataset(on_error: str) -> fastio.Dataset:
        made = fastio.Dataset(remote_pattern(written, http.url(f"cut-{format_name}/")),
                              shuffle=False, index_dir=tmp_path / on_error, read_size=4096,
                              retries=1, on_error=on_error, **written.options)  # fmt: skip
        return made.index() if indexed else made

    raising, skipping = dataset("raise"), dataset("skip")
    http.faults.served.clear()  # of the indexing
    http.faults.failing = lambda asked, offset: asked == name and offset > 8192
    got: list[object] = []
    with pytest.raises(OSError, match="HTTP 503") as caught:
        got.extend(without_url(s) for s in raising)
    assert not isinstance(caught.value, fastio.DecodeError)
    assert caught.value.filename.endswith(name)
    assert "at offset" in str(caught.value)
    assert "gave up after 2 attempts" in str(caught.value)
    assert got == shards[0][: len(got)]
    served = http.faults.served[name]
    got = [without_url(s) for s in skipping]
    before = len(got) - len(shards[1]) - len(shards[2])
    assert 0 <= before < len(shards[0])
    assert got == shards[0][:before] + shards[1] + shards[2]
    assert 0 < served < os.path.getsize(written.urls[0])  # it was cut
    stats = skipping.stats()
    lost = len(shards[0]) - before
    assert (stats["skipped"], stats["shards_skipped"]) == ((lost, 0) if indexed else (0, 1))


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_an_object_replaced_while_it_is_read(http, folder, tmp_path, monkeypatch, indexed,
                                             client) -> None:  # fmt: skip
    """The object is replaced between two requests of one read of it (the
    server's answers name another ETag from then on): its bytes would mix
    two objects. Under raise: ShardChangedError naming it, after the
    samples before. Under skip: the rest of it is left out and counted.
    Through fastio's HTTP client and through fsspec's aiohttp alike."""
    if client == "aiohttp":
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    written = write("webdataset", folder / f"replaced-{indexed}-{client}", shards=2,
                    per_shard=40, index=False)  # fmt: skip
    shards = [[without_url(s) for s in fastio.Dataset(url, shuffle=False, index_dir=tmp_path / "l")]
              for url in written.urls]  # fmt: skip
    name = f"replaced-{indexed}-{client}/{os.path.basename(written.urls[0])}"

    def dataset(on_error: str) -> fastio.Dataset:
        made = fastio.Dataset(remote_pattern(written, http.url(f"replaced-{indexed}-{client}/")),
                              shuffle=False, index_dir=tmp_path / on_error, read_size=4096,
                              retries=1, on_error=on_error)  # fmt: skip
        return made.index() if indexed else made

    def replaced_past(at: int) -> Callable[[str, int], bool]:
        http.faults.asked.clear()

        def hold(asked: str, offset: int) -> bool:
            """Replaces the object (same bytes, a new mtime: a new ETag) as
            the first request past ``at`` comes, once the request of its
            first bytes was answered (until then that request waits)."""
            if asked == name and offset > at and not done:
                if (name, 0) not in {(a, o) for a, o, _ in http.faults.asked}:
                    return True
                new = Path(written.urls[0]).with_suffix(".new")
                new.write_bytes(Path(written.urls[0]).read_bytes())
                os.utime(new, ns=(time.time_ns(), time.time_ns() + 10**9))
                os.replace(new, written.urls[0])
                done.append(offset)
            return False

        done: list[int] = []
        return hold

    raising = dataset("raise")
    http.faults.hold = replaced_past(8192)
    got: list[object] = []
    # Indexed, a read may also find it changed against its index first.
    changed = r"changed (while it was read|since it was indexed)"
    with pytest.raises(fastio.ShardChangedError, match=changed) as caught:
        got.extend(without_url(s) for s in raising)
    assert caught.value.filename.endswith(name)
    assert got == shards[0][: len(got)]
    http.faults.hold = None
    skipping = dataset("skip")  # (indexed: the object as it is now)
    http.faults.hold = replaced_past(8192)
    got = [without_url(s) for s in skipping]
    http.faults.hold = None
    before = len(got) - len(shards[1])
    assert 0 <= before < len(shards[0])
    assert got == shards[0][:before] + shards[1]
    stats = skipping.stats()
    lost = len(shards[0]) - before
    assert (stats["skipped"], stats["shards_skipped"]) == ((lost, 0) if indexed else (0, 1))


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
def test_an_object_replaced_while_the_shard_cache_downloads_it(
    http, folder, tmp_path, monkeypatch, client
) -> None:
    """The shard cache downloads an object in ranges: one replaced between
    them is caught as it is by reads (never cached as one shard made of
    both), under raise and skip."""
    if client == "aiohttp":
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    base = f"cached-{client}"
    written = write("webdataset", folder / base, shards=2, per_shard=40, index=False)
    shards = [[without_url(s) for s in fastio.Dataset(url, shuffle=False, index_dir=tmp_path / "l")]
              for url in written.urls]  # fmt: skip
    name = f"{base}/{os.path.basename(written.urls[0])}"

    def replace_once(asked: str, offset: int) -> bool:
        # The object replaced (a new ETag) as the first request past its
        # first 8 KiB comes, once the request of its first bytes was answered.
        if asked == name and offset > 8192 and not done:
            if (name, 0) not in {(a, o) for a, o, _ in http.faults.asked}:
                return True
            os.utime(written.urls[0], ns=(time.time_ns(), time.time_ns() + 10**9))
            done.append(offset)
        return False

    for on_error in ("raise", "skip"):
        done: list[int] = []
        http.faults.asked.clear()
        http.faults.hold = replace_once
        dataset = fastio.Dataset(remote_pattern(written, http.url(f"{base}/")), shuffle=False,
                                 index_dir=tmp_path / on_error, read_size=4096, retries=1,
                                 on_error=on_error, cache_dir=tmp_path / f"cache-{on_error}",
                                 cache_bytes=64 << 20)  # fmt: skip
        got: list[object] = []
        if on_error == "raise":
            with pytest.raises(fastio.ShardChangedError, match="changed while it was read"):
                got.extend(without_url(s) for s in dataset)
        else:
            got = [without_url(s) for s in dataset]
            assert got[len(got) - len(shards[1]) :] == shards[1]
        http.faults.hold = None
        assert done  # it was replaced mid-download
        first = len(got) - (len(shards[1]) if on_error == "skip" else 0)
        assert got[:first] == shards[0][:first]  # none of the new object's samples among them
        dataset.close()


def test_a_server_ignoring_range_is_an_error(http, tars, tmp_path) -> None:
    dataset = http_dataset(http, tars, tmp_path)
    http.faults.ignore_range = True
    with pytest.raises(RangeIgnoredError, match="ignores Range") as caught:
        list(dataset)
    assert caught.value.filename == dataset.urls[0]


def test_a_shard_deleted_mid_epoch(http, tars, tmp_path) -> None:
    # Indexed first (a streamed epoch cannot count what a missing shard held).
    dataset = http_dataset(http, tars, tmp_path).index()
    skipping = http_dataset(http, tars, tmp_path, on_error="skip").index()
    gone = dataset.urls[2]
    http.faults.missing.add(gone.rsplit("/", 2)[1] + "/" + gone.rsplit("/", 1)[1])
    with pytest.raises(FileNotFoundError) as caught:
        list(dataset)
    assert caught.value.filename == gone
    got = list(skipping)
    assert skipping.stats()["skipped"] == skipping.counts[2]
    assert len(got) == len(tars.samples) - skipping.counts[2]


def test_a_forbidden_object_is_a_permission_error(http, tars, tmp_path) -> None:
    denied = http_dataset(http, tars, tmp_path).urls[1]
    name = denied.rsplit("/", 2)[1] + "/" + denied.rsplit("/", 1)[1]
    http.faults.forbidden.add(name)
    # Never seen: the open asks nothing of it; the streamed read asks for its
    # size, and the answer is a 403, not "no such object".
    fresh = http_dataset(http, tars, tmp_path / "fresh")
    with pytest.raises(PermissionError, match="HTTP 403") as caught:
        list(fresh)
    assert caught.value.filename == denied
    skipping = http_dataset(http, tars, tmp_path / "fresh", on_error="skip")
    kept = [url for url in tars.urls if url != tars.urls[1]]
    local = fastio.Dataset(kept, shuffle=False, index_dir=tmp_path / "local")
    held = [key_of("webdataset", s) for s in skipping]
    assert held == [key_of("webdataset", s) for s in local]
    assert skipping.stats()["shards_skipped"] == 1
    # Reading it after it was indexed: a 403 to a range request.
    http.faults.forbidden.clear()
    dataset = http_dataset(http, tars, tmp_path).index()
    http.faults.forbidden.add(name)
    with pytest.raises(PermissionError, match="access denied") as caught:
        list(dataset)
    assert caught.value.filename == denied
    assert "at offset 0" in str(caught.value)


def test_dataloader_workers_read_remote_shards(http, tars, tmp_path) -> None:
    dataset = fastio.Dataset(remote_pattern(tars, http.url("faulty/")), index_dir=tmp_path, seed=3)
    loader = DataLoader(
        dataset,
        batch_size=8,
        num_workers=2,
        collate_fn=lambda samples: [key_of("webdataset", s) for s in samples],
    )
    got = [k for batch in loader for k in batch]
    assert sorted(got) == [row["key"] for row in tars.samples]


def keys_of(samples: list[dict]) -> list[int]:
    return [key_of("webdataset", s) for s in samples]


def test_persistent_workers_read_a_never_seen_remote_dataset_each_epoch(http, tars, tmp_path
                                                                         ) -> None:  # fmt: skip
    """Persistent workers over objects nothing has asked about: each worker
    asks about and streams its own in epoch 1 (no object is read twice), and
    epoch 2 plans by the indexes the workers left; every sample once each
    epoch."""
    dataset = fastio.Dataset(remote_pattern(tars, http.url("faulty/")), index_dir=tmp_path, seed=3)
    # Workers fork while the open's first questions may still be on their way
    # (a worker that inherited a half-done import waited for ever: a timeout).
    loader = DataLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True,
                        collate_fn=keys_of, timeout=60)  # fmt: skip
    expected = sorted(row["key"] for row in tars.samples)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        assert sorted(k for batch in loader for k in batch) == expected
        if epoch == 0:
            sizes = {"faulty/" + os.path.basename(url): os.path.getsize(url) for url in tars.urls}
            assert dict(http.faults.served) == sizes  # each object's bytes once


@pytest.mark.parametrize("indexed", [False, True], ids=["never seen", "indexed"])
def test_an_object_gone_between_epochs_with_persistent_workers(http, tars, tmp_path, indexed
                                                               ) -> None:  # fmt: skip
    """An object deleted after the first epoch, under skip, with persistent
    DataLoader workers: every other sample comes, and the gone one's samples
    count as skipped, exactly, as in one process (a worker that had not read
    it planned the epoch without it, the other with it: samples were lost;
    never seen, the epoch raised; indexed, each failed read after the first
    counted as the same one). Under raise, its FileNotFoundError names it."""
    gone = "faulty/" + os.path.basename(tars.urls[2])
    per_shard = [sum(1 for _ in fastio.Dataset(url, index_dir=tmp_path / "local"))
                 for url in tars.urls]  # fmt: skip
    for on_error in ("skip", "raise"):
        http.faults.missing.clear()
        dataset = http_dataset(http, tars, tmp_path / on_error, on_error=on_error, retries=0)
        if indexed:
            dataset.index()
        loader = DataLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True,
                            collate_fn=keys_of, timeout=60)  # fmt: skip
        assert sorted(k for batch in loader for k in batch) == [r["key"] for r in tars.samples]
        http.faults.missing.add(gone)
        dataset.set_epoch(1)
        if on_error == "raise":
            with pytest.raises(FileNotFoundError, match=os.path.basename(gone)):
                list(loader)
            continue
        skipped_before = dataset.stats()["skipped"]
        got = sorted(k for batch in loader for k in batch)
        first = sum(per_shard[:2])
        expected = [r["key"] for r in tars.samples]
        assert got == expected[:first] + expected[first + per_shard[2] :]
        assert dataset.stats()["skipped"] - skipped_before == per_shard[2]
        del loader


def _bytes_in(folder: Path) -> int:
    """What the files in ``folder`` hold, while the cache may still be
    downloading into it: a temporary renamed into place between the listing
    and its stat has the folder listed again."""
    while True:
        try:
            with os.scandir(folder) as entries:
                return sum(entry.stat().st_size for entry in entries if entry.is_file())
        except FileNotFoundError:
            continue


def test_remote_shards_are_served_from_the_shard_cache(http, tars, tmp_path) -> None:
    shard_bytes = [os.path.getsize(url) for url in tars.urls]
    limit = sum(shard_bytes) // 2 + max(shard_bytes)  # about half the dataset
    options = {"index_dir": tmp_path / "index", "cache_dir": tmp_path / "cache",
               "cache_bytes": limit, "seed": 2}  # fmt: skip
    dataset = fastio.Dataset(remote_pattern(tars, http.url("faulty/")), **options)
    expected = sorted(row["key"] for row in tars.samples)
    before = http.faults.requests
    for epoch in range(3):
        dataset.set_epoch(epoch)
        assert sorted(key_of("webdataset", s) for s in dataset) == expected
        assert _bytes_in(tmp_path / "cache") <= limit
    stats = dataset.cache.stats()
    assert stats["hits"] > 0
    assert stats["bytes_used"] <= limit
    # Whole shards were downloaded (a few large requests), then read locally.
    assert stats["bytes_downloaded"] < 3 * sum(shard_bytes)
    assert http.faults.requests - before < 3 * len(tars.urls) * 4
    same = fastio.Dataset(remote_pattern(tars, http.url("faulty/")), **{**options, "seed": 2})
    assert [key_of("webdataset", s) for s in same] == [
        key_of("webdataset", s) for s in fastio.Dataset(tars.pattern, seed=2).index()
    ]


def test_a_shard_downloaded_in_many_ranges_at_once_is_cached_byte_for_byte(
    http, folder, tmp_path
) -> None:
    """A download of 4 MiB ranges, several in flight, each received into a
    buffer an earlier range gave back once written: the copy on disk and the
    samples read while it downloads are the shard's own bytes."""
    import webdataset

    rng = random.Random(7)
    payloads = [rng.randbytes(rng.randrange(200_000, 900_000)) for _ in range(48)]
    path = folder / "many-ranges.tar"
    with webdataset.TarWriter(str(path)) as writer:
        for number, payload in enumerate(payloads):
            writer.write({"__key__": f"s{number:03d}", "bin": payload})
    assert path.stat().st_size > 6 * (4 << 20)  # ranges of 256 KiB doubling to 4 MiB, then 4 MiB
    # Answers come back out of order, each after its own delay: ranges are
    # received while those before them wait to be written.
    delays = random.Random(3)
    release: dict[int, float] = {}

    def held(name: str, start: int) -> bool:
        now = time.monotonic()
        return now < release.setdefault(start, now + delays.uniform(0, 0.08))

    http.faults.hold = held
    dataset = fastio.Dataset(http.url("many-ranges.tar"), format="webdataset",
                             shuffle=False,
                             index_dir=tmp_path / "index", cache_dir=tmp_path / "cache",
                             cache_bytes=1 << 30, outstanding_requests=8)  # fmt: skip
    with dataset:
        assert [bytes(sample["bin"]) for sample in dataset] == payloads
        assert dataset.cache is not None
        assert dataset.cache.stats()["bytes_downloaded"] == path.stat().st_size
    copies = [entry.path for entry in os.scandir(tmp_path / "cache")
              if entry.is_file() and entry.stat().st_size == path.stat().st_size]  # fmt: skip
    assert len(copies) == 1
    with open(copies[0], "rb") as copy:
        assert copy.read() == path.read_bytes()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_cache_downloads_each_shard_once_ahead_of_the_reader(
    http, tars, tmp_path, prefetch
) -> None:
    http.faults.latency = 0.02  # downloads take long enough for the reader to catch up
    total = sum(os.path.getsize(url) for url in tars.urls)
    http.faults.served.clear()
    dataset = http_dataset(http, tars, tmp_path, cache_dir=tmp_path / "cache",
                           cache_bytes=INDEX_ROOM + total, cache_prefetch=prefetch)  # fmt: skip
    assert sorted(key_of("webdataset", s) for s in dataset) == sorted(
        row["key"] for row in tars.samples
    )
    stats = dataset.cache.stats()
    dataset.close()
    # Every shard came over the network exactly once, as a download (indexing
    # included): a shard the prefetcher was still fetching was waited for, not
    # read a second time.
    assert stats["bytes_downloaded"] == total
    assert stats["misses"] + stats["prefetched"] == len(tars.urls)
    for url in tars.urls:  # each shard's bytes served once, in its download's ranges
        assert http.faults.served["faulty/" + os.path.basename(url)] == os.path.getsize(url)
    if prefetch:
        # How many the prefetcher reaches before the reader asks depends on
        # scheduling; that it fetches ahead at all does not.
        assert stats["prefetched"] > 0
    else:
        assert stats["prefetched"] == 0


@pytest.fixture(scope="module")
def large_tars(folder):
    """8 shards of one 3 MiB sample each: the reader's read-ahead (4 MiB) spans
    only two of them, so the others are left to prefetching."""
    import webdataset

    rng = random.Random(5)
    (folder / "large").mkdir()
    for shard in range(8):
        with webdataset.TarWriter(str(folder / "large" / f"big-{shard}.tar")) as writer:
            writer.write({"__key__": f"s{shard}", "bin": rng.randbytes(3 << 20)})
    return "large/big-{0..7}.tar"


def test_closing_mid_epoch_stops_prefetches_and_leaves_no_partial_files(
    http, large_tars, folder, tmp_path
) -> None:
    url = http.url(large_tars)
    options = {"shuffle": False, "index_dir": tmp_path, "read_size": 64 << 10}
    with fastio.Dataset(url, **options) as first:  # indexes first: iteration is what prefetches
        assert sum(1 for _ in first) == 8
    resources = ResourceSnapshot()
    http.faults.latency = 0.2
    total = sum(e.stat().st_size for e in os.scandir(folder / "large"))
    dataset = fastio.Dataset(url, **options, cache_dir=tmp_path / "cache", cache_bytes=total,
                             cache_prefetch=3)  # fmt: skip
    samples = iter(dataset)
    next(samples)
    http.faults.hold_after = 0  # no data request is answered now: downloads stay running
    try:
        assert dataset.cache.stats()["downloads"] > 0  # later shards are being downloaded
        dataset.close()  # while the loop may be waiting for a download: that ends too
        samples.close()
    finally:
        http.faults.hold_after = None
    cache = ShardCache(tmp_path / "cache", total)
    stats = cache.stats()
    cache.close()
    assert stats["bytes_reserved"] == stats["downloads"] == 0
    assert stats["shards_cached"] < 8
    leftovers = [e.name for e in os.scandir(tmp_path / "cache") if e.is_file()]
    assert len(leftovers) == stats["shards_cached"]  # published copies only, no temporaries
    # Threads gone, and no download's file left open (sockets are fsspec's
    # client's, shared by the process: its pool keeps idle connections, and the
    # server's side of held requests closes as they end).
    resources.assert_released(sockets=False)
    assert [name for name in _open_files() if "/.tmp-" in name] == []


def _open_files() -> list[str]:
    """What this process's descriptors name, sockets, pipes and anonymous ones aside."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/") and not target.startswith("/dev/"):
                names.append(target)
    return sorted(names)


def test_tiering_places_the_datasets_cache_copies(http, tars, tmp_path) -> None:
    from fastio.tiering import Tier, Tiering

    sizes = sorted(os.path.getsize(url) for url in tars.urls)
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    # Room on the fast tier for one copy at most: the rest must go to the slow one.
    tiering = Tiering(
        [Tier("fast", fast, sizes[-1] + 1, "ssd"), Tier("slow", slow, 1 << 30, "hdd")]
    )
    dataset = http_dataset(
        http, tars, tmp_path, cache_bytes=INDEX_ROOM + sum(sizes), tiering=tiering
    )
    assert sorted(key_of("webdataset", s) for s in dataset) == sorted(
        row["key"] for row in tars.samples
    )
    dataset.close()

    def copies(folder):
        return sorted(e.stat().st_size for e in os.scandir(folder) if e.is_file())

    assert len(copies(fast)) == 1
    assert sorted(copies(fast) + copies(slow)) == sizes  # every shard once, where placed
    assert all(tiering.tier_of(str(fast / name)).name == "fast" for name in os.listdir(fast))
    with pytest.raises(ValueError, match="not cache_dir"):
        http_dataset(http, tars, tmp_path, cache_dir=tmp_path / "c", cache_bytes=1 << 20,
                     tiering=tiering)  # fmt: skip


def test_tiering_places_the_indexes_of_remote_shards(http, tars, tmp_path, monkeypatch) -> None:
    from fastio.tiering import Tier, Tiering

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the default index folder
    urls = remote_pattern(tars, http.url("faulty/"))

    def indexes(folder):
        return sorted(p.name for p in folder.glob("index-*.fastio-index.npz"))

    for fast_bytes, where in ((1 << 20, "fast"), (100, "slow")):  # room for them, or none
        fast, slow = tmp_path / where / "fast", tmp_path / where / "slow"
        tiering = Tiering([Tier("fast", fast, fast_bytes, "ssd"),
                           Tier("slow", slow, 1 << 30, "hdd")])  # fmt: skip
        dataset = fastio.Dataset(urls, shuffle=False, read_size=64 << 10, tiering=tiering,
                                 shuffle_memory=1 << 30)  # fmt: skip
        keys = sorted(key_of("webdataset", sample) for sample in dataset)
        assert keys == sorted(row["key"] for row in tars.samples)
        dataset.close()
        placed = indexes(fast) + indexes(slow)
        assert len(placed) == len(tars.urls)  # one per shard, where the policy put it
        assert indexes(fast if where == "fast" else slow) == placed
        folder = fast if where == "fast" else slow
        # The epoch that indexed every shard left them together too, in one file.
        together = [kept.name for tier in (fast, slow) for kept in tier.glob("dataset-*")]
        assert len(together) == 1
        assert (folder / together[0]).exists()
        written = sum(os.path.getsize(folder / name) for name in placed + together)
        usage = tiering.usage()  # reserved: the arrays, and the container's estimate
        assert written <= usage[where] <= written + 2048 * len(placed + together)
        assert usage["fast"] <= fast_bytes
    assert not (tmp_path / "xdg").exists()  # nothing in the default index folder

    # A second dataset finds them: no shard is scanned again.
    served = http.faults.bytes_served
    again = fastio.Dataset(urls, shuffle=False, tiering=tiering, shuffle_memory=1 << 30)
    assert len(again) == len(tars.samples)
    assert http.faults.bytes_served == served
    again.close()


def test_a_full_cache_filesystem_reads_the_shards_remotely(http, folder, small_filesystem) -> None:
    import webdataset

    rng = random.Random(7)
    (folder / "full").mkdir()
    for shard in range(4):  # 300 KB each: two fill the 1 MiB filesystem with the index
        with webdataset.TarWriter(str(folder / "full" / f"part-{shard}.tar")) as writer:
            for sample in range(3):
                writer.write({"__key__": f"s{shard}-{sample}", "bin": rng.randbytes(100_000)})
    dataset = fastio.Dataset(http.url("full/part-{0..3}.tar"), shuffle=False,
                             index_dir=small_filesystem.parent / "index",
                             cache_dir=small_filesystem / "cache", cache_bytes=1 << 30)  # fmt: skip
    keys = [sample["__key__"] for sample in dataset]
    dataset.close()
    assert keys == [f"s{shard}-{sample}" for shard in range(4) for sample in range(3)]
    # Looked at after closing, which stops the prefetches (one may be refused
    # for room as the epoch ends), in the index itself: opening the cache again
    # would register a user, a write the full filesystem may refuse. A refused
    # download's row may outlive it when even that could not be written (the
    # next user reclaims it, as for a process killed midway); its file may not.
    cache = small_filesystem / "cache"
    index = cache / ".fastio-cache" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
        ready = {path for (path,) in db.execute("SELECT path FROM entries WHERE state = 'ready'")}
    # At most three fit, and the rest were read remotely. How many were
    # cached depends on how the downloads interleave: two running at once
    # may both run out of room (seen once in a full run of the suite).
    assert len(ready) < 4
    on_disk = {str(p) for p in cache.rglob("*") if p.is_file() and ".fastio-cache" not in p.parts}
    assert on_disk == ready  # no partial download left behind


def _small_tars(folder: Path, name: str) -> list[str]:
    import webdataset

    rng = random.Random(11)
    (folder / name).mkdir()
    for shard in range(3):
        with webdataset.TarWriter(str(folder / name / f"part-{shard}.tar")) as writer:
            for sample in range(4):
                writer.write({"__key__": f"s{shard}-{sample}", "bin": rng.randbytes(20_000)})
    return [f"s{shard}-{sample}" for shard in range(3) for sample in range(4)]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_cache_folder_removed_between_epochs_is_made_again(http, folder, tmp_path,
                                                            on_error) -> None:  # fmt: skip
    """A cleaner of temporary files (or a hand freeing the disk) removes the
    cache's folder while a dataset is open: the next epoch reads every sample,
    the folder is made again and holds the copies again."""
    name = f"removed-{on_error}"
    keys = _small_tars(folder, name)
    cache = tmp_path / "cache"
    with fastio.Dataset(http.url(f"{name}/part-{{0..2}}.tar"), shuffle=False, on_error=on_error,
                        index_dir=tmp_path / "index", cache_dir=cache,
                        cache_bytes=64 << 20) as dataset:  # fmt: skip
        assert [sample["__key__"] for sample in dataset] == keys
        shutil.rmtree(cache)
        for _ in range(2):
            assert [sample["__key__"] for sample in dataset] == keys
        assert dataset.stats()["skipped"] == 0
        # Made again, with copies in it (the copy read last before the removal
        # may still be read through its open descriptor, not copied again).
        assert [p for p in cache.rglob("*.tar") if ".fastio-cache" not in p.parts]


@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent workers"])
def test_dataloader_workers_let_go_of_the_cache_as_they_exit(http, folder, tmp_path,
                                                              persistent) -> None:  # fmt: skip
    """A worker's copy of the dataset holds the cache (its lock file, its
    index connection): it closes as the worker exits, so a loader done with
    leaves nothing of its workers in the cache."""
    name = f"exiting-{persistent}"
    keys = _small_tars(folder, name)
    cache = tmp_path / "cache"
    dataset = fastio.Dataset(http.url(f"{name}/part-{{0..2}}.tar"), index_dir=tmp_path / "index",
                             cache_dir=cache, cache_bytes=64 << 20)  # fmt: skip
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=persistent)
    assert sorted(sample["__key__"] for sample in loader) == sorted(keys)
    del loader
    gc.collect()
    dataset.close()
    assert os.listdir(cache / ".fastio-cache" / "owners") == []


def test_a_cached_shard_is_pinned_once_for_its_reads_not_per_read(http, folder,
                                                                   tmp_path) -> None:  # fmt: skip
    """Parquet files of many row groups: a read per row group. Each read
    used to pin and unpin the cached copy (two transactions of the cache's
    index per read, thousands per epoch); now a copy is asked of the cache
    once while its reads follow one another, and every row comes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "groups").mkdir()
    rows = 0
    for number in range(2):
        table = pa.table({"id": range(rows, rows + 600), "x": [b"v%d" % i for i in range(600)]})
        pq.write_table(table, folder / "groups" / f"part-{number}.parquet", row_group_size=4)
        rows += 600
    dataset = fastio.Dataset(http.url("groups/part-{0..1}.parquet"), shuffle=False,
                             index_dir=tmp_path / "index", cache_dir=tmp_path / "cache",
                             cache_bytes=64 << 20)  # fmt: skip
    with dataset:
        assert [row["id"] for row in dataset] == list(range(rows))  # downloads them
        before = dataset.cache.stats()
        assert [row["id"] for row in dataset] == list(range(rows))
        after = dataset.cache.stats()
    assert after["misses"] == before["misses"]  # read from the copies
    assert 1 <= after["hits"] - before["hits"] <= 4  # once a copy or so, not once a row group


def test_an_object_whose_length_only_a_range_says_is_read(http, folder, tmp_path) -> None:
    """A compressing front end answers HEAD with gzip and the length of an
    encoding, not the object's, and a whole GET chunked: the size comes from
    the Content-Range of a request of the first byte, and every sample is
    read."""
    keys = _small_tars(folder, "encoded-heads")
    http.faults.lengths_hidden = True
    try:
        with fastio.Dataset(http.url("encoded-heads/part-{0..2}.tar"), shuffle=False,
                            index_dir=tmp_path / "index") as dataset:  # fmt: skip
            assert [sample["__key__"] for sample in dataset] == keys
        with fastio.Reader() as reader:
            url = http.url("encoded-heads/part-1.tar")
            size = os.path.getsize(folder / "encoded-heads" / "part-1.tar")
            assert reader.describe(url)[0] == size
            assert reader.read_ranges([ByteRange(url, 0, 10)]) == [
                (folder / "encoded-heads" / "part-1.tar").read_bytes()[:10]]  # fmt: skip
    finally:
        http.faults.lengths_hidden = False


def test_a_cache_on_a_filesystem_gone_read_only_reads_from_the_store(http, folder, tmp_path,
                                                                    caplog) -> None:  # fmt: skip
    """A filesystem remounted read-only (as after errors) under the cache
    once a dataset made its folders: every shard is read from the store, the
    user is told once, and closing releases everything."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root; CI runs as root")
    keys = _small_tars(folder, "read-only")
    mount = tmp_path / "mount"
    mount.mkdir()
    dataset = fastio.Dataset(http.url("read-only/part-{0..2}.tar"), shuffle=False,
                             on_error="skip", index_dir=tmp_path / "index",
                             cache_dir=mount / "cache", cache_bytes=64 << 20)  # fmt: skip
    subprocess.run(["mount", "--bind", str(mount), str(mount)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True)
        caplog.set_level(logging.WARNING, "fastio")
        assert [sample["__key__"] for sample in dataset] == keys
        assert dataset.stats()["skipped"] == 0
        refusals = [r for r in caplog.records if "read from the store" in r.getMessage()]
        assert len(refusals) == 1
        dataset.close()
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


@given(st.lists(st.sampled_from(["", ".", "..", "...", "a", ".a", "b.", "x y"]), max_size=6),
       st.booleans(), st.booleans())  # fmt: skip
def test_absolute_path_is_abspath(parts: list[str], rooted: bool, trailing: bool) -> None:
    """Paths that are already absolute and normal come back as they are, and
    every other comes back as ``os.path.abspath`` makes it."""
    path = ("/" if rooted else "") + "/".join(parts) + ("/" if trailing else "")
    assert absolute_path(path) == os.path.abspath(path)


def test_a_shard_whose_reads_keep_failing_is_given_up_within_the_pass(
    http, folder, tmp_path
) -> None:
    """Under skip, a shard the server stops serving (503 after every retry)
    costs two failed reads, not one for each of its reads in the epoch, each
    with all its retries; every other sample comes, and delivered + skipped
    is what the shards hold."""
    written = write("webdataset", folder / "dying", shards=4, per_shard=40, index=False)
    dead = f"dying/{os.path.basename(written.urls[1])}"
    dataset = fastio.Dataset(remote_pattern(written, http.url("dying/")), index_dir=tmp_path,
                             on_error="skip", shuffle_buffer=64 << 10, retries=1,
                             outstanding_requests=1, read_size=64 << 20).index()  # fmt: skip
    http.faults.failing = lambda name, offset: name == dead
    http.faults.gets.clear()
    try:
        keys = [key_of("webdataset", s) for s in dataset]
    finally:
        http.faults.failing = None
    held = dataset.counts
    stats = dataset.stats()
    assert len(keys) + stats["skipped"] == sum(held)
    assert stats["skipped"] == held[1]
    assert len(set(keys)) == len(keys)
    # Reads of that shard in the plan: one per window it is in (a small shuffle
    # buffer: many); asked for twice, two requests each (one retry).
    assert http.faults.gets[dead] <= 2 * 2, http.faults.gets[dead]


def test_a_simplecache_chain_reads_each_object_whole_while_its_first_copy_is_made(tmp_path):
    """fsspec's simplecache copies an object into its cache folder at the
    first open, under the name later opens take as the copy: the reader's
    concurrent reads of one object must not open it half copied."""
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=30, index=False,
                    large=True)  # fmt: skip
    url = "simplecache::file://" + written.pattern
    expected = sorted(row["key"] for row in written.samples)
    for epoch in range(8):  # a fresh cache folder each time: every object's first copy
        options = {"simplecache": {"cache_storage": str(tmp_path / f"cache-{epoch}")}}
        with fastio.Dataset(url, format="webdataset", storage_options=options,
                            index_dir=tmp_path / f"index-{epoch}", read_size="64KiB",
                            outstanding_requests=16) as dataset:  # fmt: skip
            assert sorted(key_of("webdataset", sample) for sample in dataset) == expected
