"""fastio-bench as users run it: the installed console script, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastio.cli._options import parse_size


def bench(*args: str, check: bool = True, cwd: Path | None = None
          ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    # The console script installed beside this interpreter.
    executable = Path(sys.executable).parent / "fastio-bench"
    assert executable.exists(), "the console script is not installed"
    return subprocess.run([str(executable), *args], capture_output=True, text=True,
                          timeout=300, check=check, cwd=cwd)  # fmt: skip


def test_run_prints_one_json_object(tmp_path, make_file) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "nested").mkdir()
    sizes = [100_000, 2_000_000, 0]
    for index, size in enumerate(sizes):
        target = folder / ("nested" if index == 1 else "") / f"f{index}.bin"
        target.write_bytes(b"\x01" * size)
    result = bench(
        "run",
        str(folder),
        "--outstanding-requests",
        "8",
        "--read-size",
        "64KiB",
        "--engine",
        "threads",
        "--json",
        "--repeat",
        "3",
    )
    report = json.loads(result.stdout)
    assert report["bytes"] == sum(sizes)
    assert report["files"] == 3
    assert report["runs"] == 3
    assert len(report["mb_per_s_runs"]) == 3
    assert report["mb_per_s"] > 0
    assert report["seconds"] > 0
    settings = report["settings"]
    assert settings["outstanding_requests"] == 8
    assert settings["read_size"] == 65_536
    assert settings["engine"] == "threads"
    assert settings["direct"] == "auto"  # the default: O_DIRECT where the page cache holds little
    assert report["stats"]["bytes_delivered"] == sum(sizes)


def test_run_direct_table(make_file) -> None:
    path, _ = make_file(300_001)
    result = bench("run", path, "--direct", "-b", "1m", "-q", "4")
    assert "fastio" in result.stdout
    assert "read_size=1MiB" in result.stdout
    assert "direct=True" in result.stdout


def test_run_reports_a_missing_path(tmp_path) -> None:
    result = bench("run", str(tmp_path / "absent"), check=False)
    assert result.returncode == 2
    assert "absent: no such file or directory" in result.stderr


@pytest.mark.parametrize("command", ["run", "tune", "sweep"])
def test_commands_of_local_files_name_a_remote_url_as_such(command) -> None:
    url = "http://127.0.0.1:9/data/shard-0000.tar"
    result = bench(command, url, check=False)
    assert result.returncode == 2
    assert f"{url} is remote" in result.stderr  # whole: no slash lost


def test_run_rejects_bad_knobs(make_file) -> None:
    path, _ = make_file(10)
    result = bench("run", path, "--read-size", "lots", check=False)
    assert result.returncode == 2
    assert "not a size" in result.stderr
    result = bench("run", path, "--outstanding-requests", "0", check=False)
    assert result.returncode == 2


TINY_DEMO = ("demo", "--samples", "24", "--sample-size", "20KB", "--shards", "2", "--repeat", "2",
             "--batch-size", "5")  # fmt: skip


def test_demo_compares_loaders_cold_and_warm_with_earned_ratios() -> None:
    report = json.loads(bench(*TINY_DEMO, "--json").stdout)
    loaders = report["loaders"]
    assert set(loaders) == {"fastio", "webdataset", "tarfile loop", "fastio DataLoader",
                            "webdataset DataLoader"}  # fmt: skip
    for name, modes in loaders.items():
        assert set(modes) == {"cold", "warm"}
        for row in modes.values():
            assert row["samples"] == [24], name
            assert not row["wrong"]
            assert len(row["seconds_runs"]) == 2
            assert row["seconds"] == pytest.approx(sum(row["seconds_runs"]) / 2)  # the median
            assert row["samples_per_s"] == pytest.approx(24 / row["seconds"])
    # Each peer's ratio is fastio read the same way (in process, or in a
    # DataLoader) over the peer, from the medians shown.
    for peer, fastio in [("webdataset", "fastio"), ("tarfile loop", "fastio"),
                         ("webdataset DataLoader", "fastio DataLoader")]:  # fmt: skip
        for mode in ("cold", "warm"):
            assert loaders[peer][mode]["fastio_ratio"] == pytest.approx(
                loaders[fastio][mode]["samples_per_s"] / loaders[peer][mode]["samples_per_s"]
            )
    assert "fastio_ratio" not in loaders["fastio"]["warm"]


def test_demo_table_with_a_config_files_reader_settings_keeps_a_given_folder(tmp_path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "urls: unused-{0..1}.tar\nreader: {outstanding_requests: 3, read_size: 256KiB}\n"
    )
    data = tmp_path / "data"
    options = ("--repeat", "1", "--workers", "0", "--folder", str(data), "--config", str(config))
    result = bench(*TINY_DEMO, *options, "--out", str(tmp_path / "demo.json"))
    assert "fastio is" in result.stdout
    assert "fastio DataLoader: not run (--workers 0)" in " ".join(result.stdout.split())
    assert len(list(data.glob("webdataset-*.tar"))) == 2  # a given folder is kept
    report = json.loads((tmp_path / "demo.json").read_text())
    assert report["reader"]["outstanding_requests"] == 3
    assert report["reader"]["read_size"] == 256 << 10
    assert report["loaders"]["fastio"]["warm"]["samples"] == [24]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("65536", 65536), ("64KiB", 65536), ("4m", 4 << 20), ("1MB", 1_000_000), ("1.5GiB", 3 << 29)],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_bad_size() -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size("four")


def test_run_reads_a_dataset_and_reports_shuffle_quality(tmp_path) -> None:
    from tests.shards import write

    written = write("webdataset", tmp_path, shards=5, per_shard=30)
    total = len(written.samples)
    shuffled = json.loads(
        bench(
            "run",
            "--format",
            "webdataset",
            written.pattern,
            "--json",
            "--repeat",
            "2",
            "--shuffle-buffer",
            "64KiB",
            "--shuffle-shards",
            "3",
        ).stdout
    )
    assert shuffled["samples"] == shuffled["expected_samples"] == total
    assert shuffled["runs"] == 2
    assert shuffled["samples_per_s"] > 0
    quality = shuffled["shuffle_quality"]
    assert quality["samples"] == total
    assert abs(quality["rank_correlation"]) < 0.9
    assert quality["longest_shard_run"] < 30
    stored = json.loads(
        bench(
            "run",
            "--format",
            "auto",
            written.pattern,
            "--json",
            "--no-shuffle",
            "--batch-size",
            "16",
        ).stdout
    )
    assert stored["samples"] == total
    assert stored["batch_size"] == 16
    assert stored["shuffle_quality"]["rank_correlation"] == pytest.approx(1.0)
    table = bench("run", "--format", "webdataset", written.pattern).stdout
    assert "rank correlation" in table
    assert f"{total}" in table


def test_run_dataset_errors_are_reported(tmp_path) -> None:
    result = bench(
        "run", "--format", "tfrecord", str(tmp_path / "none-{0..3}.tfrecord"), check=False
    )
    assert result.returncode == 1
    assert "No such file" in result.stderr
    assert "none-0.tfrecord" in result.stderr


def test_help_shows_the_specs_defaults_as_the_spec_writes_them() -> None:
    shown = " ".join(bench("run", "--help").stdout.split())
    assert "[default: 4MiB]" in shown  # --read-size
    assert "[default: 32MiB]" in shown  # --memory-budget and --shuffle-buffer
    assert "[default: 16; 1<=x<=256]" in shown  # --outstanding-requests


def test_options_given_win_over_the_config_in_fairness(tmp_path) -> None:
    from tests.shards import write

    written = write("webdataset", tmp_path / "data", shards=2, per_shard=10)
    config = tmp_path / "job.yaml"
    config.write_text(f"urls: {written.pattern}\nreader: {{outstanding_requests: 3}}\n"
                      "fairness: {window_seconds: 0.5, mitigate: false}\n")  # fmt: skip
    report = json.loads(bench("fairness", "--config", str(config), "--workers", "0",
                              "--step-ms", "0", "-q", "7", "--fairness-window-seconds", "0.05",
                              "--json").stdout)  # fmt: skip
    assert report["settings"]["window_seconds"] == 0.05  # given: wins
    assert report["settings"]["mitigate"] is False  # left at its default: the file's
    assert {w["outstanding_requests"] for w in report["report"]["workers"]} == {7}


def test_tiering_probe_checks_a_tier_as_the_spec_does(tmp_path) -> None:
    result = bench("tiering", "probe", "--tier", f"fast={tmp_path}:lots", check=False)
    assert result.returncode == 2
    assert "capacity must be a size (65536, 64KiB, 4m or 1GiB), not 'lots'" in result.stderr


def test_run_reads_a_dataset_never_seen_before(tmp_path) -> None:
    # Freshly written shards have no index: the first epoch indexes them on the way.
    written = json.loads(bench("gen", str(tmp_path), "--samples", "90", "--sample-size", "1KiB",
                               "--shards", "3", "--json").stdout)  # fmt: skip
    report = json.loads(bench("run", "--format", "webdataset", written["url"], "--repeat", "2",
                              "--json").stdout)  # fmt: skip
    assert report["samples"] == report["expected_samples"] == 90
    assert report["runs"] == 2


def test_fairness_table_shows_a_window_without_readiness(capsys) -> None:
    # A window can close with a worker's rate but no readiness yet (no time asked):
    # the table shows "-" there instead of failing on None.
    from fastio.cli._fairness import print_timeline

    worker = {"worker": 0, "rate": 120.0, "readiness": None, "starved": False,
              "outstanding_requests": 8}  # fmt: skip
    window = {"window": 0, "jain_index": float("nan"), "workers": [worker]}
    report = {"workers": [{"worker": 0}], "starved_workers": [], "mitigate": True,
              "timeline": [window]}  # fmt: skip
    print_timeline({"report": report, "epoch_seconds": [0.5]})
    shown = capsys.readouterr().out
    assert "120/s - q=8" in shown


def test_fairness_slows_shards_of_a_folder_or_a_glob(tmp_path) -> None:
    """--slow reads the shards it names behind a delay, whatever form PATHS
    take (a folder, a glob, braces)."""
    from tests.shards import write

    written = write("webdataset", tmp_path / "data", shards=2, per_shard=6)
    slow = Path(written.urls[0]).stem
    for paths in (str(tmp_path / "data"), str(tmp_path / "data" / "*.tar"), written.pattern):
        result = bench("fairness", paths, "--workers", "0", "--step-ms", "0", "--slow", slow,
                       "--json", check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["slow"] == [slow]


def test_a_timeline_plots_rates_the_storage_delivered() -> None:
    from fastio.cli._report import _rates

    # 4 MB chunks handed over three at once every 1.5 ms (8 GB/s on average),
    # the last one 50 us after the burst before it.
    chunk, points, moment, total = 4_000_000, [], 0.0, 0
    for _ in range(40):
        moment += 1.5e-3
        for offset in (0.0, 2e-6, 4e-6):
            total += chunk
            points.append((moment + offset, total))
    total += chunk
    points.append((points[-1][0] + 50e-6, total))
    times, rates = _rates(points, 1e6)
    average = total / points[-1][0] / 1e6
    assert times[-1] == points[-1][0]
    assert len(times) >= 20
    # No point of the line is far above what was delivered on average: a
    # burst, or the last chunk over the microseconds before it, is no rate.
    assert max(rates) < 1.5 * average, (max(rates), average)
    assert min(rates[len(rates) // 2 :]) > 0.5 * average


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tune", "{data}", "--tuned-config", "{tmp}/tuned.cfg"], "unknown config file type"),
        (["compare", "{data}", "--tuned-config", "{tmp}/none/tuned.yaml"], "no folder"),
        (["run", "{data}", "--out", "{tmp}/none/r.json"], "no folder"),
        (["sweep", "{data}", "-q", "1", "-b", "64KiB", "--plot", "{tmp}/none/s.png"], "no folder"),
        (["tiering", "--files", "20", "--hours", "nan"], "not a number"),
        (["tiering", "--files", "20", "--tiering-prior-strength", "nan"], "not a number"),
        (["tiering", "--files", "20", "--budget-fraction", "nan"], "not a number"),
        (["demo", "--sample-size", "0"], "at least one byte"),
        (["demo", "--samples", "3", "--shards", "8"], "cannot fill 8 shards"),
    ],
    ids=["tuned-config type", "tuned-config folder", "out folder", "plot folder", "hours nan",
         "prior nan", "budget nan", "demo size", "demo shards"],
)  # fmt: skip
def test_bad_options_are_refused_before_any_work(tmp_path, args, says) -> None:
    data = tmp_path / "data"
    bench("gen", str(data), "--samples", "40", "--sample-size", "1KB", "--shards", "2")
    done = bench(*(arg.format(data=data, tmp=tmp_path) for arg in args), check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert says in done.stderr
    assert not [path for path in tmp_path.rglob("*") if path.suffix in (".json", ".png", ".cfg")]


def test_fairness_says_so_when_the_config_turns_the_monitor_off(tmp_path) -> None:
    bench("gen", str(tmp_path / "data"), "--samples", "40", "--sample-size", "1KB", "--shards", "2")
    config = tmp_path / "c.yaml"
    config.write_text(f"urls: {tmp_path / 'data'}\nfairness: {{enabled: false}}\n")
    for extra in ([], ["--json"], ["--plot", str(tmp_path / "f.png")]):
        done = bench("fairness", "--config", str(config), "--workers", "0", *extra, check=False)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert "fairness.enabled: false" in done.stderr


def test_gen_into_a_folder_of_an_earlier_gen_leaves_the_dataset_it_wrote(tmp_path) -> None:
    import fastio

    folder = tmp_path / "ds"
    bench("gen", str(folder), "--samples", "100", "--sample-size", "1KB", "--shards", "4")
    (folder / "notes-00003.tar").write_bytes(b"not gen's")  # another name: not gen's to remove
    bench("gen", str(folder), "--samples", "10", "--sample-size", "1KB", "--shards", "2")
    assert sorted(p.name for p in folder.glob("*.tar")) == [
        "notes-00003.tar", "webdataset-00000.tar", "webdataset-00001.tar",
    ]  # fmt: skip
    assert len(list(fastio.Dataset(str(folder / "webdataset-*.tar")))) == 10


def test_run_and_index_under_skip_count_or_name_the_shards_they_cannot_read(tmp_path) -> None:
    """A config that skips what it cannot read: run counts the shards it left
    out; where it read none, run is an error saying so, not a figure of
    nothing; index names a missing shard as missing, not as damaged."""
    json.loads(bench("gen", str(tmp_path / "data"), "--samples", "40", "--sample-size", "1KiB",
                     "--shards", "4", "--no-index", "--json").stdout)  # fmt: skip
    gone = sorted((tmp_path / "data").glob("*.tar"))[-1]
    gone.unlink()
    config = tmp_path / "c.yaml"
    config.write_text(f"urls: {tmp_path}/data/webdataset-{{00000..00003}}.tar\non_error: skip\n")
    report = json.loads(bench("run", "--config", str(config), "--json").stdout)
    assert report["shards_skipped"] == 1
    assert report["samples"] == report["expected_samples"] == 30
    table = bench("run", "--config", str(config)).stdout
    assert "shards skipped" in table
    indexed = bench("index", "--config", str(config), check=False)
    assert indexed.returncode == 1
    assert f"{gone} (it cannot be read: [Errno 2] No such file or directory" in indexed.stderr
    config.write_text(f"urls: {tmp_path}/none/webdataset-{{00000..00003}}.tar\n"
                      "on_error: skip\n")  # fmt: skip
    nothing = bench("run", "--config", str(config), "--json", check=False)
    assert nothing.returncode == 1
    assert "no shard could be read: all 4 were left out under on_error='skip'" in nothing.stderr
