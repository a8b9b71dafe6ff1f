"""A remote dataset with a dataset index, behind an HTTP Range server that
counts what it is asked: it opens without asking about each object (their
HEAD requests held, it opens all the same), and an object replaced after the
index was made fails when a read opens it, before any of its bytes are used,
in this process and in DataLoader workers alike."""

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
from tests.conftest import ResourceSnapshot
from tests.servers import RangeServer, raised_within, wait_for
from tests.shards import key_of, write

SHARDS = 40
REPLACED = 7
REPOSITORY = Path(__file__).resolve().parents[2]

EPOCH = """
import json, sys
import fastio
with fastio.Dataset(sys.argv[1], index_dir=sys.argv[2], shuffle=False) as ds:
    keys = [sample["__key__"] for sample in ds]
print(json.dumps({"keys": keys, "loaded": [m for m in ("fsspec", "aiohttp", "tenacity")
                                           if m in sys.modules]}))
"""


@pytest.fixture
def served(tmp_path):
    written = write("webdataset", tmp_path / "data", shards=SHARDS, per_shard=6, index=False)
    server = RangeServer(tmp_path / "data").start()
    # Indexed through the server, as `fastio-bench index URL` does, beside the shards.
    with fastio.Dataset(remote(written, server), index_dir=tmp_path / "made") as dataset:
        dataset.index()
        dataset.save_index(str(tmp_path / "data" / "dataset.fastio-index.npz"))
    server.faults.gets.clear()
    server.faults.heads.clear()
    server.faults.served.clear()
    yield written, server
    server.faults.hold_heads = False
    server.stop()


def remote(written, server) -> str:
    return server.url(os.path.basename(written.pattern))


def keys_by_shard(written) -> dict[str, list[int]]:
    """Each shard's sample keys, read from the local files."""
    by_shard: dict[str, list[int]] = {}
    with fastio.Dataset(written.pattern, shuffle=False, fairness=False) as local:
        for sample in local:
            name = os.path.basename(sample["__url__"])
            by_shard.setdefault(name, []).append(key_of("webdataset", sample))
    return by_shard


def replace(url: str) -> None:
    """Another object of the same size under the same name (another ETag)."""
    data = bytearray(Path(url).read_bytes())
    data[600] ^= 1  # inside the first member's payload: the tar still frames
    Path(url).write_bytes(data)


def test_an_indexed_remote_dataset_opens_without_asking_about_each_object(served, tmp_path):
    written, server = served
    server.faults.hold_heads = True  # no HEAD request is answered until released
    opened: list[fastio.Dataset] = []
    url = remote(written, server)
    opener = threading.Thread(target=lambda: opened.append(
        fastio.Dataset(url, index_dir=tmp_path / "index", shuffle=False)))  # fmt: skip
    opener.start()
    opener.join(60)
    server.faults.hold_heads = False
    opener.join(60)
    assert opened, "the dataset waited for answers about its objects"
    ds = opened[0]
    assert len(ds) == len(written.samples)
    assert dict(server.faults.gets) == {"dataset.fastio-index.npz": 1}
    assert sum(server.faults.heads.values()) < SHARDS  # not one per object
    assert [key_of("webdataset", s) for s in ds] == [row["key"] for row in written.samples]
    ds.close()


def test_plain_http_reads_confirm_each_object_from_their_answers(served, tmp_path):
    """Over plain HTTP each read's answer says the object's size and ETag: an
    epoch needs no other answer about its objects (every HEAD is held)."""
    written, server = served
    server.faults.hold_heads = True
    ds = fastio.Dataset(remote(written, server), index_dir=tmp_path / "index", shuffle=False)
    got: list[int] = []
    reading = threading.Thread(target=lambda: got.extend(key_of("webdataset", s) for s in ds))
    reading.start()
    reading.join(120)  # a guard: the epoch takes seconds
    finished = not reading.is_alive()
    server.faults.hold_heads = False
    reading.join(60)
    assert finished, "the epoch waited for answers about its objects"
    assert got == [row["key"] for row in written.samples]
    ds.close()


