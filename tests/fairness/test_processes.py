"""The fairness board across real processes: DataLoader workers (fork and
spawn) publish through shared memory, the main process reads sums that equal
what was delivered, ranks exchange totals, and the board is removed on every
path, a killed worker included."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import fastio
from fastio.fairness import FairnessMonitor, prometheus_text
from fastio.fairness._board import Board
from fastio.shared import _mapped
from tests.shards import key_of, write


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write("webdataset", tmp_path_factory.mktemp("fair"), shards=9, per_shard=25)


PREFIX = "fastio-fairness-"


def boards() -> set[str]:
    """This process's boards (other processes on the machine have their own)."""
    folder = _mapped.shared_folder()
    return {name for name in os.listdir(folder) if name.startswith(f"{PREFIX}{os.getpid()}-")}


def keys(batch):
    return [key_of("webdataset", sample) for sample in batch]


def dataset(written, tmp_path, **options):
    fairness = {"window_seconds": 0.05, "exchange_dir": str(tmp_path / "exchange")}
    return fastio.Dataset(written.pattern, shuffle_buffer=40_000, fairness=fairness, **options)


@pytest.mark.parametrize("num_workers", [1, 2, 3, 4])
def test_main_process_sums_equal_what_workers_delivered(written, tmp_path, num_workers) -> None:
    datasets = [dataset(written, tmp_path, rank=rank, world_size=2) for rank in range(2)]
    delivered = []
    for ds in datasets:
        loader = DataLoader(ds, batch_size=7, num_workers=num_workers, collate_fn=keys)
        delivered.append([k for batch in loader for k in batch])
    assert sorted(delivered[0] + delivered[1]) == [row["key"] for row in written.samples]
    reports = [ds.stats()["fairness"] for ds in datasets]
    reports[0] = datasets[0].stats()["fairness"]  # now that rank 1 has published too
    for rank, (ds, report) in enumerate(zip(datasets, reports, strict=True)):
        assert (report["rank"], report["world_size"]) == (rank, 2)
        workers = report["workers"]
        assert [w["worker"] for w in workers] == list(range(num_workers))
        assert len({w["pid"] for w in workers}) == num_workers != os.getpid()
        # Each worker delivered what it was assigned; together what the loader yielded.
        assert [w["samples"] for w in workers] == [w["assigned"] for w in workers]
        assert report["samples"] == len(delivered[rank]) == len(ds)
        assert all(w["bytes"] > 0 and w["requests"] > 0 and not w["active"] for w in workers)
    for report in reports:
        assert [r["samples"] for r in report["ranks"]] == [len(keys) for keys in delivered]
        assert report["samples_all_ranks"] == datasets[0].total
    for ds in datasets:
        ds.close()
    assert not os.listdir(tmp_path / "exchange") if (tmp_path / "exchange").exists() else True


@pytest.mark.slow  # spawned workers import torch afresh: ~9 s
def test_spawned_workers_find_the_board_by_name(written, tmp_path) -> None:
    ds = dataset(written, tmp_path)
    loader = DataLoader(ds, batch_size=10, num_workers=2, collate_fn=keys,
                        multiprocessing_context="spawn")  # fmt: skip
    count = sum(len(batch) for batch in loader)
    report = ds.stats()["fairness"]
    assert report["samples"] == count == ds.total
    assert [w["samples"] for w in report["workers"]] == [w["assigned"] for w in report["workers"]]
    ds.close()


def test_the_board_is_removed_on_close_and_reused_after(written, tmp_path, resources) -> None:
    before = boards()
    ds = dataset(written, tmp_path)
    assert sum(1 for _ in ds) == ds.total
    made = boards() - before
    assert len(made) == 1
    assert ds.stats()["fairness"]["samples"] == ds.total
    ds.close()
    assert boards() == before
    assert sum(1 for _ in ds) == ds.total  # usable after close: a fresh board
    assert ds.stats()["fairness"]["samples"] == ds.total
    ds.close()
    assert boards() == before
    resources.assert_released()


def shared_maps() -> list[str]:
    """What this process holds open of the shared folder (a mapping keeps a descriptor)."""
    folder = _mapped.shared_folder()
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(folder):
                held.append(target)
    return held


def test_an_error_that_ends_an_iteration_leaves_no_mapping_after_close(
    written, tmp_path, resources
) -> None:
    """The error's traceback keeps the ended iteration's frames: closing the
    dataset still unmaps its board, without waiting for the collector."""
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for url in written.urls:
        (damaged / os.path.basename(url)).write_bytes(Path(url).read_bytes())
    shard = damaged / os.path.basename(written.urls[1])
    data = bytearray(shard.read_bytes())
    data[148:156] = b"garbage!"  # the first member's header checksum
    shard.write_bytes(bytes(data))
    before = shared_maps()
    gc.disable()  # as between two collections
    try:
        for _ in range(2):
            ds = fastio.Dataset(str(damaged / os.path.basename(written.pattern)), shuffle=False,
                                index_dir=tmp_path / "index",
                                fairness={"exchange_dir": str(tmp_path / "exchange")})  # fmt: skip
            with pytest.raises(fastio.CorruptRecordError) as caught:
                for _ in ds:
                    pass
            ds.close()
            assert caught.value.url.endswith(shard.name)
            assert shared_maps() == before
    finally:
        gc.enable()
    del caught, ds
    gc.collect()
    resources.assert_released()


