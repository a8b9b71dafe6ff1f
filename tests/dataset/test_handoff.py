"""Samples and batches cross from real DataLoader worker processes to the main
process through shared memory: the same bytes as in this process, with the
default collate, with pin_memory, with a ring too small for them, and nothing
left in /dev/shm when a worker is killed or the loader is dropped mid-epoch."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

import fastio
from fastio.shared import _handoff, _heap
from fastio.shared._mapped import owner_of, shared_folder
from tests.shards import write

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    # Payloads of 10 B, 3 KB and 20 KB: the small ones pickle, the large ones
    # go through the ring, mixed in one batch.
    return write("webdataset", tmp_path_factory.mktemp("handoff"), shards=4, per_shard=30)


def in_process(written) -> dict[str, bytes]:
    with fastio.Dataset(written.pattern, shuffle=False) as dataset:
        return {s["__key__"]: s["bin"] for s in dataset}


def rings_of(pids: set[int]) -> list[str]:
    """The hand-off files in /dev/shm of the processes ``pids``."""
    prefix = f"fastio-{_handoff.KIND}-"
    return [n for n in os.listdir(shared_folder())
            if n.startswith(prefix) and owner_of(n) in pids]  # fmt: skip


def attached_owners() -> set[int | None]:
    return {ring.owner for ring in _handoff._attached.values()}


def gone(pids: set[int]) -> None:
    """Wait until the processes ``pids`` have exited (the loader joins them)."""
    for _ in range(200):
        alive = set()
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.add(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"workers {alive} still running")


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_samples_with_the_default_collate_are_the_same_bytes(written, context) -> None:
    expected = in_process(written)
    before = attached_owners()
    dataset = fastio.Dataset(written.pattern, seed=3)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context=context)
    got = {}
    for batch in loader:  # the default collate: a dict of lists
        for key, payload in zip(batch["__key__"], batch["bin"], strict=True):
            assert type(payload) is bytes  # not the worker's subclass
            got[key] = payload
    assert got == expected
    assert attached_owners() - before, "no payload came through a ring"


@pytest.mark.parametrize("format_name", ["arrow", "parquet"])
def test_table_samples_binary_values_cross_through_the_ring(tmp_path, format_name) -> None:
    """Rows of Arrow and Parquet files (dicts) cross with their binary
    values through the ring, not pickled: the same rows as in this process,
    each binary value plain ``bytes`` again."""
    written = write(format_name, tmp_path / "data", shards=3, per_shard=20)
    with fastio.Dataset(written.pattern, shuffle=False) as dataset:
        expected = {row["key"]: row for row in dataset}
    before = attached_owners()
    dataset = fastio.Dataset(written.pattern, seed=3)
    got = {}
    for batch in DataLoader(dataset, batch_size=None, num_workers=2):  # rows as they come
        assert type(batch["data"]) is bytes  # not the worker's subclass
        got[batch["key"]] = batch
    assert got == expected
    assert attached_owners() - before, "no value came through a ring"


def test_batches_are_the_same_arrow_batches(written) -> None:
    with fastio.Dataset(written.pattern, shuffle=False) as dataset:
        expected = rows_of(list(dataset.batches(16)))
    before = attached_owners()
    dataset = fastio.Dataset(written.pattern, seed=3)
    loader = DataLoader(dataset.batches(16), batch_size=None, num_workers=2)
    batches = list(loader)
    assert all(type(batch) is pa.RecordBatch for batch in batches)
    assert rows_of(batches) == expected
    assert attached_owners() - before, "no batch came through a ring"


def test_example_batches_of_list_columns_are_the_same_batches(tmp_path) -> None:
    # tf.train.Example batches are list columns (an offsets buffer and a child
    # array per column): every buffer of them crosses.
    examples = write("tfrecord", tmp_path, shards=3, per_shard=20)
    options = {**examples.options, "index_dir": tmp_path / "index"}
    with fastio.Dataset(examples.pattern, shuffle=False, **options) as dataset:
        expected = sorted_rows(list(dataset.batches(8)), "key")
    before = attached_owners()
    dataset = fastio.Dataset(examples.pattern, seed=3, **options)
    batches = list(DataLoader(dataset.batches(8), batch_size=None, num_workers=2))
    assert all(type(batch) is pa.RecordBatch for batch in batches)
    assert any(str(field.type).startswith("list") for field in batches[0].schema)
    assert sorted_rows(batches, "key") == expected
    assert [row["key"] for row in expected] == [[sample["key"]] for sample in examples.samples]
    assert attached_owners() - before, "no batch came through a ring"


def sorted_rows(batches: list[pa.RecordBatch], key: str) -> list[dict]:
    return sorted((row for b in batches for row in b.to_pylist()), key=lambda r: r[key])


def rows_of(batches: list[pa.RecordBatch]) -> list[dict]:
    # Each batch has its own dictionary of URLs: compare values, not encodings.
    return sorted((row for b in batches for row in b.to_pylist()), key=lambda r: r["__key__"])


@pytest.fixture
def ring_reads(monkeypatch) -> list[int]:
    """The lengths of the payloads this (the main) process reads from rings
    from now on. (Counted in the read, not in the function a payload pickles
    as: a worker would pickle the counting one, fail, and lose the batch.)"""
    came: list[int] = []
    read = _handoff._Attached.read

    def counted(self, start: int, length: int) -> bytes:
        came.append(length)
        return read(self, start, length)

    monkeypatch.setattr(_handoff._Attached, "read", counted)
    return came


def test_binary_fields_of_struct_columns_cross_through_the_ring(tmp_path, ring_reads) -> None:
    """A Hugging Face image column (a struct of ``bytes`` and ``path``) crosses
    with its bytes through the ring, not pickled: the same rows as in this
    process, every image's bytes read from a ring."""
    images = [{"bytes": bytes([i]) * (20_000 + i), "path": None if i % 2 else f"{i}.png"}
              for i in range(40)]  # fmt: skip
    table = pa.table({"image": images, "label": list(range(40))})
    for number in range(2):
        with pa.ipc.new_file(tmp_path / f"part-{number}.arrow", table.schema) as writer:
            writer.write_table(table.slice(20 * number, 20), max_chunksize=7)
    pattern = str(tmp_path / "part-{0..1}.arrow")
    with fastio.Dataset(pattern, shuffle=False) as dataset:
        expected = sorted(dataset, key=lambda row: row["label"])
    assert expected == table.to_pylist()
    loader = DataLoader(fastio.Dataset(pattern, seed=3), batch_size=None, num_workers=2)
    got = sorted(loader, key=lambda row: row["label"])
    assert got == expected
    assert all(type(row["image"]["bytes"]) is bytes for row in got)
    assert sorted(ring_reads) == sorted(len(image["bytes"]) for image in images)


