"""A fork while another thread holds CPython's thread-state lock: before 3.12
a child started then waited for that lock for ever (CPython gh-112275);
torch's gloo threads take it as collectives complete, so a distributed job's
DataLoader, forking its workers then, could start one that never ran. fastio
takes the lock around every fork of the process (Linux, CPython 3.8 to 3.11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fastio import _native

GUARDED_PYTHONS = sys.platform == "linux" and (3, 8) <= sys.version_info[:2] < (3, 12)
# How long a child may take to start and exit before it counts as hung: far
# longer than the lock is held (0.5 s) or a child takes on a loaded machine.
HUNG_AFTER = 60.0


@pytest.mark.skipif(not GUARDED_PYTHONS, reason="CPython 3.12 and later make the lock anew "
                    "in the child before taking it: nothing to guard")  # fmt: skip
def test_the_guard_is_in_place_where_cpython_needs_it() -> None:
    assert _native.fork_guarded()
    # The switch that turns it off, for a process that must not have it.
    off = subprocess.run(
        [sys.executable, "-c", "from fastio import _native; print(_native.fork_guarded())"],
        env={**os.environ, "FASTIO_FORK_GUARD": "0"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert off.stdout.strip() == "False"


@pytest.mark.skipif(not GUARDED_PYTHONS, reason="the lock is CPython 3.8 to 3.11's (see above)")
def test_a_fork_while_another_thread_holds_the_thread_state_lock_starts_its_child() -> None:
    _native._hold_thread_state_lock(0.5)  # returns once a native thread holds it
    pid = os.fork()
    if pid == 0:  # the child: it gets here only if it started
        os._exit(7)
    deadline = time.monotonic() + HUNG_AFTER
    status = 0
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the child never started: still waiting after {HUNG_AFTER:.0f} s")
    assert os.waitstatus_to_exitcode(status) == 7
