"""The project's own checks, run by the same command as the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
        ["cython-lint", "native"],  # every .pyx, .pxi and .pxd below it
    ],
    ids=["ruff", "ruff-format", "mypy", "cython-lint"],
)
# The suite's per-test timeout catches hangs; mypy without its cache takes minutes
# on a loaded 2-core machine, which is slow, not hung.
@pytest.mark.timeout(1200)
def test_tool_is_clean(command: list[str]) -> None:
    # The tools installed beside this interpreter (the test extra), not whatever is on PATH.
    executable = Path(sys.executable).parent / command[0]
    result = subprocess.run(
        [str(executable), *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
