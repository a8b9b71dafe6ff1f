"""``python -m fastio``: the same commands as ``fastio-bench``."""

from fastio.cli import main

main(prog_name="fastio-bench")
