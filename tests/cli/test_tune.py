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
    result = bench("sweep", str(folder), "-q", "1,8", "--read-size", "64KiB,1MiB",
                   "--engine", "io_uring,threads", "--tuner-memory-budget", "4MiB", "--out",
                   str(out), "--plot", str(image))  # fmt: skip
    assert "io_uring, direct=auto: MB/s" in result.stdout
    assert "threads, direct=auto: MB/s" in result.stdout
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


def test_sweep_tries_direct_auto_beside_true_and_false(folder: Path) -> None:
    data = json.loads(bench("sweep", str(folder), "-q", "1", "-b", "64KiB", "--direct",
                            "auto,false,true", "--json").stdout)  # fmt: skip
    assert [point["direct"] for point in data["points"]] == ["auto", False, True]
    assert "else auto" in " ".join(bench("sweep", "--help").stdout.split())  # the default it states


def test_sweep_json_on_stdout_and_with_a_config(folder: Path, tmp_path: Path) -> None:
    config = tmp_path / "data.yaml"
    config.write_text(f"urls: {sorted(str(p) for p in folder.iterdir())!r}\n"
                      "reader: {engine: threads, direct: true}\n")  # fmt: skip
    result = bench("sweep", "--config", str(config), "--outstanding-requests", "4", "-b",
                   "256KiB", "--direct", "false,true", "--json")  # fmt: skip
    data = json.loads(result.stdout)
    assert [(p["engine_used"], p["direct"]) for p in data["points"]] == [
        ("threads", False), ("threads", True),
    ]  # fmt: skip
    assert data["files"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-q", "0,4"], "0 is not in the range 1<=x<=256"),
        (["--read-size", "1KiB"], "read_size must be in"),
        (["--engine", "spdk"], "'spdk' is not one of 'auto', 'io_uring', 'threads'"),
        (["-b", "lots"], "not a size"),
        (["--direct", "both"], "'both' is not a valid boolean"),
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
    result = bench("tune", str(folder), "--tuner-window-seconds", "0.05",
                   "--tuner-warmup-seconds", "0.01", "--tuner-memory-budget", "8MiB",
                   "--tuner-max-trials", "12", "--max-seconds", "60", "--tuner-storage",
                   str(storage), "--tuned-config", str(out), "--plot", str(image),
                   "--json")  # fmt: skip
    assert "A new study created" not in result.stderr  # Optuna's INFO line is held back
    data = json.loads(result.stdout)
    assert data["converged"] is True
    assert data["trials"] <= 12
    best = data["best_config"]
    assert best["outstanding_requests"] * best["read_size"] <= 8 * MiB
    # The defaults (16 x 4 MiB) repaired to fit the budget given.
    assert data["start_config"] == {"outstanding_requests": 2, "read_size": 4 * MiB}
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
    again = json.loads(bench("tune", "--config", str(out), "--tuner-window-seconds", "0.05",
                             "--tuner-warmup-seconds", "0.01", "--tuner-memory-budget", "8MiB",
                             "--tuner-storage", str(storage), "--tuned-config",
                             str(tmp_path / "again.yaml"), "--json").stdout)  # fmt: skip
    assert again["start_config"] == best
    assert again["decisions"][0]["phase"] == "confirm"
    assert again["settled_after_windows"] <= 5


def test_tune_table_on_the_terminal_output(folder: Path, tmp_path: Path) -> None:
    result = bench("tune", str(folder), "--tuner-window-seconds", "0.05",
                   "--tuner-warmup-seconds", "0.01", "--tuner-max-trials", "8", "--tuned-config",
                   str(tmp_path / "t.yaml"), "--out", str(tmp_path / "t.json"),
                   cwd=tmp_path)  # fmt: skip
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
    bench("tune", str(folder), "--tuner-window-seconds", "0.05", "--tuner-warmup-seconds",
          "0.01", "--tuner-max-trials", "8", "--tuned-config", str(out), "--json")  # fmt: skip
    config = fastio.load_config(out)
    assert sorted(fastio.expand_urls(config.urls)) == shards
    with config.to_dataset() as dataset:
        assert sum(1 for _ in dataset) == len(written.samples)


@pytest.mark.parametrize("trials", [1, 3, 7])
def test_tune_with_fewer_trials_than_the_design_settles(folder: Path, tmp_path: Path,
                                                        trials: int) -> None:  # fmt: skip
    # --help allows 1..10000; fewer than the first design's 8 trials used to crash.
    out = tmp_path / "few.yaml"
    data = json.loads(bench("tune", str(folder), "--tuner-window-seconds", "0.05",
                            "--tuner-warmup-seconds", "0.01", "--tuner-max-trials", str(trials),
                            "--max-seconds", "60", "--tuned-config", str(out),
                            "--json").stdout)  # fmt: skip
    assert data["converged"] is True
    assert 1 <= data["trials"] <= trials
    assert fastio.load_config(out).reader.read_size == data["best_config"]["read_size"]


def test_few_trials_through_a_dataset_and_a_checked_config(folder: Path, tmp_path: Path) -> None:
    config = tmp_path / "few.yaml"
    config.write_text(f"urls: {sorted(str(p) for p in folder.iterdir())!r}\nformat: fixed\n"
                      "format_options: {record_size: 4096}\n"
                      "tuner: {enabled: true, max_trials: 2, window_seconds: 0.05}\n")  # fmt: skip
    bench("config", "check", str(config))  # passes the check ...
    with fastio.load_config(config).to_dataset() as from_config:  # ... and reads
        assert sum(1 for _ in from_config) == 4 * 2 * MiB // 4096
    urls = sorted(str(p) for p in folder.iterdir())
    with fastio.Dataset(urls, format="fixed", record_size=4096, tune={"max_trials": 3}) as dataset:
        assert sum(len(batch) for batch in dataset.batches(64)) == len(dataset)
        assert dataset.stats()["tuner"]["phase"] in ("explore", "remeasure", "settled")


def test_a_tuned_config_names_the_dataset_as_given_from_anywhere(tmp_path: Path) -> None:
    # A folder of tar shards beside a README and a subfolder: the dataset is
    # the shards (as fastio.Dataset reads a folder), wherever the config is used.
    bench("gen", "data", "--samples", "100", "--sample-size", "1KB", "--shards", "2", cwd=tmp_path)
    (tmp_path / "data" / "README.txt").write_text("about this dataset\n")
    (tmp_path / "data" / "sub").mkdir()
    (tmp_path / "data" / "sub" / "notes.md").write_text("x\n")
    fast = ("--tuner-window-seconds", "0.05", "--tuner-warmup-seconds", "0.01")
    bench("tune", "data", "--tuned-config", "tuned.yaml", *fast, "--max-seconds", "5", "--json",
          cwd=tmp_path)  # fmt: skip
    config = fastio.load_config(tmp_path / "tuned.yaml")
    assert list(config.urls) == [str(tmp_path / "data")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = json.loads(bench("run", "--config", str(tmp_path / "tuned.yaml"), "--json",
                              cwd=elsewhere).stdout)  # fmt: skip
    assert report["samples"] == 100


def test_a_tuned_config_holds_every_path_absolute(tmp_path: Path) -> None:
    """Paths in a config are taken from the directory it is used in: the one
    tune writes holds each of them as the directory tune ran in meant it."""
    bench("gen", "data", "--samples", "100", "--sample-size", "1KB", "--shards", "2", cwd=tmp_path)
    (tmp_path / "train.yaml").write_text(
        "urls: data/webdataset-{00000..00001}.tar\n"
        "format_options: {index: data/dataset.fastio-index.npz, index_dir: indexes}\n"
        "cache: {dir: [cache], max_bytes: 1GiB}\n"
        "tuner: {storage: sqlite:///trials.db}\n"
        "fairness: {exchange_dir: exchange}\n"
    )
    fast = ("--tuner-window-seconds", "0.05", "--tuner-warmup-seconds", "0.01")
    bench("tune", "--config", "train.yaml", "--tuned-config", "tuned.yaml", *fast,
          "--max-seconds", "3", "--json", cwd=tmp_path)  # fmt: skip
    config = fastio.load_config(tmp_path / "tuned.yaml")
    assert config.format_options.index == str(tmp_path / "data" / "dataset.fastio-index.npz")
    assert config.format_options.index_dir == str(tmp_path / "indexes")
    assert tuple(config.cache.dir) == (str(tmp_path / "cache"),)
    assert config.tuner.storage == f"sqlite:///{tmp_path / 'trials.db'}"
    assert config.fairness.exchange_dir == str(tmp_path / "exchange")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = json.loads(bench("run", "--config", str(tmp_path / "tuned.yaml"), "--json",
                              cwd=elsewhere).stdout)  # fmt: skip
    assert report["samples"] == 100
    assert not list(elsewhere.iterdir())  # nothing written where it was used


def test_gen_with_a_config_writes_the_format_its_urls_name(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("urls: data/train-{00000..00003}.tfrecord\n")
    bench("gen", "--config", "c.yaml", "--samples", "40", "--sample-size", "1KB", "--shards",
          "4", cwd=tmp_path)  # fmt: skip
    assert len(list((tmp_path / "data").glob("*.tfrecord"))) == 4
    assert not list((tmp_path / "data").glob("*.tar"))
    assert len(list(fastio.Dataset(str(tmp_path / "data")))) == 40


@pytest.mark.parametrize("urls", ["{root}/mydata", "mydata/", "mydata"])
def test_gen_with_a_config_that_names_a_folder_writes_into_it(tmp_path: Path, urls: str) -> None:
    # As tune writes a folder (absolute, no slash), made already or not yet.
    if urls.startswith("{root}"):
        (tmp_path / "mydata").mkdir()
    (tmp_path / "c.yaml").write_text(f"urls: {urls.format(root=tmp_path)}\nformat: jsonl\n")
    bench("gen", "--config", "c.yaml", "--samples", "10", "--sample-size", "100", "--shards",
          "2", cwd=tmp_path)  # fmt: skip
    assert len(list((tmp_path / "mydata").glob("jsonl-*.jsonl"))) == 2
    assert not list(tmp_path.glob("jsonl-*"))
    report = json.loads(bench("run", "--config", "c.yaml", "--json", cwd=tmp_path).stdout)
    assert report["samples"] == 10  # the config reads what gen wrote for it


def test_a_tune_report_never_shows_a_best_it_did_not_measure() -> None:
    from fastio.tuners import OnlineTuner

    from fastio.cli._tune import best_and_gain
    from fastio.reader._tuning import reader_space

    start = {"outstanding_requests": 16, "read_size": 4 * MiB}
    tuner = OnlineTuner(reader_space(64 * MiB), start, seed=0, max_trials=8, min_trials=4,
                        patience=3, keep_initial=True)  # fmt: skip
    tuner.start()
    windows = 0
    while tuner.phase != "settled" and windows < 50:  # every other setting measures slower
        tuner.tell_window(3e9 if tuner.config == start else 2e9)
        windows += 1
    best, rate, start_rate, gain = best_and_gain(tuner, start)
    assert (best, gain) == (start, 1.0)  # the start, against itself: no gain
    assert rate == start_rate == pytest.approx(3e9)
    while tuner.phase == "settled" and windows < 100:  # the storage got faster: a new round
        tuner.tell_window(7.5e9)
        windows += 1
    assert tuner.phase != "settled"
    assert tuner.best[1] == 0.0  # nothing measured in the new round yet
    best, rate, _, gain = best_and_gain(tuner, start)
    assert best == start  # what the last round settled at, as measured then
    assert rate > 0
    assert gain == 1.0