def test_every_payload_crosses_through_a_ring_that_holds_the_batches_in_flight(
    written, ring_reads
) -> None:
    """A ring that holds the batches a DataLoader keeps in flight takes every
    payload of 16 KiB and more: none is pickled through the queue. (Going
    back to the ring's start as soon as its first bytes were read left room
    only ahead of the unread ones, and most payloads were pickled.)"""
    expected = in_process(written)
    large = sum(len(payload) >= _handoff.MIN_HANDED for payload in expected.values())
    # Batches of 8 payloads of at most 20 KB, prefetch_factor 2: about 0.5 MB
    # in flight per worker, in a ring of 2 MiB.
    dataset = fastio.Dataset(written.pattern, seed=3, handoff_memory=2 << 20)
    got = {}
    for _ in range(2):  # persistent workers: their rings go round
        loader = DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=True)
        for batch in loader:
            got.update(zip(batch["__key__"], batch["bin"], strict=True))
    assert got == expected
    assert large > 0
    assert len(ring_reads) == 2 * large


def test_the_ring_stays_at_its_start_while_the_main_process_keeps_up(tmp_path) -> None:
    """A worker's ring goes back to its start when the main process has read
    all of it (only the pages one batch needs are written), and on round it
    while the main process lags: a payload is refused only when the unread
    ones and it would not fit."""
    ring = _handoff._Ring(1 << 20)
    try:
        for _ in range(50):  # read before the next is written
            start = ring.reserve(20_000)
            assert start is not None
            assert start % ring.capacity == 0
            ring.read_mark[0] = start + 20_000
        unread = []
        for _ in range(2000):  # the main process reads 40 payloads behind
            start = ring.reserve(20_000)
            assert start is not None
            unread.append(start + 20_000)
            if len(unread) > 40:
                ring.read_mark[0] = unread.pop(0)
        assert ring.reserve(400_000) is None  # 40 unread payloads and this: past 1 MiB
    finally:
        ring.close()


