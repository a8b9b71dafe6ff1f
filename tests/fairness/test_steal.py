"""balance="steal" with real DataLoader workers: a worker that is ahead takes
windows of a worker whose shards sit behind injected latency (a throttled
fsspec filesystem over real files), every sample is still delivered exactly
once, and a run stopped mid-epoch resumes (new loader, new process) without
repeating or skipping a sample."""

from __future__ import annotations

import collections
import functools
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import fastio
import fastio.sources._throttled  # registers throttled://
from fastio.fairness import FairnessSettings
from fastio.fairness._claims import REGISTERED
from fastio.fairness._monitor import _claims_path
from tests.shards import batch_keys, key_of, write

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHARDS = 6


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write("webdataset", tmp_path_factory.mktemp("steal"), shards=SHARDS, per_shard=23)


def make(written, index_dir, *, slow: bool = True, balance: str = "steal", **options):
    """Unshuffled, worker 0 of 2 reads the first shards: those are slowed."""
    slowed = [f"-{i:04d}." for i in range(SHARDS // 2)] if slow else []
    urls = [f"throttled://{url}" for url in written.urls]
    options = {"shuffle": False, "shuffle_buffer": 30_000, **options}
    return fastio.Dataset(
        urls, "webdataset", index_dir=str(index_dir),
        storage_options={"delay": 0.0005, "slow": slowed, "slow_delay": 0.08},
        reader=fastio.ReaderSettings(outstanding_requests=2, read_size=16 << 10),
        fairness={"window_seconds": 0.1, "balance": balance}, **options,
    )  # fmt: skip


def tagged(samples):
    """Collate in the worker: which worker delivered which keys. (The loaders
    take batches as they come, ``in_order=False``: in the default round-robin a
    worker can run only ``prefetch_factor`` batches ahead of the slow one, and
    never finishes its own part early enough to take any of the other's.)"""
    return torch.utils.data.get_worker_info().id, [key_of("webdataset", s) for s in samples]


def all_keys(written) -> collections.Counter[int]:
    return collections.Counter(row["key"] for row in written.samples)


@pytest.mark.slow  # epochs behind a slow path: ~3 s each
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_exactly_once_and_the_fast_workers_take_the_slow_ones_units(
    written, tmp_path, num_workers
) -> None:
    # The throttle matches path substrings: they must name the first shards.
    assert all(f"-{i:04d}." in written.urls[i] for i in range(SHARDS))
    dataset = make(written, tmp_path, slow=num_workers > 1)
    loader = DataLoader(
        dataset, batch_size=4, num_workers=num_workers, collate_fn=tagged, in_order=False
    )
    by_worker: dict[int, list[int]] = collections.defaultdict(list)
    for worker, keys in loader:
        by_worker[worker].extend(keys)
    delivered = collections.Counter(k for keys in by_worker.values() for k in keys)
    assert delivered == all_keys(written)
    report = dataset.fairness.report()
    assert report["balance"] == "steal"
    workers = {w["worker"]: w for w in report["workers"]}
    # The board's counts: what each delivered, which is what it ended up assigned.
    assert {w: len(keys) for w, keys in by_worker.items()} == {
        w: workers[w]["samples"] for w in workers
    }
    assert all(w["samples"] == w["assigned"] for w in workers.values())
    stolen = sum(w["units_stolen"] for w in workers.values())
    if num_workers == 1:
        assert stolen == 0
    else:
        parts = [set(dataset.order(0, worker=w, num_workers=num_workers).tolist())
                 for w in range(num_workers)]  # fmt: skip
        given = [sum(k in parts[owner] for w, keys in by_worker.items() if w != owner
                     for k in keys) for owner in range(num_workers)]  # fmt: skip
        taken = [sum(k not in parts[w] for k in by_worker[w]) for w in range(num_workers)]
        # Worker 0's shards are slow: others delivered part of its share.
        assert given[0] > 0, (given, taken, report["workers"])
        assert given == [workers[w]["samples_given"] for w in range(num_workers)]
        assert taken == [workers[w]["samples_stolen"] for w in range(num_workers)]
        assert stolen > 0
    dataset.close()


def test_shuffled_epochs_ranks_and_batches_are_exact(written, tmp_path) -> None:
    dataset = make(written, tmp_path, slow=False, shuffle=True, seed=3)
    loader = DataLoader(dataset, batch_size=5, num_workers=3, collate_fn=tagged, in_order=False)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        got = collections.Counter(k for _, keys in loader for k in keys)
        assert got == all_keys(written)
    ranks = [make(written, tmp_path, slow=False, shuffle=True, rank=r, world_size=2)
             for r in range(2)]  # fmt: skip
    got = collections.Counter(k for ds in ranks for _, keys in DataLoader(
        ds, batch_size=5, num_workers=2, collate_fn=tagged) for k in keys)  # fmt: skip
    assert got == all_keys(written)
    for ds in ranks:
        ds.close()
    batches = DataLoader(dataset.batches(6), batch_size=None, num_workers=2)
    got = collections.Counter(k for b in batches for k in batch_keys("webdataset", b))
    assert got == all_keys(written)
    dataset.close()


def test_balance_is_a_checked_knob_in_code_and_config() -> None:
    from fastio.config._model import FairnessSection

    assert FairnessSettings().balance == "budget"
    with pytest.raises(ValueError, match="balance must be"):
        FairnessSettings(balance="even")
    assert FairnessSection(balance="steal").to_settings().balance == "steal"
    with pytest.raises(ValueError, match="balance"):
        FairnessSection(balance="even")


def first_error(loader) -> str:
    """The error the loader's first batch raises (its iterator freed here)."""
    iterator = iter(loader)
    try:
        next(iterator)
    except ValueError as error:
        return str(error)
    finally:
        del iterator
        gc.collect()  # the traceback's cycle holds the iterator: shut its workers down now
    raise AssertionError("no error")


@pytest.mark.slow  # each failing loader's workers take ~5 s to shut down (torch's join timeout)
def test_drop_last_and_states_of_the_other_balance_are_refused(written, tmp_path) -> None:
    dataset = make(written, tmp_path, slow=False)
    loader = DataLoader(dataset.batches(6, drop_last=True), batch_size=None, num_workers=2)
    assert "drop_last" in first_error(loader)
    plain = make(written, tmp_path, slow=False, balance="budget")
    loader = StatefulDataLoader(plain, batch_size=4, num_workers=2, collate_fn=tagged)
    iterator = iter(loader)
    next(iterator)
    next(iterator)
    state = loader.state_dict()
    del iterator, loader
    resumed = StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged)
    resumed.load_state_dict(state)
    assert "without balance='steal'" in first_error(resumed)
    dataset.close()
    plain.close()


def run_until(loader, stop: int) -> tuple[list[int], dict]:
    head: list[int] = []
    for index, (_, keys) in enumerate(loader):
        head.extend(keys)
        if index == stop:
            return head, loader.state_dict()
    raise AssertionError(f"the epoch ended before batch {stop}")


@pytest.mark.parametrize(("num_workers", "stop"), [(2, 3), (2, 20), (3, 12)])
def test_resume_with_steal_in_a_new_loader(written, tmp_path, num_workers, stop) -> None:
    def loader(dataset):
        return StatefulDataLoader(dataset, batch_size=4, num_workers=num_workers,
                                  collate_fn=tagged)  # fmt: skip

    first = make(written, tmp_path, slow=False)
    head, state = run_until(loader(first), stop)
    first.close()
    second = make(written, tmp_path, slow=False)
    resumed = loader(second)
    resumed.load_state_dict(state)
    rest = [k for _, keys in resumed for k in keys]
    assert collections.Counter(head + rest) == all_keys(written)
    second.close()


def test_resume_with_the_same_dataset_and_restored_seed(written, tmp_path) -> None:
    # The loader restores its base seed: the claim table must still start afresh.
    dataset = make(written, tmp_path, slow=False)
    head, state = run_until(
        StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged),
        8,
    )
    for _ in range(2):
        resumed = StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged)
        resumed.load_state_dict(state)
        rest = [k for _, keys in resumed for k in keys]
        assert collections.Counter(head + rest) == all_keys(written)
    dataset.close()


