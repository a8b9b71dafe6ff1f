"""Package hygiene: import cost, heavy modules kept out, public names exported once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import fastio

HEAVY = (
    "optuna",
    "pyarrow",
    "torch",
    "numpy",
    "tensorflow",
    "jax",
    "pandas",
    "fsspec",
    "uvloop",
    "prometheus_client",
    "matplotlib",
    "pydantic",
    "click",
    "rich",
)

LOADED = """
import json, sys
import pytest

import fastio
print(json.dumps(sorted(sys.modules)))
"""


def test_import_is_light() -> None:
    # What keeps `import fastio` fast is what it does not load; how long it
    # takes is a measurement (benchmarks/bench_import.py), not a test.
    output = subprocess.run(
        [sys.executable, "-c", LOADED], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(output))
    assert not [name for name in HEAVY if name in loaded]


FIRST_SAMPLE = """
import json, sys
import pytest

import fastio
dataset = fastio.Dataset(sys.argv[1], shuffle=False, index_dir=sys.argv[2])
iterator = iter(dataset)
next(iterator)
loaded = sorted(sys.modules)
compiled = [f"{module.__name__}.{value.__name__}" for module in list(sys.modules.values())
            if module.__name__.startswith("fastio") for value in vars(module).values()
            if isinstance(value, type) and value.__module__ == module.__name__
            and "__dataclass_fields__" in value.__dict__ and "__record__" not in value.__dict__]
list(iterator)  # to the epoch's end, where a streamed shard's index is kept
print(json.dumps({"loaded": loaded, "compiled": compiled}))
"""


def test_a_first_sample_loads_only_what_it_reads(tmp_path) -> None:
    """A first sample waits for no module it does not use: not the tuners
    (tuning is off unless asked for) nor optuna, not the other formats, not
    numpy.random (orders are drawn in native code), not work stealing, not
    the fairness verdict (first needed when a window ends), not the remote
    clients (a local dataset), not the DataLoader workers' hand-off, not
    batching (samples are asked for). Nor, once the shard is indexed, the
    streamed first epoch's. And no class on the way is a plain dataclass,
    whose methods compile as it is made: each is a record."""
    from webdataset import TarWriter

    shard = tmp_path / "shard-0.tar"
    with TarWriter(str(shard)) as writer:
        writer.write({"__key__": "a", "bin": b"x"})
    unused = ("fastio.tuners", "optuna", "numpy.random", "fastio.fairness._steal",
              "fastio.fairness._gather", "fastio.fairness._verdict", "fastio.sources._remote",
              "fastio.sources._http", "fastio.shared._handoff", "secrets",
              "fastio.dataset._batching", "fastio.formats._parts")  # fmt: skip
    streamed = ("fastio.dataset._stream", "fastio.plan._stream")
    for indexed in (False, True):  # never seen (the first epoch streams), then indexed
        output = subprocess.run(
            [sys.executable, "-c", FIRST_SAMPLE, str(shard), str(tmp_path / "index")],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        report = json.loads(output)
        loaded = set(report["loaded"])
        assert report["compiled"] == []
        assert {"fastio.dataset._dataset", "fastio.formats._webdataset"} <= loaded  # it ran
        assert not [name for name in loaded if name.startswith(unused)]
        formats = ("_tfrecord", "_tables", "_lines", "_arrays")
        assert not [name for name in loaded if name.removeprefix("fastio.formats.") in formats]
        assert any(name in loaded for name in streamed) != indexed


@pytest.mark.parametrize("package", ["fastio.formats", "fastio.fairness"])
def test_lazy_packages_export_every_name(package) -> None:
    """Packages whose exports load at first use give each name in their
    ``__all__``, and raise AttributeError for others, in a fresh process."""
    program = (
        "import importlib, sys\n"
        f"package = importlib.import_module({package!r})\n"
        "for name in package.__all__:\n"
        "    value = getattr(package, name)\n"
        "    assert value is getattr(package, name), name\n"
        "listed = set(dir(package))\n"
        "assert listed and listed <= set(package.__all__), listed\n"
        "try:\n"
        "    package.no_such_name\n"
        "except AttributeError:\n"
        "    print('no such name')\n"
    )
    output = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    assert output == "no such name\n"


def test_every_public_name_is_exported_once() -> None:
    assert len(fastio.__all__) == len(set(fastio.__all__))
    for name in fastio.__all__:
        assert hasattr(fastio, name), name
    # Each name in a private module's __all__ that fastio re-exports is the same object.
    from fastio import _errors
    from fastio.reader import _ranges, _reader, _stats
    from fastio.spec import _reader as _settings

    exported = {}
    for module in (_errors, _ranges, _reader, _settings, _stats):
        for name in module.__all__:
            assert name not in exported, f"{name} defined in two modules"
            exported[name] = getattr(module, name)
    for name in fastio.__all__:
        if name in exported:
            assert getattr(fastio, name) is exported[name]


def test_version_matches_the_distribution() -> None:
    from importlib.metadata import version

    assert fastio.__version__ == version("fastio")


def test_typing_stub_and_marker_ship_with_the_package() -> None:
    from importlib.resources import files

    package = files("fastio")
    assert package.joinpath("py.typed").is_file()
    assert "class Engine" in package.joinpath("_native.pyi").read_text()


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    # The editable install finds any folder, a wheel only the listed packages:
    # a subpackage missing from pyproject.toml would vanish from real installs.
    from pathlib import Path

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the backport fastio depends on there
        import tomli as tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("fastio", *init.parent.relative_to(root / "fastio").parts))
        for init in (root / "fastio").rglob("__init__.py")
    } | {"fastio.tuners"}
    assert found <= listed, f"not in pyproject.toml's packages: {sorted(found - listed)}"


def _classes_defined_in_fastio() -> dict[str, type]:
    """Every class defined at the top of a module of fastio (and fastio.tuners)."""
    import importlib
    import pkgutil

    import fastio.tuners

    found: dict[str, type] = {}
    names = [info.name for info in pkgutil.walk_packages(fastio.__path__, "fastio.")]
    names += [info.name for info in pkgutil.walk_packages(fastio.tuners.__path__, "fastio.tuners.")]
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_every_error_and_warning_lives_in_one_module_under_one_root() -> None:
    classes = _classes_defined_in_fastio()
    problems = [name for name, cls in classes.items()
                if issubclass(cls, (BaseException, Warning))
                and not name.startswith("fastio._errors.")]  # fmt: skip
    assert not problems, f"defined outside fastio._errors: {problems}"
    from fastio import _errors

    for name in _errors.__all__:
        cls = getattr(_errors, name)
        assert getattr(fastio, name) is cls, f"fastio.{name} is not exported"
        if issubclass(cls, Warning):
            assert issubclass(cls, fastio.FastIOWarning), name
        else:
            assert issubclass(cls, fastio.FastIOError), name