@pytest.mark.parametrize("handoff_memory", [0, 64 << 10, 1 << 20])
def test_a_ring_too_small_or_none_pickles_what_does_not_fit(written, handoff_memory) -> None:
    # 64 KiB holds about three large payloads of a batch of 8: the rest pickle.
    dataset = fastio.Dataset(written.pattern, seed=3, handoff_memory=handoff_memory)
    loader = DataLoader(dataset, batch_size=8, num_workers=2)
    got = {k: v for batch in loader for k, v in zip(batch["__key__"], batch["bin"], strict=True)}
    assert got == in_process(written)


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator")
def test_pin_memory(written) -> None:
    # CPU-only torch has nothing to pin into: the DataLoader warns and skips
    # pinning, so this shows the hand-off is unaffected, not that pinning ran.
    dataset = fastio.Dataset(written.pattern, seed=3)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, pin_memory=True)
    got = {k: v for batch in loader for k, v in zip(batch["__key__"], batch["bin"], strict=True)}
    assert got == in_process(written)
    if not torch.accelerator.is_available():
        pytest.skip("pin_memory needs an accelerator (CUDA, XPU, MPS): CPU-only torch skips it")


def test_a_killed_worker_leaves_nothing_in_dev_shm(written) -> None:
    dataset = fastio.Dataset(written.pattern, seed=3)
    loader = DataLoader(dataset, batch_size=4, num_workers=2)
    batches = iter(loader)
    for _ in range(4):  # two from each worker: both rings are in use
        next(batches)
    pids = {worker.pid for worker in batches._workers}  # type: ignore[attr-defined]
    os.kill(min(pids), signal.SIGKILL)
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        for _ in batches:
            pass
    del batches
    gc.collect()
    gone(pids)
    assert rings_of(pids) == []
    # The next loader's first payload closes the rings of workers gone.
    next(iter(DataLoader(dataset, batch_size=4, num_workers=2)))
    assert not attached_owners() & pids


DIES_MID_EPOCH = """
import json, os, signal, sys, time
import fastio
from fastio.shared import _handoff
from torch.utils.data import DataLoader
_handoff.MIN_APART = 32 << 10  # batches of 16 (about 120 KB): each in a file of its own
dataset = fastio.Dataset(sys.argv[1], seed=3, handoff_memory=64 << 10)
batches = iter(DataLoader(dataset.batches(16), batch_size=None, num_workers=2))
next(batches)
workers = [worker.pid for worker in batches._workers]
print(json.dumps([os.getpid(), *workers]), flush=True)
time.sleep(1)  # a training step: the workers hand over the next batches meanwhile
if sys.argv[2] == "kill":  # a worker killed; torch raises in the main process
    os.kill(workers[0], signal.SIGKILL)
    time.sleep(1)
    next(batches)
raise RuntimeError("the training step failed")
"""


@pytest.mark.parametrize("how", ["raise", "kill"], ids=["an exception", "a worker killed"])
def test_a_main_process_that_dies_mid_epoch_leaves_nothing_in_dev_shm(written, how) -> None:
    """Python's exit stops the workers of a loader still iterating with
    SIGTERM, before their own clean-up runs; the exiting main process removes
    what they leave."""
    done = subprocess.run([sys.executable, "-c", DIES_MID_EPOCH, written.pattern, how],
                          capture_output=True, text=True, timeout=120, cwd=REPOSITORY)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert ("training step failed" if how == "raise" else "DataLoader worker") in done.stderr
    pids = set(json.loads(done.stdout.splitlines()[0]))
    gone(pids)
    assert rings_of(pids) == []


