"""Where a tuner remembers: Optuna storage, one study per fingerprint.

``storage`` is a path or a URL: ``*.db``/``*.sqlite``/``*.sqlite3`` open as
SQLite, any other path as an Optuna journal file (appends under a file lock,
so several processes on one machine share it), and a URL with ``://``
(``postgresql://...``, ``mysql://...``) goes to Optuna's RDB storage untouched,
for many nodes.

The study's name comes from a :func:`fingerprint` of what the best
configuration depends on (storage, dataset, machine); a re-tune after drift
starts a new *round*, a study named ``<name>.r<k>``, so the old storage's
trials do not mislead the sampler. The latest round is the one resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

__all__ = ["fingerprint", "machine_identity", "open_storage", "round_name", "round_names"]

_SQLITE = (".db", ".sqlite", ".sqlite3")
_ROUND = re.compile(r"^(?P<base>.+)\.r(?P<round>\d+)$")


def fingerprint(**parts: Any) -> str:
    """A short stable hash of ``parts`` (JSON-able values): equal parts, equal name."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def machine_identity() -> dict[str, Any]:
    """What about this machine changes the best configuration: host, CPUs, kernel."""
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


def open_storage(storage: str | os.PathLike[str] | BaseStorage) -> BaseStorage:
    """An Optuna storage for a path or URL (see the module docstring); storage
    objects pass through. Raises ValueError for an empty name, OSError where the
    file's folder cannot be made."""
    from optuna.storages import BaseStorage, JournalStorage, RDBStorage

    if isinstance(storage, BaseStorage):
        return storage
    text = os.fspath(storage)
    if not text:
        raise ValueError("tuner storage: give a file path or a database URL, not ''")
    if "://" in text:
        return _rdb(RDBStorage, text)
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in _SQLITE:
        return _rdb(RDBStorage, f"sqlite:///{path.resolve()}")
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def _rdb(make: Any, url: str, attempts: int = 8) -> BaseStorage:
    """``RDBStorage(url)``, made again where another process made the
    database's tables meanwhile: runs that start together on a new database
    race to create them (a table that "already exists", a version row that
    is not unique), and the loser finds them made on its next try."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(1, attempts):
        try:
            return make(url)  # type: ignore[no-any-return]
        except (OperationalError, IntegrityError):
            time.sleep(0.05 * attempt)
    return make(url)  # type: ignore[no-any-return]


def round_names(storage: BaseStorage, base: str) -> list[tuple[int, str]]:
    """``(round, study name)`` of every round of ``base`` in ``storage``, oldest first."""
    rounds = []
    for study in storage.get_all_studies():
        name = study.study_name
        if name == base:
            rounds.append((0, name))
        else:
            match = _ROUND.match(name)
            if match and match["base"] == base:
                rounds.append((int(match["round"]), name))
    return sorted(rounds)


def round_name(base: str, round_number: int) -> str:
    return base if round_number == 0 else f"{base}.r{round_number}"