def test_reads_go_out_while_the_objects_are_asked_about(served, tmp_path, monkeypatch):
    """Through fsspec, a read of an indexed object is sent without waiting
    for the answer about the object (a round trip per object, on the loop
    that sends every request), and its samples wait for that answer."""
    written, server = served
    monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    server.faults.hold_heads = True  # from the open on: no answer has come
    ds = fastio.Dataset(remote(written, server), index_dir=tmp_path / "index", shuffle=False)
    first: list[dict] = []
    reading = threading.Thread(target=lambda: first.append(next(iter(ds))))
    reading.start()
    shards = {os.path.basename(url) for url in written.urls}
    try:
        wait_for(lambda: sum(server.faults.gets[name] for name in shards) >= 1, timeout=60)
        assert not first  # held: the answer about its object has not come
    finally:
        server.faults.hold_heads = False
        reading.join(60)
    assert key_of("webdataset", first[0]) == written.samples[0]["key"]
    assert [key_of("webdataset", s) for s in ds] == [row["key"] for row in written.samples]
    ds.close()


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_an_object_replaced_after_indexing_fails_when_opened(
    served, tmp_path, on_error, client, monkeypatch
) -> None:
    written, server = served
    if client == "aiohttp":  # found by the answer about the object, asked beside the read
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    by_shard = keys_by_shard(written)
    name = os.path.basename(written.urls[REPLACED])
    replace(written.urls[REPLACED])
    ds = fastio.Dataset(remote(written, server), index_dir=tmp_path / "index", shuffle=False,
                        on_error=on_error)  # fmt: skip
    assert len(ds) == len(written.samples)  # laid out from the index, as it was
    got: list[int] = []
    if on_error == "raise":
        with pytest.raises(fastio.ShardChangedError) as caught:
            got.extend(key_of("webdataset", s) for s in ds)
        assert caught.value.filename == server.url(name)
        # None of its samples came first. Its bytes may have come (each
        # object's read goes out while the question about it is asked), and
        # were not used: the shard still frames, with other bytes.
        assert not set(got) & set(by_shard[name])
    else:
        got = [key_of("webdataset", s) for s in ds]
        kept = [row["key"] for row in written.samples if row["key"] not in by_shard[name]]
        assert got == kept
        assert ds.stats()["skipped"] == len(by_shard[name])
        assert len(got) + ds.stats()["skipped"] == len(written.samples)
    ds.close()


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_an_object_replaced_after_indexing_is_indexed_anew_by_the_next_dataset(
    served, tmp_path, on_error
) -> None:
    """What the index folder keeps of an object found replaced goes: the next
    dataset indexes it anew and reads all of it (each trusted it again before,
    every dataset failing the same way: under skip, none of its samples)."""
    written, server = served
    (tmp_path / "data" / "dataset.fastio-index.npz").unlink()  # only the index folder's
    index_dir = tmp_path / "index"
    with fastio.Dataset(remote(written, server), index_dir=index_dir) as first:
        first.index()
    name = os.path.basename(written.urls[REPLACED])
    replace(written.urls[REPLACED])
    with fastio.Dataset(remote(written, server), index_dir=index_dir, shuffle=False,
                        on_error=on_error) as stale:  # fmt: skip
        if on_error == "raise":
            with pytest.raises(fastio.ShardChangedError):
                list(stale)
        else:
            list(stale)
            assert stale.stats()["skipped"] == len(keys_by_shard(written)[name])
    with fastio.Dataset(remote(written, server), index_dir=index_dir, shuffle=False) as again:
        keys = [key_of("webdataset", s) for s in again]
    assert sorted(keys) == sorted(row["key"] for row in written.samples)


def test_dataloader_workers_check_what_they_open(served, tmp_path) -> None:
    from torch.utils.data import DataLoader

    written, server = served
    by_shard = keys_by_shard(written)
    name = os.path.basename(written.urls[REPLACED])
    ds = fastio.Dataset(remote(written, server), index_dir=tmp_path / "index", shuffle=False,
                        on_error="skip")  # fmt: skip
    replace(written.urls[REPLACED])  # after the parent opened it, before the workers read
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = Counter(key_of("webdataset", s) for s in loader)
    assert got == Counter(row["key"] for row in written.samples
                          if row["key"] not in by_shard[name])  # fmt: skip
    ds.close()


def test_plain_http_needs_neither_fsspec_nor_aiohttp(served, tmp_path):
    """A fresh process reads an epoch of a plain-HTTP dataset, indexed and
    never seen, with fastio's own client alone: importing fsspec's HTTP
    filesystem (aiohttp) would take a few hundred ms before the first sample.
    Where no request fails, the retries' library (tenacity) is not imported
    either: the first requests would wait for it."""
    written, server = served
    expected = [row["key"] for row in written.samples]
    for case in ("indexed", "never seen"):
        if case == "never seen":
            (Path(written.urls[0]).parent / "dataset.fastio-index.npz").unlink()
        result = subprocess.run(
            [sys.executable, "-c", EPOCH, remote(written, server), str(tmp_path / case)],
            capture_output=True, text=True, check=True, cwd=REPOSITORY,
            env={**os.environ, "FASTIO_HTTP_CLIENT": ""},
        )  # fmt: skip
        got = json.loads(result.stdout)
        assert [key_of("webdataset", {"__key__": key}) for key in got["keys"]] == expected, case
        assert got["loaded"] == [], case
    assert server.faults.heads[os.path.basename(written.urls[0])] >= 1  # the never-seen one asked


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
def test_a_dataset_index_that_may_not_be_read_is_passed_over_unless_named(
    served, tmp_path, monkeypatch, client
):
    """A store that answers 403 for a key it lacks (S3 to a reader without
    ListBucket) or may not show: the dataset index looked for by default is
    taken for absent, and the shards are read without it; one named by
    ``index=`` is an error naming it, and the open that failed leaves no
    thread behind."""
    written, server = served
    if client == "aiohttp":
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    server.faults.forbidden.add("dataset.fastio-index.npz")
    url = remote(written, server)
    with fastio.Dataset(url, index_dir=tmp_path / "index", shuffle=False) as ds:
        assert [key_of("webdataset", s) for s in ds] == [row["key"] for row in written.samples]
    named = server.url("dataset.fastio-index.npz")
    before = ResourceSnapshot()
    with pytest.raises(PermissionError, match="access denied") as caught:
        fastio.Dataset(url, index=named, index_dir=tmp_path / "named")
    assert caught.value.filename == named
    # The error (kept here, as a log of it would) holds the dataset that
    # failed to open: what it had started is released all the same.
    before.assert_released(sockets=False)  # the server's own are in this process