def handoff_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of (unlinked) hand-off files."""
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if f"fastio-{_handoff.KIND}-" in line:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                spans.append((start, end))
    return spans


@pytest.mark.parametrize("apart", [False, True], ids=["ring", "files of their own"])
def test_a_loader_dropped_mid_epoch_leaves_nothing_in_dev_shm(written, monkeypatch, apart):
    if apart:  # batches of 16 (about 120 KB) do not fit the ring: each in a file
        monkeypatch.setattr(_handoff, "MIN_APART", 32 << 10)
    small_ring = {"handoff_memory": 64 << 10} if apart else {}
    dataset = fastio.Dataset(written.pattern, seed=3, **small_ring)
    batches = iter(DataLoader(dataset.batches(16 if apart else 4), batch_size=None, num_workers=2))
    next(batches)
    pids = {worker.pid for worker in batches._workers}  # type: ignore[attr-defined]
    del batches
    gc.collect()
    gone(pids)
    assert rings_of(pids) == []
    assert handoff_mappings() == []


def test_a_batch_the_ring_cannot_hold_is_read_in_place_from_a_file_of_its_own(
    written, monkeypatch
) -> None:
    """A batch larger than the ring crosses in a file of its own, which the
    main process maps and reads the batch from without a copy: its buffers
    lie in that mapping, which goes (file and all) with the batches."""
    monkeypatch.setattr(_handoff, "MIN_APART", 32 << 10)
    with fastio.Dataset(written.pattern, shuffle=False) as dataset:
        expected = rows_of(list(dataset.batches(16)))
    dataset = fastio.Dataset(written.pattern, seed=3, handoff_memory=64 << 10)
    batches = iter(DataLoader(dataset.batches(16), batch_size=None, num_workers=2))
    got = [next(batches)]
    pids = {worker.pid for worker in batches._workers}  # type: ignore[attr-defined]
    got.extend(batches)
    spans = handoff_mappings()
    in_place = [b for b in got
                if any(start <= b.column("bin").buffers()[2].address < end
                       for start, end in spans)]  # fmt: skip
    assert in_place, "no batch was read from a file of its own"
    assert rows_of(got) == expected
    del batches
    gone(pids)
    assert rings_of(pids) == []  # unlinked as read: only the mappings hold them
    del got, in_place
    gc.collect()
    assert handoff_mappings() == []


def test_a_payload_whose_file_cannot_be_made_is_pickled_not_lost(
    written, monkeypatch, tmp_path
) -> None:
    """Where a file of its own (or the ring) cannot be made (/dev/shm full,
    or here a folder that is not there), the batch is pickled as before:
    every one arrives (a pickling failure would drop it, and the loader
    would wait)."""
    monkeypatch.setattr(_handoff, "MIN_APART", 32 << 10)
    monkeypatch.setattr(_handoff, "shared_path", lambda kind: str(tmp_path / "gone" / kind))
    with fastio.Dataset(written.pattern, shuffle=False) as dataset:
        expected = rows_of(list(dataset.batches(16)))
    dataset = fastio.Dataset(written.pattern, seed=3, handoff_memory=64 << 10)
    got = list(DataLoader(dataset.batches(16), batch_size=None, num_workers=2, timeout=60))
    got += list(DataLoader(dataset.batches(2), batch_size=None, num_workers=2, timeout=60))
    assert rows_of(got) == sorted(expected * 2, key=lambda r: r["__key__"])
    assert handoff_mappings() == []


_EXIT_WHILE_WRITING = """
import os
from fastio.shared import _handoff
ring = _handoff._Ring(1 << 20)
view = ring.view(0, 4096)  # a payload being written, as a queue's feeder thread does at exit
ring.close()  # the worker's exit
view[:] = b"x" * 4096
print("written")
"""


def test_a_worker_exiting_while_a_payload_is_written_is_not_killed() -> None:
    done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_WRITING], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode} (SIGBUS is -7): {done.stderr}"
    assert done.stdout.strip() == "written"


def test_the_main_process_marks_a_ring_its_worker_emptied_without_a_fault() -> None:
    ring = _handoff._Ring(1 << 20)
    ring.view(0, 8)[:] = b"payload!"
    attached = _handoff._Attached(ring.path)
    try:
        assert attached.read(0, 8) == b"payload!"
        assert int(ring.read_mark[0]) == 8  # the worker sees the mark
        ring.close()  # the worker exits and empties the file
        attached._mark(16)  # a store through a mapping here would be SIGBUS
    finally:
        attached.close()


def test_a_worker_exit_waits_for_the_file_a_payload_is_being_written_to() -> None:
    """A DataLoader worker does not join its queue's feeder thread: an exit
    that did not wait for a file being written would leave it in /dev/shm."""
    apart = _handoff._Apart()
    started, release = threading.Event(), threading.Event()

    def fill(fd: int) -> None:
        os.write(fd, b"payload")
        started.set()
        release.wait(30)

    written: list[str | None] = []
    writer = threading.Thread(target=lambda: written.append(apart.write(fill)))
    writer.start()
    assert started.wait(30)
    [path] = apart.paths
    closer = threading.Thread(target=apart.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive(), "the exit's clean-up did not wait for the write"
    assert os.path.exists(path)
    release.set()
    closer.join(30)
    writer.join(30)
    assert written == [None]  # the payload is pickled instead
    assert not os.path.exists(path)
    assert apart.write(fill) is None  # and so is every one after the exit


# The module alone, in a bare interpreter: importing fastio (numpy, torch)
# first would leave the heap's top to whatever those imports allocated last.
_HEAP_PROBE = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("heap", sys.argv[2])
heap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heap)
statm = os.open("/proc/self/statm", os.O_RDONLY)

def resident() -> int:
    return int(os.pread(statm, 100, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")

kept = heap.keep_heap() if sys.argv[1] == "keep" else False
payloads = [bytes(110_000) for _ in range(600)]  # 66 MB, as a batch of samples is
held = resident()
del payloads
print(json.dumps({"kept": kept, "given_back": held - resident()}))
"""


