"""Real torch.distributed ranks for tests: one Python process per rank, joined
by gloo over loopback, each printing one JSON object."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any


def run_ranks(script: str, *args: str, world_size: int = 2) -> list[Any]:
    """Runs ``script`` with ``python -c`` once per rank, with the arguments
    ``rank port *args`` (a free loopback port for the gloo rendezvous), from the
    repository's top folder; returns each rank's printed JSON, in rank order."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    root = os.path.dirname(os.path.dirname(__file__))
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(rank), port, *args], cwd=root,
                         stdout=subprocess.PIPE, text=True)
        for rank in range(world_size)
    ]  # fmt: skip
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        results.append(json.loads(out))
    return results
