"""The core install without its extras: what works without pyarrow, optuna and
uvloop, and the message that names the extra where a feature needs one.

Each check runs in a fresh interpreter where the extras cannot be imported (a
None in ``sys.modules`` makes ``import pyarrow`` fail as a missing package does),
on real shards written here beforehand."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fastio
from fastio._errors import EXTRAS
from tests.cli.test_commands import PLOTTING, RUNS
from tests.shards import write

BLOCKED = ("pyarrow", "optuna", "uvloop", "prometheus_client", "matplotlib", "ray")

PRELUDE = f"""
import json, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None
import fastio
"""


def without_extras(code: str) -> dict[str, object]:
    """Run ``code`` without the extras; it leaves its answers in ``result``."""
    script = PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_raw_reads_and_record_formats_need_no_extra(tmp_path: Path) -> None:
    tar = write("webdataset", tmp_path / "tar", shards=2, per_shard=10)
    npy = write("npy", tmp_path / "npy", shards=2, per_shard=10)
    result = without_extras(f"""
        with fastio.Reader() as reader:
            read = sum(c.data.nbytes for c in reader.stream({tar.urls!r}))
        with fastio.Dataset({tar.pattern!r}, shuffle=False) as ds:
            samples = sum(1 for _ in ds)
        with fastio.Dataset({npy.pattern!r}, shuffle=False) as ds:
            rows = sum(len(batch) for batch in ds.batches(4))
        loop = type(fastio.new_event_loop()).__module__
        result = {{"read": read, "samples": samples, "rows": rows, "loop": loop}}
    """)
    assert result["read"] == sum(Path(url).stat().st_size for url in tar.urls)
    assert result["samples"] == len(tar.samples)
    assert result["rows"] == len(npy.samples)  # numpy batches need no pyarrow
    assert result["loop"].startswith("asyncio")  # no uvloop: asyncio's own loop


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("fastio.Dataset(PARQUET)", "Parquet shards needs pyarrow: pip install 'fastio[arrow]'"),
        ("fastio.Dataset(TAR).batches(4)",
         "batches of webdataset shards (Arrow record batches) needs pyarrow: "
         "pip install 'fastio[arrow]'"),
        ("fastio.Dataset(TAR, tune=True)", "tuning needs optuna: pip install 'fastio[tune]'"),
        ("import fastio.metrics; fastio.metrics.prometheus_text(fastio.Dataset(TAR))",
         "Prometheus metrics needs prometheus_client: pip install 'fastio[metrics]'"),
        ("import fastio.ray", "Ray datasets needs ray: pip install 'fastio[ray]'"),
    ],
    ids=["parquet", "arrow-batches", "tune", "metrics", "ray"],
)  # fmt: skip
def test_a_feature_that_needs_an_extra_names_it(tmp_path: Path, code: str, message: str) -> None:
    tar = write("webdataset", tmp_path / "tar", shards=1, per_shard=4)
    parquet = write("parquet", tmp_path / "parquet", shards=1, per_shard=4)
    result = without_extras(f"""
        TAR, PARQUET = {tar.pattern!r}, {parquet.pattern!r}
        try:
            {code}
        except fastio.MissingExtraError as error:
            result = {{"message": str(error), "import_error": isinstance(error, ImportError)}}
        else:
            result = {{"message": None}}
    """)
    assert result == {"message": message, "import_error": True}


@pytest.mark.parametrize("command", PLOTTING, ids=" ".join)
def test_every_plot_names_the_extra_before_any_work(tmp_path: Path, command: tuple[str, ...]
                                                    ) -> None:  # fmt: skip
    written = write("webdataset", tmp_path / "data", shards=1, per_shard=4)
    config = tmp_path / "tiny.yaml"
    config.write_text(f"urls: {written.pattern}\n")
    tiny = {"pattern": written.pattern, "data": str(tmp_path / "data"), "config": str(config),
            "folder": str(tmp_path)}  # fmt: skip
    template, _ = RUNS[command]
    before = sorted(tmp_path.rglob("*"))
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + "from fastio.cli import main; main()", *command,
         *(arg.format(**tiny) for arg in template), "--plot", str(tmp_path / "plot.png"),
         "--out", str(tmp_path / "result.json")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--plot needs matplotlib: pip install 'fastio[plot]'" in done.stderr
    assert sorted(tmp_path.rglob("*")) == before  # no result, plot, tuned config or index


def test_the_error_pickles_and_every_extra_is_declared() -> None:
    error = fastio.MissingExtraError("Parquet shards", "pyarrow", "arrow")
    copy = pickle.loads(pickle.dumps(error))  # DataLoader workers send errors by pickle
    assert (str(copy), copy.name, copy.extra) == (str(error), "pyarrow", "arrow")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    core = " ".join(project["project"]["dependencies"])
    for module, extra in EXTRAS.items():
        package = module.replace("_", "-")
        assert any(req.startswith(package) for req in extras[extra]), (module, extra)
        assert package not in core, f"{package} is in the core install"
    assert {"arrow", "tune", "fast", "all"} <= set(extras)