@pytest.mark.parametrize(
    ("how", "env", "kept"),
    [("keep", {}, True), ("default", {}, False),
     ("keep", {"MALLOC_TRIM_THRESHOLD_": "131072"}, False),
     ("keep", {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, False)],
)  # fmt: skip
def test_a_process_handing_payloads_keeps_its_heap_between_batches(how, env, kept) -> None:
    # glibc gives a freed batch's pages back, and the next batch faults them
    # in again; a process that hands or reads payloads keeps them, unless the
    # user has set malloc's thresholds.
    result = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE, how, _heap.__file__],
        env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["kept"] is kept
    if kept:
        assert report["given_back"] < 8 << 20
    else:
        assert report["given_back"] > 32 << 20


class _HeapProbe(torch.utils.data.IterableDataset):
    """fastio's samples, then whether this worker keeps its heap."""

    def __init__(self, dataset: fastio.Dataset) -> None:
        self.dataset = dataset

    def __iter__(self):
        yield from ({"bin": sample["bin"]} for sample in self.dataset)
        yield {"kept": _heap._kept}


def test_workers_and_the_main_process_keep_their_heaps(written, monkeypatch) -> None:
    monkeypatch.setattr(_heap, "_kept", False)  # as if no payload had been read here yet
    probe = _HeapProbe(fastio.Dataset(written.pattern, shuffle=False))
    loader = DataLoader(probe, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    kept = [item["kept"] for item in loader if "kept" in item]
    assert kept == [True, True]  # each worker, once it has handed payloads
    assert _heap._kept  # this process, which read them


def test_a_process_iterating_a_dataset_keeps_its_heap(written) -> None:
    # A shuffle window's payloads are allocated together as it fills and
    # freed together as it is delivered, like a DataLoader batch's.
    script = (
        "import sys, fastio\n"
        "from fastio.shared import _heap\n"
        "before = _heap._kept\n"
        "with fastio.Dataset(sys.argv[1]) as dataset:\n"
        "    next(iter(dataset))\n"
        "print(before, _heap._kept)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, written.pattern],
                          capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    assert done.stdout.split() == ["False", "True"]
