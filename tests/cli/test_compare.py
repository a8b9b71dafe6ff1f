"""``fastio-bench compare`` as users run it, on small datasets of each kind of
peer: the ceiling, every installed loader that reads the format, the tuned
config file, which must load and read the dataset."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import fastio
from tests.cli.test_cli import bench
from tests.shards import write

PNG = b"\x89PNG\r\n\x1a\n"
TORCH = importlib.util.find_spec("torch") is not None

# format -> the peers that read it (when installed)
PEERS = {
    "webdataset": ["webdataset", "tarfile"] + ["webdataset DataLoader"] * TORCH,
    "tfrecord": ["tfrecord"],
    "parquet": ["pyarrow"],
}


@pytest.mark.parametrize("format_name", list(PEERS))
def test_compare_measures_ceiling_loaders_and_writes_a_tuned_config(
    tmp_path: Path, format_name: str
) -> None:
    written = write(format_name, tmp_path / "data", shards=3, per_shard=40)
    tuned, image = tmp_path / "tuned.yaml", tmp_path / "compare.png"
    report = json.loads(bench("compare", written.pattern, "--tune-seconds", "3",
                              "--tuner-window-seconds", "0.1", "--tuner-warmup-seconds", "0.01",
                              "--repeat", "2", "--workers", "1", "--batch-size", "16",
                              "--tuned-config", str(tuned), "--plot", str(image),
                              "--json").stdout)  # fmt: skip
    total = len(written.samples)
    assert report["dataset"]["samples"] == total
    assert report["dataset"]["format"] == format_name
    assert report["ceiling"]["mb_per_s"] > 0
    assert len(report["ceiling"]["points"]) == 9
    rows = {row["loader"]: row for row in report["loaders"]}
    expected = ["fastio", "fastio batches", "fastio tuned config",
                *(["fastio DataLoader"] if TORCH else []), *PEERS[format_name]]  # fmt: skip
    # A peer not installed here is named in left_out.
    installed = [name for name in expected if name not in report["left_out"]]
    for name in installed:
        row = rows[name]
        assert row["failed"] is None, (name, row["failed"])
        assert len(row["seconds_runs"]) == 2
        assert row["samples_per_s"] > 0
        assert row["mb_per_s"] > 0
    assert {"fastio", "fastio tuned config"} <= set(installed)
    assert set(report["left_out"]).isdisjoint(rows)
    assert image.read_bytes().startswith(PNG)
    # The tuned config loads back with the tuned knobs and reads the whole dataset.
    best = report["tuning"]["best_config"]
    config = fastio.load_config(tuned)
    assert (config.reader.outstanding_requests, config.reader.read_size) == (
        best["outstanding_requests"], best["read_size"],
    )  # fmt: skip
    with config.to_dataset() as dataset:
        assert sum(1 for _ in dataset) == total


def test_compare_table_and_unknown_loaders(tmp_path: Path) -> None:
    written = write("webdataset", tmp_path / "data", shards=2, per_shard=20)
    result = bench("compare", written.pattern, "--tune-seconds", "2", "--tuner-window-seconds",
                   "0.1", "--repeat", "1", "--loaders", "fastio,tarfile", "--tuned-config",
                   str(tmp_path / "tuned.toml"), "--out",
                   str(tmp_path / "compare.json"))  # fmt: skip
    assert "storage ceiling" in result.stdout
    assert "tarfile" in result.stdout
    assert "config: " in result.stdout
    data = json.loads((tmp_path / "compare.json").read_text())
    assert [row["loader"] for row in data["loaders"]] == ["fastio", "tarfile",
                                                          "fastio tuned config"]  # fmt: skip
    wrong = bench("compare", written.pattern, "--loaders", "nope", check=False)
    assert wrong.returncode == 2
    assert "unknown loaders ['nope']" in wrong.stderr


def test_compare_reads_arrow_ipc_streams_with_pyarrow(tmp_path: Path) -> None:
    """The format ``arrow`` takes IPC streams (Hugging Face's ``save_to_disk``
    files) beside IPC files: pyarrow's own loader reads both kinds."""
    import pyarrow as pa

    (tmp_path / "data").mkdir()
    table = pa.table({"id": list(range(50)), "text": [f"row {i}" for i in range(50)]})
    for number, stream in enumerate((True, False)):
        path = tmp_path / "data" / f"part-{number}.arrow"
        with pa.OSFile(str(path), "wb") as sink:
            opened = pa.ipc.new_stream if stream else pa.ipc.new_file
            with opened(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=16)
    report = json.loads(bench("compare", str(tmp_path / "data" / "part-{0..1}.arrow"),
                              "--tune-seconds", "1", "--tuner-window-seconds", "0.1",
                              "--repeat", "1", "--loaders", "fastio batches,pyarrow",
                              "--tuned-config", str(tmp_path / "tuned.yaml"),
                              "--json").stdout)  # fmt: skip
    rows = {row["loader"]: row for row in report["loaders"]}
    assert rows["pyarrow"]["failed"] is None, rows["pyarrow"]["failed"]
    assert rows["pyarrow"]["samples_per_s"] > 0
    assert report["dataset"]["samples"] == 100


def test_compare_under_skip_leaves_out_missing_shards_or_says_none_is_there(tmp_path: Path) -> None:
    """A config that skips what it cannot read: a shard gone is left out of
    every loader's run; a config used where none of its shards are (its
    paths are taken from the directory it is used in) is an error line."""
    written = write("webdataset", tmp_path / "data", shards=3, per_shard=20)
    gone = sorted((tmp_path / "data").glob("*.tar"))[-1]
    gone.unlink()
    config = tmp_path / "c.yaml"
    config.write_text("urls: data/*.tar\non_error: skip\n")
    options = ["--tune-seconds", "1", "--tuner-window-seconds", "0.1", "--repeat", "1",
               "--workers", "0", "--loaders", "fastio,tarfile", "--json"]  # fmt: skip
    report = json.loads(bench("compare", "--config", str(config), *options, "--tuned-config",
                              str(tmp_path / "t.yaml"), cwd=tmp_path).stdout)  # fmt: skip
    assert report["dataset"]["shards"] == 2
    with fastio.Dataset([str(path) for path in sorted((tmp_path / "data").glob("*.tar"))]) as kept:
        assert report["dataset"]["samples"] == len(kept) < len(written.samples)
    assert all(row["failed"] is None for row in report["loaders"])
    config.write_text("urls: data/webdataset-{00000..00002}.tar\non_error: skip\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    failed = bench("compare", "--config", str(config), *options, "--tuned-config",
                   str(tmp_path / "t2.yaml"), cwd=elsewhere, check=False)  # fmt: skip
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    assert "no shard of the dataset can be read" in failed.stderr