def test_a_killed_worker_leaves_nothing_behind(written, tmp_path) -> None:
    before = boards()
    ds = dataset(written, tmp_path)
    loader = DataLoader(ds, batch_size=5, num_workers=2, collate_fn=keys)
    iterator = iter(loader)
    next(iterator)
    os.kill(iterator._workers[0].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match="worker"):
        for _ in iterator:
            pass
    del iterator
    ds.close()
    assert boards() == before


def test_boards_of_dead_owners_are_swept(written, tmp_path) -> None:
    """The first shared file a process that names them makes sweeps away
    those of every kind whose owner is gone, and nothing it did not name so
    (an epoch's end makes the board: a first sample read without workers
    makes no file)."""
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    folder = _mapped.shared_folder()
    stale = os.path.join(folder, f"{PREFIX}{dead}-feedfacecafe")
    Board(stale).close()
    others = [os.path.join(folder, f"fastio-{kind}-{dead}-0123456789ab")
              for kind in ("handoff", "state", "epochs")]  # fmt: skip
    # Named otherwise: not fastio's shared files, whoever made them.
    foreign = [os.path.join(folder, name) for name in
               (f"fastio-notes-{dead}-x.txt", f"fastio-{dead}-feedfacecafe",
                f"fastio-state-{dead}-0123456789ab.tmp")]  # fmt: skip
    for path in others + foreign:
        Path(path).touch()
    try:
        _mapped._swept.discard(os.getpid())
        with dataset(written, tmp_path) as ds:
            items = iter(ds)
            next(items)
            assert os.path.exists(stale)
            assert all(map(os.path.exists, others))
            assert 1 + sum(1 for _ in items) == len(ds)
            assert not os.path.exists(stale)
            assert not any(map(os.path.exists, others))
            assert all(map(os.path.exists, foreign))
    finally:
        for path in others + foreign:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


# How shared files are named: the owner is the number between the kind and the token.
NAMED = re.compile(r"fastio-[a-z]+-(\d+)-[0-9a-f]{12}")
# A name shared_path makes, piece by piece, and what each piece may be instead.
PIECES = [
    ("fastio-", ["fastio", "fastio--", "Fastio-", ""]),
    ("epochs", ["Epochs", "ep0chs", "h\u00e9", "", "a-b", "epochs_"]),
    ("-", ["", "--", "_"]),
    ("123", ["\u0663\u0661", "1\u00b2", "12a", "", "-1", "4 ", "0"]),
    ("-", ["", "_", "--"]),
    ("feedfacecafe", ["0123456789abc", "FEEDFACECAFE", "feedfacecaf", "feedface-afe",
                      "feedfacecafg", "0123456789ab"]),
    ("", [".tmp", "\n", "-", "/"]),
]  # fmt: skip


@st.composite
def names(draw: st.DrawFn) -> str:
    """Such a name with up to two of its pieces changed."""
    pieces = [good for good, _ in PIECES]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(PIECES) - 1))
        pieces[at] = draw(st.sampled_from(PIECES[at][1]))
    return "".join(pieces)


@given(names())
def test_the_owner_of_a_shared_file_is_read_from_its_name_as_the_pattern_reads_it(name) -> None:
    named = NAMED.fullmatch(name)
    assert _mapped.owner_of(name) == (int(named[1]) if named else None)
    assert _mapped.owner_of(f"/dev/shm/{name}") == _mapped.owner_of(name)


def test_a_shared_file_named_here_names_its_owner() -> None:
    path = _mapped.shared_path("epochs")
    assert _mapped.owner_of(path) == os.getpid()
    assert _mapped.owner_of(path + "0") is None
    assert _mapped.owner_of(path.replace("epochs", "ep0chs")) is None


def test_off_means_no_board(written, tmp_path) -> None:
    before = boards()
    with fastio.Dataset(written.pattern, fairness=False) as ds:
        assert sum(1 for _ in ds) == ds.total
        assert ds.stats()["fairness"] == {"enabled": False}
        assert boards() == before
    assert prometheus_text({"enabled": False}) == ""


def test_an_unpickled_monitor_never_removes_the_owners_board(written, tmp_path) -> None:
    ds = dataset(written, tmp_path)
    next(iter(ds))
    copy = pickle.loads(pickle.dumps(ds.fairness))
    copy.report()
    # Only the owner process removes; in another process the copy would only unmap.
    owner = ds.fairness._path
    child = os.fork()
    if child == 0:
        copy.close()
        os._exit(0 if os.path.exists(owner) else 1)
    assert os.waitpid(child, 0)[1] == 0
    assert os.path.exists(owner)
    ds.close()
    assert not os.path.exists(owner)


