"""``python -m fastio``: the same commands as ``fastio-bench``."""

from fastio.cli import main

if __name__ == "__main__":  # importing it (pkgutil walks, docs) runs nothing
    main(prog_name="fastio-bench")