def test_signed_urls_name_their_format_by_their_path(served, tmp_path):
    """A query (a signed URL's) does not hide the shard's extension."""
    written, server = served
    (Path(written.urls[0]).parent / "dataset.fastio-index.npz").unlink()
    signed = [server.url(os.path.basename(path)) + "?X-Amz-Signature=a%2Fb.json&X-Amz-Expires=60"
              for path in written.urls]  # fmt: skip
    for case in ("never seen", "indexed"):
        with fastio.Dataset(signed, index_dir=tmp_path / "index", shuffle=False) as ds:
            if case == "indexed":
                ds.index()
            assert ds.format == "webdataset"
            got = [key_of("webdataset", s) for s in ds]
        assert got == [row["key"] for row in written.samples], case


def test_a_dataset_index_answered_503_is_asked_again(served, tmp_path):
    """Every rank of a job asks for the dataset index at once, and a store
    may answer some of them 503 (S3's SlowDown): it is asked again, as reads
    are, and the dataset opens with it."""
    written, server = served
    server.faults.errors_5xx = 2
    with fastio.Dataset(remote(written, server), index_dir=tmp_path / "index", shuffle=False,
                        retries=3) as ds:  # fmt: skip
        assert server.faults.errors_5xx == 0
        assert server.faults.gets["dataset.fastio-index.npz"] == 3
        assert len(ds) == len(written.samples)  # counted by the index: no shard scanned
        assert [key_of("webdataset", s) for s in ds] == [row["key"] for row in written.samples]
    server.faults.errors_5xx = 1
    with pytest.raises(OSError, match="503"):
        fastio.Dataset(remote(written, server), index_dir=tmp_path / "again", retries=0)


@pytest.mark.parametrize("client", ["fastio", "aiohttp"])
def test_a_dataset_index_whose_answer_never_comes_fails_at_the_request_timeout(
    served, tmp_path, monkeypatch, client
):
    """A server that takes the request for the dataset index and never
    answers (overloaded, or a proxy that hangs) fails the open after
    ``request_timeout``, as a read's request would, with the index named;
    it is not waited on for the minutes a whole large object may take
    (aiohttp's own bound is five minutes)."""
    written, server = served
    if client == "aiohttp":
        monkeypatch.setenv("FASTIO_HTTP_CLIENT", "aiohttp")
    server.faults.stalls, server.faults.stall_seconds = 1, 600.0

    def open_it() -> None:
        fastio.Dataset(remote(written, server), index_dir=tmp_path / "index",
                       request_timeout=0.5, retries=0)  # fmt: skip

    # The stalled answer would take 600 s.
    error = raised_within(open_it, 120, "the open waits for an answer that never comes")
    assert isinstance(error, TimeoutError)
    assert error.filename == server.url("dataset.fastio-index.npz")
    assert server.faults.gets["dataset.fastio-index.npz"] == 1  # retries=0: asked once


def test_a_server_that_cannot_be_reached_is_named(tmp_path):
    """The open's first request (for the dataset index) fails to connect:
    the error names what it asked for, not only the socket's errno."""
    server = RangeServer(tmp_path).start()
    url = server.url("train-{0..3}.tar")
    server.stop()  # nothing listens there now
    with pytest.raises(ConnectionRefusedError) as caught:
        fastio.Dataset(url, index_dir=tmp_path / "index", retries=0)
    assert caught.value.filename == server.url("dataset.fastio-index.npz")


def test_a_dataset_index_is_not_written_over_http_and_nothing_is_scanned_for_it(
    served, tmp_path
) -> None:
    """HTTP serves, it takes no writes: said at once, with the URL, not after
    every shard was scanned (fsspec's NotImplementedError, as a traceback)."""
    written, server = served
    (tmp_path / "data" / "dataset.fastio-index.npz").unlink()  # never seen: each shard a scan
    url = remote(written, server)
    beside = server.url("dataset.fastio-index.npz")
    with (
        fastio.Dataset(url, index_dir=tmp_path / "fresh") as dataset,
        pytest.raises(OSError, match="cannot be written over HTTP") as raised,
    ):
        dataset.save_index()
    assert raised.value.filename == beside
    executable = Path(sys.executable).parent / "fastio-bench"
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([str(executable), "index", url], capture_output=True, text=True,
                          timeout=120, env=environment)  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "cannot be written over HTTP" in done.stderr
    assert beside in done.stderr
    assert not [name for name in server.faults.gets if name.endswith(".tar")]  # none scanned