def test_prometheus_text_has_a_series_per_worker(written, tmp_path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    ds = dataset(written, tmp_path)
    loader = DataLoader(ds, batch_size=7, num_workers=2, collate_fn=keys)
    count = sum(len(batch) for batch in loader)
    text = prometheus_text(ds.stats()["fairness"])
    families = {family.name: family for family in text_string_to_metric_families(text)}
    samples = {int(s.labels["worker"]): s.value
               for s in families["fastio_fairness_worker_samples"].samples}  # fmt: skip
    assert sorted(samples) == [0, 1]
    assert sum(samples.values()) == count
    assert families["fastio_fairness_worker_samples"].type == "counter"
    starved = families["fastio_fairness_worker_starved"]
    assert starved.type == "gauge"
    assert {(s.labels["rank"], s.labels["worker"], s.value) for s in starved.samples} == {
        ("0", "0", 0.0), ("0", "1", 0.0),
    }  # fmt: skip
    ds.close()


def test_monitor_rejects_more_workers_than_slots() -> None:
    from fastio.plan import Participant

    monitor = FairnessMonitor()
    with pytest.raises(ValueError, match="up to 64 DataLoader workers"):
        monitor.observe(Participant(0, 1, 70, 80), 0, 0, None, int)  # type: ignore[arg-type]
    monitor.close()


def test_a_worker_whose_board_was_swept_ends_its_iteration_quietly(written, tmp_path) -> None:
    """A DataLoader worker outliving its killed main process finds the board
    gone (another worker swept a dead owner's file) when its iteration ends
    and a window is due: nothing is left to judge, and no error escapes."""
    from fastio.fairness import _board as b
    from fastio.plan import Participant

    monitor = FairnessMonitor({"window_seconds": 0.05, "exchange_dir": str(tmp_path)})
    with fastio.Reader() as reader:
        observer = monitor.observe(Participant(0, 1, 0, 2), 0, 10, reader, lambda: 0)
        assert observer is not None
        board = monitor._get_board()
        board.header[b.WINDOW_START] = 1.0  # long past: the window is due
        os.unlink(monitor._path)
        observer.finish(0.5)
        assert observer.slot[b.ACTIVE] == 0.0
    monitor.close()
    assert not boards()


def test_an_observer_takes_its_slot_at_its_first_publish(tmp_path) -> None:
    """Observing maps no board (a first sample does not wait for it); the
    first publish maps it and writes the slot, with what was asked."""
    from fastio.fairness import _board as b
    from fastio.plan import Participant

    monitor = FairnessMonitor({"window_seconds": 10.0, "exchange_dir": str(tmp_path)})
    try:
        with fastio.Reader() as reader:
            observer = monitor.observe(Participant(3, 4, 1, 2), 0, 17, reader, lambda: 5)
            assert observer is not None
            assert not os.path.exists(monitor._path)
            observer.tick(0.25)
            assert os.path.exists(monitor._path)
            board = monitor._get_board()
            slot = board.slots[1]
            assert (slot[b.PID], slot[b.ACTIVE], slot[b.ASKED]) == (os.getpid(), 1.0, 17)
            assert slot[b.BUSY] == 0.25
            assert slot[b.SAMPLES] == 0  # delivered() did not move since the observer was made
            assert (board.header[b.RANK], board.header[b.WORLD_SIZE]) == (3, 4)
            observer.finish(0.5)
            assert slot[b.ACTIVE] == 0.0
            assert slot[b.BUSY] == 0.75
            assert slot[b.ASKED] == 17  # taken once
    finally:
        monitor.close()


def test_an_iteration_that_ends_after_its_monitor_closed_makes_no_board(written, tmp_path) -> None:
    """An iteration left open (its first sample taken) and ended only after
    the dataset was closed (collected later, as a loop left with ``break``)
    publishes nowhere: its first publish would otherwise make the board
    file again, with nothing left to remove it."""
    from fastio.fairness import _board as b
    from fastio.plan import Participant

    before = boards()
    monitor = FairnessMonitor({"window_seconds": 10.0, "exchange_dir": str(tmp_path)})
    with fastio.Reader() as reader:
        observer = monitor.observe(Participant(0, 1, 0, 1), 0, 5, reader, lambda: 1)
        assert observer is not None
        monitor.close()
        observer.finish(0.1)
        assert observer.slot[b.ACTIVE] == 0.0
        assert not os.path.exists(monitor._path)
        again = monitor.observe(Participant(0, 1, 0, 1), 1, 5, reader, lambda: 1)
        assert again is not None
        again.tick(0.1)  # an iteration begun after the close: a fresh board
        assert os.path.exists(monitor._path)
    monitor.close()
    ds = dataset(written, tmp_path)
    items = iter(ds)
    next(items)
    ds.close()
    del items
    gc.collect()
    assert boards() == before