def test_the_old_loaders_workers_claim_nothing_once_a_resumed_loader_took_the_table(
    written, tmp_path
) -> None:
    # The old loader stays alive: its workers go on with what they were asked
    # for (prefetching, here its remaining batches), claiming units as they
    # go. The resumed loader over the same dataset has the same generation
    # (its base seed restored) and took the table: the old workers must not
    # claim units in it, which it would then never deliver.
    dataset = make(written, tmp_path, slow=False)
    old = StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged)
    old_batches = iter(old)
    head: list[int] = []
    for index, (_, keys) in enumerate(old_batches):
        head.extend(keys)
        if index == 3:
            break
    resumed = StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged)
    resumed.load_state_dict(old.state_dict())
    batches = iter(resumed)
    rest = list(next(batches)[1])  # both of its workers joined the table and registered
    with pytest.raises(RuntimeError, match=r"took DataLoader worker \d's place"):
        for _ in old_batches:
            pass
    rest.extend(k for _, keys in batches for k in keys)
    assert collections.Counter(head + rest) == all_keys(written)
    del old_batches, old
    dataset.close()


# The longest a worker is held by the test below: bounded, so that a path the
# test did not foresee makes it pass or fail, never hang.
_HELD_SECONDS = 120.0


def stop_at_the_claim_table(paused, go, worker_id: int) -> None:
    """A worker_init_fn (audit hooks, in the worker processes only): worker 1
    stops right before it sets the size of the claim table it just found
    short, until ``go``; worker 0 opens the table only once worker 1 stopped
    there, so that all it does with the table falls between worker 1 reading
    the file's size and setting it."""
    stopped = False

    def hook(event: str, args: tuple) -> None:
        nonlocal stopped
        if stopped:
            return
        if worker_id == 1 and event == "os.truncate":
            if os.readlink(f"/proc/self/fd/{args[0]}").endswith(".claims"):
                stopped = True
                paused.set()
                go.wait(_HELD_SECONDS)
        elif worker_id == 0 and event == "open" and str(args[0]).endswith(".claims"):
            stopped = True
            paused.wait(_HELD_SECONDS)

    sys.addaudithook(hook)


