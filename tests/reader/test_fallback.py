"""Engine choice where io_uring is refused, as seccomp sandboxes (Docker's default
profile, gVisor, some Kubernetes runtimes) refuse it: a real seccomp filter in a
child process makes io_uring_setup fail."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import errno, json, os, warnings
    import pyseccomp as seccomp

    refusal = getattr(errno, {errno_name!r})
    syscall_filter = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    syscall_filter.add_rule(seccomp.ERRNO(refusal), "io_uring_setup")
    syscall_filter.load()

    import fastio
    report = {{}}
    path = {path!r}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastio.Reader(engine="auto") as reader:
            data = b"".join(bytes(c.data) for c in reader.stream([path]))
            report["auto_engine"] = reader.engine_kind
    report["warnings"] = [(w.category.__name__, str(w.message)) for w in caught]
    report["data_ok"] = data == open(path, "rb").read()
    try:
        with fastio.Reader(engine="io_uring") as reader:
            reader.engine_kind
    except OSError as error:
        report["forced"] = [type(error).__name__, error.errno]
    print(json.dumps(report))
    """
)


@pytest.mark.parametrize(
    ("errno_name", "forced_error"), [("EPERM", "PermissionError"), ("ENOSYS", "OSError")]
)
def test_refused_io_uring_falls_back_to_threads_with_a_warning(
    tmp_path, errno_name: str, forced_error: str
) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 1000)
    code = PROBE.format(errno_name=errno_name, path=str(path))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["auto_engine"] == "threads"
    assert report["data_ok"]
    [(category, message)] = report["warnings"]
    assert category == "EngineFallbackWarning"
    assert errno_name in message
    assert report["forced"][0] == forced_error
