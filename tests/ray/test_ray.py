"""fastio datasets read by Ray Data on a local Ray instance: every sample
exactly once across the read tasks, the same samples fastio.Dataset delivers,
on shards written by the peers' own writers (webdataset's ShardWriter, the
tfrecord package, numpy)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is the ray extra: pip install 'fastio[ray]'")

import fastio  # noqa: E402
from fastio.ray import FastIODatasource, read  # noqa: E402
from tests.dataset.test_bad_input import damage_tar  # noqa: E402
from tests.shards import check_sample, key_of, write  # noqa: E402

# Ray 2.60's DataContext sets its own deprecated fields while it makes itself.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> object:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)  # fmt: skip
    yield
    ray.shutdown()


def _fastio_samples(pattern: str, **options: object) -> dict[int, object]:
    with fastio.Dataset(pattern, shuffle=False, fairness=False, **options) as dataset:
        return {key_of(str(options["format"]), sample): sample for sample in dataset}


def test_webdataset_rows_are_the_datasets_samples_each_once(tmp_path: Path) -> None:
    written = write("webdataset", tmp_path, shards=4, per_shard=15, index=False)
    rows = read(written.pattern, override_num_blocks=3).take_all()
    keys = Counter(key_of("webdataset", row) for row in rows)
    assert keys == Counter(range(len(written.samples)))
    expected = _fastio_samples(written.pattern, **written.options)
    for row in rows:
        key = key_of("webdataset", row)
        assert row == expected[key]  # __key__, __url__ and every member's bytes
        check_sample("webdataset", row, written.samples[key])


def test_read_tasks_split_the_samples_into_disjoint_parts(tmp_path: Path) -> None:
    written = write("webdataset", tmp_path, shards=3, per_shard=12)
    source = FastIODatasource(written.pattern, block_rows=5)
    tasks = source.get_read_tasks(4)
    assert len(tasks) == 4
    parts = []
    for task in tasks:  # each task's blocks, read here as a Ray worker would
        keys = [key_of("webdataset", row) for block in task()
                for row in block.to_pylist()]  # fmt: skip
        assert len(keys) == task.metadata.num_rows
        assert {row["__url__"] for row in _rows(task)} <= set(task.metadata.input_files)
        parts.append(keys)
    assert sorted(k for part in parts for k in part) == list(range(len(written.samples)))
    assert all(max(a) < min(b) for a, b in itertools.pairwise(parts))  # contiguous, in order
    assert source.estimate_inmemory_data_size() == sum(Path(u).stat().st_size
                                                       for u in written.urls)  # fmt: skip


def test_a_dataset_never_seen_is_split_by_shards_and_indexed_on_the_way(tmp_path: Path) -> None:
    written = write("tfrecord", tmp_path, shards=4, per_shard=10, index=False)
    source = FastIODatasource(written.pattern)
    assert source.split == "shards"
    assert source.estimate_inmemory_data_size() is None  # nothing read on the driver
    tasks = source.get_read_tasks(8)
    assert [list(task.metadata.input_files) for task in tasks] == [[url] for url in written.urls]
    parts = [[key_of("tfrecord", row) for row in _rows(task)] for task in tasks]
    assert sorted(k for part in parts for k in part) == list(range(len(written.samples)))
    assert not set(parts[0]) & set(parts[1])
    # The tasks left the indexes behind: the next read splits by samples.
    again = FastIODatasource(written.pattern)
    assert again.split == "samples"
    assert sum(task.metadata.num_rows for task in again.get_read_tasks(3)) == len(
        written.samples)  # fmt: skip


def _rows(task: object) -> list[dict[str, object]]:
    return [row for block in task() for row in block.to_pylist()]  # type: ignore[operator]


def test_tfrecord_shuffled_epoch_reads_every_sample_once(tmp_path: Path) -> None:
    written = write("tfrecord", tmp_path, shards=3, per_shard=10)
    rows = read(written.pattern, shuffle=True, seed=3, epoch=2, override_num_blocks=2,
                example=True).take_all()  # fmt: skip
    assert Counter(key_of("tfrecord", row) for row in rows) == Counter(
        range(len(written.samples)))  # fmt: skip
    for row in rows:
        key = key_of("tfrecord", row)
        assert row["data"] == [written.samples[key]["data"]]
        assert list(row["label"]) == [written.samples[key]["label"]]


def test_numpy_rows_come_as_a_tensor_column(tmp_path: Path) -> None:
    written = write("npy", tmp_path, shards=2, per_shard=9)
    rows = read(written.pattern, override_num_blocks=3).take_all()
    assert sorted(key_of("npy", row["data"]) for row in rows) == list(range(len(written.samples)))
    for row in rows:
        check_sample("npy", row["data"], written.samples[key_of("npy", row["data"])])


@pytest.mark.parametrize(
    ("knobs", "message"),
    [({"rank": 1, "world_size": 2}, "rank, world_size: Ray's read tasks split the samples"),
     ({"remainder": "drop"}, "remainder='drop' would drop or repeat samples"),
     ({"block_rows": 0}, "block_rows must be positive"),
     ({"split": "files"}, "split must be 'auto', 'samples' or 'shards', not 'files'")],
    ids=["rank", "remainder", "block_rows", "split"],
)  # fmt: skip
def test_knobs_that_would_break_exactly_once_are_refused(
    tmp_path: Path, knobs: dict[str, object], message: str
) -> None:
    written = write("webdataset", tmp_path, shards=1, per_shard=3)
    with pytest.raises(ValueError, match=message):
        FastIODatasource(written.pattern, **knobs)


def test_a_cut_shard_raises_naming_it_or_under_skip_every_intact_sample_comes_once(
    tmp_path: Path,
) -> None:
    written = write("webdataset", tmp_path, shards=4, per_shard=12)
    url, cut_key, end_key = damage_tar(written)
    with pytest.raises(fastio.TruncatedShardError, match=url):
        read(written.pattern, override_num_blocks=2).take_all()
    rows = read(written.pattern, on_error="skip", override_num_blocks=3).take_all()
    keys = Counter(key_of("webdataset", row) for row in rows)
    assert set(keys.values()) == {1}
    assert set(keys) == set(range(len(written.samples))) - set(range(cut_key, end_key))


def test_count_limit_and_a_read_again_in_a_new_ray_session(tmp_path: Path) -> None:
    written = write("webdataset", tmp_path, shards=3, per_shard=10)
    assert read(written.pattern, override_num_blocks=2).count() == len(written.samples)
    assert len(read(written.pattern, override_num_blocks=2).limit(7).take_all()) == 7
    source = FastIODatasource(written.pattern)
    assert len(ray.data.read_datasource(source).take_all()) == len(written.samples)
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    assert len(ray.data.read_datasource(source).take_all()) == len(written.samples)
