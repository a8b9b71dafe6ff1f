"""The epoch ledger: in this process's memory until another process needs it,
then in the shared file every process of the rank maps (a real fork, a
pickled copy, DataLoader workers)."""

from __future__ import annotations

import os
import pickle

from torch.utils.data import DataLoader

import fastio
from fastio.plan._ledger import EpochLedger
from fastio.shared import _mapped
from tests.shards import key_of, write


def own_files() -> set[str]:
    """The shared files this process named."""
    return {name for name in os.listdir(_mapped.shared_folder())
            if _mapped.owner_of(name) == os.getpid()}  # fmt: skip


def test_a_ledger_is_in_memory_until_a_fork_and_then_shared_with_the_child() -> None:
    ledger = EpochLedger()
    try:
        assert ledger.begin(0, None) == (0, False)
        assert ledger.begin(0, None) == (1, False)  # each pass of a process is the next epoch
        assert not os.path.exists(ledger._path)
        read, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the child's next pass: the epoch after the parent's
            os.close(read)
            epoch, _ = ledger.begin(0, None)
            os.write(write_end, str(epoch).encode())
            os._exit(0)
        os.close(write_end)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with os.fdopen(read) as answer:
            assert answer.read() == "2"
        assert os.path.exists(ledger._path)
        assert ledger.next_epoch() == 3  # the child's pass counted here too
        assert ledger.begin(0, None) == (3, False)
    finally:
        ledger.close()
    assert not os.path.exists(ledger._path)


def test_a_pickled_ledger_shares_the_file_with_the_one_it_was_pickled_from() -> None:
    ledger = EpochLedger()
    try:
        ledger.begin(0, None)
        ledger.set_next(5)
        copy = pickle.loads(pickle.dumps(ledger))
        assert os.path.exists(ledger._path)
        assert copy.next_epoch() == 5
        assert copy.current() == ledger.current() == 0
        copy.set_next(9)
        assert ledger.next_epoch() == 9
        assert ledger.begin(0, None) == (9, False)
    finally:
        ledger.close()


def test_a_ledger_closed_in_memory_goes_on_counting() -> None:
    ledger = EpochLedger()
    try:
        ledger.begin(0, None)
        ledger.close()
        assert ledger.begin(0, None) == (1, False)
        ledger.share()  # as a fork or a pickle would
        assert os.path.exists(ledger._path)
        assert ledger.begin(0, None) == (2, False)
    finally:
        ledger.close()


def test_a_first_sample_without_workers_makes_no_shared_file_and_workers_go_on_counting(
    tmp_path,
) -> None:
    written = write("webdataset", tmp_path / "data", shards=4, per_shard=6)

    def orders(dataset: fastio.Dataset, epochs: range) -> list[list[int]]:
        loader = DataLoader(dataset, batch_size=None, num_workers=2)
        return [[key_of("webdataset", sample) for sample in loader] for _ in epochs]

    before = own_files()
    with fastio.Dataset(written.pattern, seed=3) as dataset:
        items = iter(dataset)
        first = next(items)
        assert own_files() == before
        main = [[key_of("webdataset", first), *(key_of("webdataset", s) for s in items)]]
        main.append([key_of("webdataset", sample) for sample in dataset])
        # Workers forked now take the epochs after the main process's two.
        forked = orders(dataset, range(2))
    expected_main, expected_forked = [], []
    for epoch in range(4):
        with fastio.Dataset(written.pattern, seed=3) as fresh:
            fresh.set_epoch(epoch)
            if epoch < 2:
                expected_main.append([key_of("webdataset", sample) for sample in fresh])
            else:
                expected_forked += orders(fresh, range(1))
    assert main == expected_main
    assert forked == expected_forked
    assert len({tuple(order) for order in main + forked}) == 4
