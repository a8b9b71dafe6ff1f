"""The tuner on a real reader over real files: knobs change while data flows,
every byte still arrives intact, and the end is a feasible configuration.

Correctness only: how fast each configuration is on this machine is for
benchmarks/bench_tune.py.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

import fastio
from fastio.reader._tuning import ReaderTuning, attach, reader_space, storage_fingerprint
from fastio.spec import ReaderSettings, TunerSettings

MiB = 1 << 20
FILES = 8
FILE_SIZE = 2 * MiB
# Short windows: a few tens of milliseconds of reading each.
OPTIONS = TunerSettings(window_seconds=0.02, warmup_seconds=0.005, tick_seconds=0.005,
                        memory_budget=8 * MiB, max_trials=12)  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("tuned")
    written = {}
    for index in range(FILES):
        data = random.Random(index).randbytes(FILE_SIZE)
        path = folder / f"part-{index:02d}.bin"
        path.write_bytes(data)
        written[str(path)] = hashlib.sha256(data).hexdigest()
    # Once per process, outside the tests' resource counts: the first stream
    # sets up event loop machinery (descriptors that stay), and importing
    # optuna imports numpy, whose BLAS starts its thread pool.
    import optuna  # noqa: F401

    with fastio.Reader() as reader:
        for _ in reader.stream([next(iter(written))]):
            pass
    return written


def read_all(reader: fastio.Reader, paths: list[str], tuning: ReaderTuning) -> dict[str, str]:
    """Every file through the reader once, ticking the tuner between chunks."""
    digests = {path: hashlib.sha256() for path in paths}
    for chunk in reader.stream(paths):
        digests[chunk.path].update(chunk.data)
        tuning.tick()
    return {path: digest.hexdigest() for path, digest in digests.items()}


def test_tuning_a_live_reader_keeps_data_intact(
    files: dict[str, str], resources: Any, caplog: pytest.LogCaptureFixture
) -> None:
    paths = sorted(files)
    caplog.set_level(logging.INFO, logger="fastio.tuners")
    with fastio.Reader() as reader:
        tuning = ReaderTuning(reader, OPTIONS, storage_fingerprint(paths))
        seen: list[tuple[int, int]] = []
        for _ in range(300):
            assert read_all(reader, paths, tuning) == files
            seen.append((reader.outstanding_requests, reader.read_size))
            if tuning.tuner.converged and len(tuning.decisions) > 12:
                break
        tuning.close()
        # It settled. It may be exploring again at the end: windows of 20 ms
        # on a loaded machine can set off its drift detection, and a new
        # round of trials is then what it should do.
        assert tuning.settled_after is not None
        # The knobs really moved, on the reader itself.
        assert len(set(seen)) > 1 or len({(d["config"]["outstanding_requests"],
                                           d["config"]["read_size"])
                                          for d in tuning.decisions}) > 1  # fmt: skip
        final = (reader.outstanding_requests, reader.read_size)
        assert final == (tuning.tuner.config["outstanding_requests"],
                         tuning.tuner.config["read_size"])  # fmt: skip
        assert final[0] * final[1] <= 8 * MiB
        assert reader_space(8 * MiB).feasible(tuning.tuner.config)
        for decision in tuning.decisions:  # every measured configuration was feasible
            assert decision["config"]["outstanding_requests"] * decision["config"]["read_size"] <= (
                8 * MiB
            )
        summary = tuning.summary()
        assert summary["converged"] is True
        assert summary["windows"] == len(tuning.decisions)
        assert summary["best_bytes_per_second"] > 0
        # When it settled, in the traffic of the decision that settled it.
        settling = next(d for d in tuning.decisions if d["next_phase"] == "settled")
        assert summary["settled_after"] == {
            "seconds": settling["seconds"],
            "bytes_delivered": settling["bytes_delivered"],
        }
        assert 0 < settling["bytes_delivered"] <= tuning.decisions[-1]["bytes_delivered"]
        # Decisions are in the log.
        assert any("tuner window" in record.getMessage() for record in caplog.records)
    resources.assert_released()


def test_dataset_tune_runs_a_thread_and_reports(files: dict[str, str], resources: Any) -> None:
    paths = sorted(files)
    record = 64 << 10
    expected = {}
    for path in paths:
        data = Path(path).read_bytes()
        for offset in range(0, len(data), record):
            expected[hashlib.sha256(data[offset : offset + record]).digest()] = True
    tune = {"window_seconds": 0.02, "warmup_seconds": 0.005, "tick_seconds": 0.002,
            "memory_budget": 8 * MiB}  # fmt: skip
    with fastio.Dataset(paths, format="fixed", record_size=record, shuffle=True,
                        tune=tune) as dataset:  # fmt: skip
        assert dataset.spec.tuner == TunerSettings(enabled=True, **tune)
        for epoch in range(10):
            dataset.set_epoch(epoch)
            got = [hashlib.sha256(sample).digest() for sample in dataset]
            assert len(got) == len(expected)
            assert set(got) == set(expected)  # every record, exactly once, intact
        reader = dataset.reader
        dataset.close()  # stops the tuner's thread first: the knobs hold still now
        report = dataset.stats()["tuner"]
        assert report is not None
        assert report["windows"] > 0
        assert report["memory_budget"] == 8 * MiB
        knobs = report["config"]
        assert knobs["outstanding_requests"] * knobs["read_size"] <= 8 * MiB
        assert (reader.outstanding_requests, reader.read_size) == (
            knobs["outstanding_requests"], knobs["read_size"],
        )  # fmt: skip
    resources.assert_released()


def test_a_pass_too_short_for_the_trials_keeps_the_defaults(files: dict[str, str]) -> None:
    # Windows of seconds: the trials need far more than a tenth of a 64 MiB
    # pass at any rate a reader reaches, so the tuner settles at the first
    # measurement, at the defaults, within that tenth.
    paths = sorted(files)
    total = 4 * FILES * FILE_SIZE  # the files, read four times
    options = TunerSettings(window_seconds=5.0, warmup_seconds=1.0, tick_seconds=3600)
    with fastio.Reader() as reader:
        defaults = {"outstanding_requests": reader.outstanding_requests,
                    "read_size": reader.read_size}  # fmt: skip
        tuning = ReaderTuning(reader, options, "fastio-test-short-pass")
        tuning.expect(total)
        tuning.expect(100 * total)  # a later pass: the first one bounds the trials
        tuning.tick()  # the first snapshot, before any byte
        for _ in range(4):
            assert read_all(reader, paths, tuning) == {p: files[p] for p in paths}
        tuning.close()
        assert (reader.outstanding_requests, reader.read_size) == tuple(defaults.values())
    summary = tuning.summary()
    assert summary["first_pass_bytes"] == total
    assert summary["phase"] == "settled"
    assert tuning.settled_after is not None
    assert 0 < tuning.settled_after["bytes_delivered"] <= total * options.explore_share
    cut = next(d for d in tuning.decisions if d["next_phase"] == "settled")
    assert "10% of the first pass" in cut["reason"]
    assert cut["next_config"] == defaults
    assert cut["trial"] is None  # nothing was tried


def test_a_pass_long_enough_for_the_trials_runs_them(files: dict[str, str]) -> None:
    paths = sorted(files)
    with fastio.Reader() as reader:
        tuning = ReaderTuning(reader, OPTIONS, "fastio-test-long-pass")
        tuning.expect(1 << 50)  # a pass of a petabyte: a tenth of it holds every trial
        tuning.tick()
        for _ in range(500):
            assert read_all(reader, paths, tuning) == {p: files[p] for p in paths}
            if len(tuning.decisions) >= 3:
                break
        tuning.close()
    assert len(tuning.decisions) >= 3
    assert [d["trial"] for d in tuning.decisions[:3]] == [0, 1, 2]  # measured trials, none cut
    assert not any("first pass" in d["reason"] for d in tuning.decisions)


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent workers", "workers"])
def test_dataloader_workers_tune_and_the_main_process_sees_them(
    files: dict[str, str], persistent: bool
) -> None:
    from torch.utils.data import DataLoader

    # Forked workers (Linux's default): each must tune its own reader (the
    # parent's tuner thread is not in it), and the process that made the
    # dataset, which reads nothing itself, reports theirs.
    paths = sorted(files)
    tune = {"window_seconds": 0.005, "warmup_seconds": 0.0, "tick_seconds": 0.002}
    with fastio.Dataset(paths, format="fixed", record_size=4096, shuffle=False,
                        tune=tune) as dataset:  # fmt: skip
        loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=persistent,
                            multiprocessing_context="fork")  # fmt: skip
        for epoch in range(300):  # noqa: B007 (how many it took, below)
            assert sum(1 for _ in loader) == FILES * FILE_SIZE // 4096
            report = dataset.stats()["tuner"]
            assert report is not None
            workers = report.get("workers", {})
            assert sorted(workers) == ["0", "1"], report
            if not persistent or all(worker["windows"] for worker in workers.values()):
                break
        assert epoch < 299, "a worker's tuner measured no window in 300 epochs"
    # Each worker's first pass is its half of the dataset; together, the whole.
    assert [w["first_pass_bytes"] for w in workers.values()] == [FILES * FILE_SIZE // 2] * 2
    assert report["first_pass_bytes"] == FILES * FILE_SIZE
    assert report["windows"] == sum(worker["windows"] for worker in workers.values())
    assert report["converged"] == all(worker["converged"] for worker in workers.values())
    if persistent:  # the same workers all along: their tuners measured windows
        assert all(worker["windows"] > 0 for worker in workers.values())


def test_a_tuning_dataset_dropped_unclosed_leaves_nothing_running(
    files: dict[str, str], resources
) -> None:
    """Dropped without close(), as a notebook or a loop over configurations
    does: the tuner's thread held the dataset's reader, so neither went (two
    threads and 15 descriptors kept per dataset)."""
    import gc

    paths = sorted(files)
    for _ in range(3):
        dataset = fastio.Dataset(paths, format="fixed", record_size=4096, shuffle=False,
                                 tune=True)  # fmt: skip
        assert sum(1 for _ in dataset) == FILES * FILE_SIZE // 4096
        del dataset
        gc.collect()
    resources.assert_released()


def test_closing_keeps_the_workers_tuner_reports_and_removes_their_file(
    files: dict[str, str],
) -> None:
    from torch.utils.data import DataLoader

    from fastio.shared._mapped import shared_folder

    def files_of_this_process() -> list[str]:
        return [name for name in os.listdir(shared_folder())
                if name.startswith(f"fastio-tuners-{os.getpid()}-")]  # fmt: skip

    before = files_of_this_process()
    dataset = fastio.Dataset(sorted(files), format="fixed", record_size=4096, shuffle=False,
                             tune=True)  # fmt: skip
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert sum(1 for _ in loader) == FILES * FILE_SIZE // 4096
    reported = dataset.stats()["tuner"]["workers"]
    assert sorted(reported) == ["0", "1"]
    dataset.close()
    assert files_of_this_process() == before
    assert dataset.stats()["tuner"]["workers"] == reported


def test_bad_tune_options_are_refused(files: dict[str, str]) -> None:
    with pytest.raises(TypeError, match=r"tune: .*speed"):
        TunerSettings.coerce({"speed": 3})
    with pytest.raises(ValueError, match="memory_budget"):
        TunerSettings(memory_budget=100)
    assert not TunerSettings.coerce(False).enabled
    assert TunerSettings.coerce(True) == TunerSettings(enabled=True)


def test_config_tuner_section_turns_tuning_on(files: dict[str, str], tmp_path: Path) -> None:
    from fastio import load_config

    config_path = tmp_path / "tuned.yaml"
    config_path.write_text(
        f"urls: {sorted(files)!r}\nformat: fixed\nformat_options: {{record_size: 65536}}\n"
        f"tuner: {{enabled: true, storage: {tmp_path / 'trials.log'}, memory_budget: 8MiB, "
        "window_seconds: 0.5}\n"
    )
    config = load_config(config_path)
    assert config.tuner.memory_budget == 8 * MiB
    options = config.tuner.to_settings()
    assert options == TunerSettings(enabled=True, storage=str(tmp_path / "trials.log"),
                                    memory_budget=8 * MiB, window_seconds=0.5)  # fmt: skip
    with config.to_dataset() as dataset:
        assert dataset.spec.tuner == options
        assert dataset.stats()["tuner"]["phase"] == "explore"
    with pytest.raises(fastio.ConfigError, match=r"tuner\.max_trials"):
        load_config(config_path, tuner__max_trials=0)


def settle(tuning: ReaderTuning, rate_of: Any, windows: int = 40) -> list[Any]:
    """Windows of the given measured rates (bytes/s per configuration) told
    to the reader's tuner until it settles; returns its decisions."""
    tuner = tuning.tuner
    tuner.start()
    for _ in range(windows):
        tuner.tell_window(rate_of(tuner.config))
        if tuner.converged:
            break
    return tuner.decisions


