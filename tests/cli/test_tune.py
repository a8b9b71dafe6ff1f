"""``fastio-bench sweep`` and ``fastio-bench tune`` as users run them: the
installed console script, in a subprocess, on small real files."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import fastio

MiB = 1 << 20
PNG = b"\x89PNG\r\n\x1a\n"


def bench(
    *args: str, check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "fastio-bench"
    assert executable.exists(), "the console script is not installed"
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=300,
                          check=check, cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("cli-data")
    for index in range(4):
        (data / f"part-{index}.bin").write_bytes(random.Random(index).randbytes(2 * MiB))
    return data


def test_sweep_writes_table_json_and_heatmap(folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the heatmap needs the plot extra")
    out, image = tmp_path / "sweep.json", tmp_path / "sweep.png"
    result = bench("sweep", str(folder), "--requests", "1,8", "--sizes", "64KiB,1MiB",
                   "--engines", "io_uring,threads", "--budget", "4MiB", "--json", str(out),
                   "--plot", str(image))  # fmt: skip
    assert "io_uring, buffered: MB/s" in result.stdout
    assert "threads, buffered: MB/s" in result.stdout
    assert "best:" in result.stdout
    data = json.loads(out.read_text())
    assert len(data["points"]) == 2 * 2 * 2
    assert data["bytes"] == 4 * 2 * MiB
    assert {p["engine_used"] for p in data["points"]} == {"io_uring", "threads"}
    assert all(p["mb_per_s"] > 0 and p["bytes"] == 8 * MiB for p in data["points"])
    # 8 x 1 MiB is over a 4 MiB budget: marked so.
    over = [p for p in data["points"] if not p["within_budget"]]
    assert {(p["outstanding_requests"], p["read_size"]) for p in over} == {(8, MiB)}
    assert data["best"]["mb_per_s"] == max(p["mb_per_s"] for p in data["points"])
    assert image.read_bytes().startswith(PNG)


def test_sweep_json_on_stdout_and_with_a_config(folder: Path, tmp_path: Path) -> None:
    config = tmp_path / "data.yaml"
    config.write_text(f"urls: {sorted(str(p) for p in folder.iterdir())!r}\n"
                      "reader: {engine: threads, direct: true}\n")  # fmt: skip
    result = bench("sweep", "--config", str(config), "--requests", "4", "--sizes", "256KiB",
                   "--direct", "both", "--json", "-")  # fmt: skip
    data = json.loads(result.stdout)
    assert [(p["engine_used"], p["direct"]) for p in data["points"]] == [
        ("threads", False), ("threads", True),
    ]  # fmt: skip
    assert data["files"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--requests", "0,4"], "outstanding requests must be in 1..256"),
        (["--sizes", "1KiB"], "read_size must be in"),
        (["--engines", "spdk"], "--engines must be among"),
        (["--sizes", "lots"], "not a size"),
    ],
)
def test_sweep_refuses_bad_options(folder: Path, args: list[str], message: str) -> None:
    result = bench("sweep", str(folder), *args, check=False)
    assert result.returncode == 2
    assert message in result.stderr


def test_sweep_and_tune_need_something_to_read(tmp_path: Path) -> None:
    for command in ("sweep", "tune"):
        result = bench(command, check=False)
        assert result.returncode == 2
        assert "give PATHS to read, or --config FILE" in result.stderr
        missing = bench(command, str(tmp_path / "absent"), check=False)
        assert missing.returncode == 2
        assert "no such file or directory" in missing.stderr


def test_tune_settles_and_writes_a_config_that_loads_back(folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot needs the plot extra")
    out, image = tmp_path / "tuned.toml", tmp_path / "tune.png"
    storage = tmp_path / "trials.log"
    result = bench("tune", str(folder), "--window-seconds", "0.05", "--warmup-seconds", "0.01",
                   "--budget", "8MiB", "--max-trials", "12", "--max-seconds", "60",
                   "--storage", str(storage), "--out", str(out), "--plot", str(image),
                   "--json", "-")  # fmt: skip
    data = json.loads(result.stdout)
    assert data["converged"] is True
    assert data["trials"] <= 12
    best = data["best_config"]
    assert best["outstanding_requests"] * best["read_size"] <= 8 * MiB
    assert data["start_config"] == {"outstanding_requests": 8, "read_size": MiB}  # repaired
    assert {d["phase"] for d in data["decisions"]} >= {"explore", "settled"}
    assert len(data["configurations"]) > 1  # it tried more than the start
    assert data["timeline"][-1][1] > 0
    assert image.read_bytes().startswith(PNG)
    assert storage.exists()
    # The config file loads back with the tuned knobs (and the trials' storage).
    config = fastio.load_config(out)
    assert (config.reader.outstanding_requests, config.reader.read_size) == (
        best["outstanding_requests"], best["read_size"],
    )  # fmt: skip
    assert config.tuner.storage == str(storage)
    assert data["reader"]["read_size"] == best["read_size"]
    # A second run on the same files and storage starts at the stored best and
    # settles within a few windows.
    again = json.loads(bench("tune", "--config", str(out), "--window-seconds", "0.05",
                             "--warmup-seconds", "0.01", "--budget", "8MiB",
                             "--storage", str(storage), "--out", str(tmp_path / "again.yaml"),
                             "--json", "-").stdout)  # fmt: skip
    assert again["start_config"] == best
    assert again["decisions"][0]["phase"] == "confirm"
    assert again["settled_after_windows"] <= 5


def test_tune_table_on_the_terminal_output(folder: Path, tmp_path: Path) -> None:
    result = bench("tune", str(folder), "--window-seconds", "0.05", "--warmup-seconds", "0.01",
                   "--max-trials", "8", "--out", str(tmp_path / "t.yaml"), "--json",
                   str(tmp_path / "t.json"), cwd=tmp_path)  # fmt: skip
    assert "configurations measured" in result.stdout
    assert "config: " in result.stdout
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["windows"] == len(data["decisions"])
    assert (
        fastio.load_config(tmp_path / "t.yaml").reader.read_size == data["best_config"]["read_size"]
    )


def test_folders_and_globs_never_pick_up_fastios_files(tmp_path: Path) -> None:
    from tests.shards import write

    written = write("webdataset", tmp_path / "data", shards=4, per_shard=20)  # and its index
    folder = tmp_path / "data"
    assert (folder / "dataset.fastio-index.npz").exists()
    shards = sorted(str(Path(url)) for url in written.urls)
    for _ in range(2):  # the second run sees what the first left, if anything
        dataset_run = json.loads(bench("run", "--format", "webdataset", f"{folder}/*",
                                       "--json").stdout)  # fmt: skip
        assert dataset_run["samples"] == len(written.samples)
        files_run = json.loads(bench("run", str(folder), "--json").stdout)
        assert files_run["bytes"] == sum(Path(url).stat().st_size for url in shards)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(Path(url).name for url in shards), "dataset.fastio-index.npz"]
    )
    out = tmp_path / "tuned.yaml"
    bench("tune", str(folder), "--window-seconds", "0.05", "--warmup-seconds", "0.01",
          "--max-trials", "8", "--out", str(out), "--json", "-")  # fmt: skip
    config = fastio.load_config(out)
    assert sorted(fastio.expand_urls(config.urls)) == shards
    with config.to_dataset() as dataset:
        assert sum(1 for _ in dataset) == len(written.samples)
