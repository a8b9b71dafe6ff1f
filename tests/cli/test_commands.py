"""Every fastio-bench command, as users meet it: ``--help``, then a run on tiny
data; where a command has ``--json``, stdout is one JSON object and nothing
else, and ``--out`` writes the same object to a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from fastio.cli import main
from tests.cli.test_cli import bench
from tests.shards import write


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


COMMANDS = _commands(main)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help(command: tuple[str, ...]) -> None:
    shown = bench(*command, "--help").stdout
    assert shown.startswith(f"Usage: fastio-bench {' '.join(command)} ")
    assert "-h, --help" in shown


def test_python_dash_m_fastio_is_fastio_bench() -> None:
    done = subprocess.run([sys.executable, "-m", "fastio", "--help"], capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    assert done.stdout.startswith("Usage: fastio-bench [OPTIONS] COMMAND")
    for command in ("compare", "run", "sweep", "tune", "fairness", "tiering"):
        assert command in done.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("tiny")
    written = write("webdataset", folder / "data", shards=2, per_shard=12)
    config = folder / "tiny.yaml"
    config.write_text(f"urls: {written.pattern}\nreader: {{outstanding_requests: 4}}\n")
    return {"pattern": written.pattern, "data": str(folder / "data"), "config": str(config),
            "folder": str(folder)}  # fmt: skip


FAST_TUNER = ("--tuner-window-seconds", "0.05", "--tuner-warmup-seconds", "0.01")

# Each command on tiny data: its arguments ({name} from the fixture), and
# whether it takes --json/--out.
RUNS: dict[tuple[str, ...], tuple[tuple[str, ...], bool]] = {
    ("compare",): (("{pattern}", "--tune-seconds", "2", *FAST_TUNER, "--repeat", "1",
                    "--workers", "0", "--tuned-config", "{folder}/compare.yaml"), True),
    ("config",): (("show",), False),
    ("config", "check"): (("{config}",), False),
    ("config", "show"): ((), False),
    ("demo",): (("--samples", "24", "--sample-size", "20KB", "--shards", "2", "--workers", "0",
                "--repeat", "1"), True),
    ("fairness",): (("{pattern}", "--workers", "0", "--step-ms", "0"), True),
    ("gen",): (("{folder}/gen", "--samples", "20", "--sample-size", "1KiB", "--shards", "2"),
               True),
    ("index",): (("{pattern}", "--index", "{folder}/data.fastio-index.npz"), True),
    ("run",): (("{data}",), True),
    ("sweep",): (("{data}", "-q", "1,4", "-b", "64KiB"), True),
    ("tiering",): (("--files", "40", "--budget-fraction", "0.2"), True),
    ("tiering", "probe"): (("--tier", "fast={folder}:1GiB:ssd"), True),
    ("tune",): (("{data}", "--tuner-max-trials", "2", *FAST_TUNER, "--max-seconds", "20",
                 "--tuned-config", "{folder}/tuned.yaml"), True),
}  # fmt: skip


def test_every_command_has_a_tiny_run() -> None:
    assert sorted(RUNS) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(RUNS), ids=" ".join)
def test_tiny_run(command: tuple[str, ...], tiny: dict[str, str], tmp_path: Path) -> None:
    template, has_json = RUNS[command]
    args = [*command, *(arg.format(**tiny) for arg in template)]
    if not has_json:
        assert bench(*args).stdout.strip()
        return
    out = tmp_path / "result.json"
    printed = bench(*args, "--json", "--out", str(out)).stdout
    result = json.loads(printed)  # one object, nothing else on stdout
    assert isinstance(result, dict)
    assert json.loads(out.read_text()) == result
    table = bench(*args).stdout  # and without --json, a table that is no JSON
    assert table.strip()
    with pytest.raises(json.JSONDecodeError):
        json.loads(table)


PNG = b"\x89PNG\r\n\x1a\n"


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


PLOTTING = [c for c in COMMANDS if any(p.name == "plot_path" for p in _command(c).params)]


def test_the_commands_that_measure_over_time_or_compare_draw_plots() -> None:
    assert sorted(PLOTTING) == [("compare",), ("fairness",), ("run",), ("sweep",), ("tiering",),
                                ("tune",)]  # fmt: skip


# compare and tune draw theirs in test_compare.py and test_tune.py, with their own checks.
@pytest.mark.parametrize("command", [c for c in PLOTTING if c not in (("compare",), ("tune",))],
                         ids=" ".join)  # fmt: skip
def test_plot_writes_a_png_beside_the_json(
    command: tuple[str, ...], tiny: dict[str, str], tmp_path: Path
) -> None:
    template, _ = RUNS[command]
    image = tmp_path / "plot.png"
    args = [*command, *(arg.format(**tiny) for arg in template), "--plot", str(image)]
    assert isinstance(json.loads(bench(*args, "--json").stdout), dict)
    assert image.read_bytes().startswith(PNG)