_DEFAULTS = ReaderSettings()
DEFAULT_KNOBS = {"outstanding_requests": _DEFAULTS.outstanding_requests,
                 "read_size": _DEFAULTS.read_size}  # fmt: skip
_Q, _R = _DEFAULTS.outstanding_requests, _DEFAULTS.read_size


@pytest.mark.parametrize(
    ("name", "gain"),
    [
        ("every other setting measures worse", lambda c: 0.6 if c != DEFAULT_KNOBS else 1.0),
        ("others gain only within the noise", lambda c: 1.02 if c != DEFAULT_KNOBS else 1.0),
        ("fewer, larger requests are better", lambda c: 1.3 if c["read_size"] > _R else 1.0),
        ("more, smaller requests are better",
         lambda c: 1.0 + 0.3 * (c["read_size"] < _R and c["outstanding_requests"] > _Q)),
    ],
)  # fmt: skip
def test_epoch_one_tuning_settles_early_and_never_below_the_defaults(name: str, gain: Any) -> None:
    # The decision procedure alone, fed measured rates (no clock): it must
    # decide within a few windows, the first tenth of an epoch, and never
    # keep a setting that measured worse than the reader's defaults.
    with fastio.Reader() as reader:
        tuning = ReaderTuning(reader, TunerSettings(), "fastio-test-epoch-one")
        decisions = settle(tuning, lambda c: 100e6 * gain(c))
        tuning.close()
    settled = next(d for d in decisions if d.next_phase == "settled")
    assert settled.window <= TunerSettings().max_trials
    chosen = settled.next_config
    assert gain(chosen) >= 1.0, name
    if (
        gain({"outstanding_requests": _Q // 2, "read_size": 2 * _R}) > 1.1
        or gain({"outstanding_requests": 2 * _Q, "read_size": _R // 2}) > 1.1
    ):
        assert gain(chosen) > 1.1, name  # a real gain along the budget is taken
    else:
        assert chosen == DEFAULT_KNOBS, name
        assert settled.window <= 4  # nothing better nearby: decided after a few windows
    assert (reader.outstanding_requests, reader.read_size) == (
        chosen["outstanding_requests"], chosen["read_size"],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "gain"),
    [
        ("more requests measure worse", lambda c: 0.85 if c["outstanding_requests"] > 16 else 1.0),
        ("more requests are better", lambda c: 1.3 if c["outstanding_requests"] > 16 else 1.0),
    ],
)
def test_a_remote_readers_tuning_never_goes_below_the_defaults_requests(name: str, gain: Any
                                                                        ) -> None:  # fmt: skip
    """Over a link, every request waits a round trip before its first byte and
    remote pieces grow whatever read_size is: a remote dataset's tuner moves
    outstanding_requests alone, from the defaults up, and with nothing to
    gain it settles after the defaults twice and one step."""
    urls = ["http://storage.invalid/a.tar", "http://storage.invalid/b.tar"]
    with fastio.Reader() as reader:
        tuning = attach(reader, TunerSettings(enabled=True, tick_seconds=3600), urls)
        assert tuning is not None
        assert tuning.remote
        decisions = settle(tuning, lambda c: 100e6 * gain(c))
        tuning.close()
    tried = [d.config for d in decisions]
    assert all(set(c) == {"outstanding_requests"} for c in tried), name
    assert min(c["outstanding_requests"] for c in tried) == 16  # never fewer than the defaults
    settled = next(d for d in decisions if d.next_phase == "settled")
    if gain({"outstanding_requests": 32}) > 1.0:
        assert settled.next_config["outstanding_requests"] > 16, name
    else:
        assert settled.next_config == {"outstanding_requests": 16}, name
        assert settled.window <= 3
    assert reader.outstanding_requests == settled.next_config["outstanding_requests"]
    assert reader.read_size == fastio.ReaderSettings().read_size  # not a remote knob


def test_a_remote_tuners_budget_bounds_its_requests() -> None:
    """``tune={'memory_budget': ...}`` bounds a remote tuner's requests of 4
    MiB; with no room above the defaults, it tunes both knobs as a local one."""
    urls = ["http://storage.invalid/a.tar"]
    with fastio.Reader() as reader:
        roomy = ReaderTuning(reader, TunerSettings(memory_budget=96 << 20), "fastio-test-roomy",
                             remote=True)  # fmt: skip
        assert roomy.remote
        assert roomy.space.names == ["outstanding_requests"]
        [knob] = roomy.space.knobs
        assert (knob.low, knob.high) == (16, 24)
        roomy.close()
        tight = attach(reader, TunerSettings(enabled=True, tick_seconds=3600,
                                             memory_budget=64 << 20), urls)  # fmt: skip
        assert tight is not None
        assert not tight.remote
        assert tight.space.names == ["outstanding_requests", "read_size"]
        tight.close()


@pytest.fixture(scope="module")
def link_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """4 WebDataset shards of 16 x 1 MiB samples, written by webdataset's own
    writer; returns their folder and each sample's digest by key."""
    import webdataset

    folder = tmp_path_factory.mktemp("link")
    digests = {}
    for shard in range(4):
        with webdataset.TarWriter(str(folder / f"part-{shard}.tar")) as sink:
            for number in range(16):
                key = f"{shard:02d}{number:04d}"
                payload = random.Random(key).randbytes(MiB)
                sink.write({"__key__": key, "bin": payload})
                digests[key] = hashlib.sha256(payload).hexdigest()
    return folder, digests


# Short windows, and trials allowed all through the pass: what settles the
# tuner here is the link, not the share of the pass its trials may take.
LINK_TUNING = {"window_seconds": 0.15, "warmup_seconds": 0.05, "tick_seconds": 0.05,
               "explore_share": 1.0}  # fmt: skip
# Long enough that a busy machine's scheduling adds little to it; where each
# connection has a limit of its own, longer: there any growth of the round
# trip is the machine's (a collection of the test process's heap, a thread
# scheduled late), and 0.2 s had once grown past the tuner's threshold.
ROUND_TRIP = 0.2


@pytest.mark.parametrize(
    ("shared", "rate", "round_trip"),
    [(True, 20e6, ROUND_TRIP), (False, 1.5e6, 2 * ROUND_TRIP)],
    ids=["one bottleneck for all connections", "a limit per connection"],
)
def test_a_remote_tuner_tries_more_requests_only_where_the_link_is_not_full(
    link_shards: tuple[Path, dict[str, str]],
    tmp_path: Path,
    shared: bool,
    rate: float,
    round_trip: float,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over a link that the defaults fill (a request takes tens of round trips,
    and its answer's head waits behind the bodies queued at the bottleneck), a
    trial at more requests only splits the link: the tuner settles at the
    defaults without one. Where each connection is limited instead, the round
    trip stays as it was and more requests are tried. Every sample arrives
    intact either way."""
    from tests.servers import BottleneckServer

    folder, digests = link_shards
    # Pieces of 256 KiB at the shared bottleneck: a queue of up to 16 of them
    # (one a connection) holds a new answer's head back up to 0.2 s, as a
    # router's buffer would. With 128 KiB the round trip under load grew by
    # 1.19-1.35x from run to run, across the tuner's threshold of 1.2.
    server = BottleneckServer(folder, rate=rate, delay=round_trip, shared=shared,
                              piece=256 << 10).start()  # fmt: skip
    try:
        urls = [server.url(f"part-{shard}.tar") for shard in range(4)]
        got = {}
        caplog.set_level(logging.INFO, logger="fastio.tuners")
        with fastio.Dataset(urls, format="webdataset", shuffle=False, tune=LINK_TUNING,
                            index_dir=str(tmp_path / "indexes")) as dataset:  # fmt: skip
            for sample in dataset:
                got[sample["__key__"]] = hashlib.sha256(sample["bin"]).hexdigest()
            stats = dataset.stats()
    finally:
        server.stop()
    assert got == digests
    reader = stats["reader"]
    assert reader["answer_seconds_fastest"] >= round_trip  # the round trip, measured
    # Every window's decision, as the job's log shows it.
    windows = [r.getMessage() for r in caplog.records if r.name == "fastio.tuners"]
    tried = {int(n) for line in windows for n in re.findall(r"'outstanding_requests': (\d+)", line)}
    full = [line for line in windows if "the link is full" in line]
    assert windows
    assert tried
    if shared:
        assert reader["answer_seconds_recent"] > 1.2 * reader["answer_seconds_fastest"]
        assert len(full) == 1
        assert "settled at {'outstanding_requests': 16}" in full[0]
        assert tried == {16}  # never a trial above the defaults
        assert stats["tuner"]["config"] == {"outstanding_requests": 16}
    else:
        assert not full
        assert max(tried) > 16