def release_when_the_peer_registered_or_waits(path: str, paused, go, done) -> None:
    """Let worker 1 go on once worker 0 registered its units in the table at
    ``path``, or waits for the table's lock (which worker 1 then holds)."""
    while not paused.wait(0.01):
        if done.is_set():
            return
    info = os.stat(path)
    lock = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino} "
    while not done.is_set():
        with open(path, "rb") as table:
            table.seek(REGISTERED * 8)
            if int.from_bytes(table.read(8).ljust(8, b"\0"), "little"):
                break
        with open("/proc/locks") as locks:
            if any("->" in line and lock in line for line in locks):
                break
        time.sleep(0.005)
    go.set()


def test_resume_keeps_what_a_worker_registered_while_its_peer_opened_the_table(
    written, tmp_path
) -> None:
    # Worker 1 reads the new claim table's size (too short) and stops before it
    # sets it; meanwhile worker 0 grows the table and registers the units it
    # delivered before the save. Setting the size worker 1 read must not
    # shorten the file over them: they would be claimed and delivered again.
    first = make(written, tmp_path, slow=False)
    head, state = run_until(
        StatefulDataLoader(first, batch_size=4, num_workers=2, collate_fn=tagged), 8
    )
    first.close()
    second = make(written, tmp_path, slow=False)
    context = multiprocessing.get_context("fork")  # the workers share the events
    paused, go, done = context.Event(), context.Event(), threading.Event()
    resumed = StatefulDataLoader(
        second, batch_size=4, num_workers=2, collate_fn=tagged, multiprocessing_context=context,
        worker_init_fn=functools.partial(stop_at_the_claim_table, paused, go),
    )  # fmt: skip
    resumed.load_state_dict(state)
    releaser = threading.Thread(
        target=release_when_the_peer_registered_or_waits,
        args=(_claims_path(second.fairness._path), paused, go, done),
    )
    releaser.start()
    try:
        rest = [k for _, keys in resumed for k in keys]
    finally:
        done.set()
        go.set()
        releaser.join()
    assert collections.Counter(head + rest) == all_keys(written)
    second.close()


RESUME_SCRIPT = """
import collections, pickle, sys
from torchdata.stateful_dataloader import StatefulDataLoader
from tests.fairness.test_steal import make, tagged
written, index_dir, state = pickle.load(open(sys.argv[1], "rb"))
dataset = make(written, index_dir, slow=False)
loader = StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged)
loader.load_state_dict(state)
rest = [k for _, keys in loader for k in keys]
dataset.close()
pickle.dump(rest, open(sys.argv[2], "wb"))
"""


@pytest.mark.slow  # a new interpreter imports torch: ~4 s
def test_resume_with_steal_in_a_new_process(written, tmp_path) -> None:
    dataset = make(written, tmp_path, slow=False)
    head, state = run_until(
        StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=tagged),
        14,
    )
    dataset.close()
    saved, out = tmp_path / "state.pickle", tmp_path / "rest.pickle"
    saved.write_bytes(pickle.dumps((written, tmp_path, state)))
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(saved), str(out)], check=True,
                   cwd=REPOSITORY, timeout=120)  # fmt: skip
    rest = pickle.loads(out.read_bytes())
    assert collections.Counter(head + rest) == all_keys(written)


def stateful(samples):
    """Collate in the worker: its id, the keys, and its state right after them
    (what StatefulDataLoader keeps, here also with batches taken out of order)."""
    info = torch.utils.data.get_worker_info()
    return info.id, [key_of("webdataset", s) for s in samples], info.dataset.state_dict()


@pytest.mark.slow  # an epoch and a half behind a slow path: ~4 s
def test_resume_after_units_were_stolen_out_of_order(written, tmp_path) -> None:
    first = make(written, tmp_path)
    slow_part = set(first.order(0, worker=0, num_workers=2).tolist())
    loader = DataLoader(first, batch_size=4, num_workers=2, collate_fn=stateful, in_order=False)
    head: list[int] = []
    states: dict[int, dict] = {}
    stolen_seen = extra = 0
    for worker, keys, state in loader:
        head.extend(keys)
        states[worker] = state
        stolen_seen += worker == 1 and any(k in slow_part for k in keys)
        extra += stolen_seen > 0
        if extra == 3:  # stop a few batches after the first stolen one
            break
    assert stolen_seen, "worker 1 took none of worker 0's units before the stop"
    steal = states[1]["steal"]
    assert any(unit[0] == 0 for unit in [*steal["done"], steal["current"] or [1]])
    del loader
    first.close()
    second = make(written, tmp_path)

    def resume(worker_id: int) -> None:
        torch.utils.data.get_worker_info().dataset.load_state_dict(states[worker_id])

    rest_loader = DataLoader(second, batch_size=4, num_workers=2, collate_fn=tagged,
                             in_order=False, worker_init_fn=resume)  # fmt: skip
    rest = [k for _, keys in rest_loader for k in keys]
    assert collections.Counter(head + rest) == all_keys(written)
    second.close()
