"""The shard cache's shared index: what is cached, reserved, pinned and planned.

One SQLite database (WAL journal) per cache, shared by every process that opens
the cache on this machine. Each step of the cache is one ``BEGIN IMMEDIATE``
transaction, so "does it fit?" and "reserve it" happen at once for all
processes: the sum of ``entries.size`` (complete shards and downloads in
progress alike) is what the byte limit bounds.

Eviction order is a query. ``plan``: Belady's rule over the plans of every live
cache object (each DataLoader worker has its own): a shard's next use is the
nearest position at or after a plan's cursor where it comes up again, and the
shard used furthest in the future (or never) goes first. ``lru``: the shard
used longest ago goes first. Pinned shards are never candidates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fastio._errors import CacheError, CacheFullError, CacheUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["FETCHING", "READY", "WAL_PEAK", "CacheIndex", "Entry", "EvictionPolicy"]

log = logging.getLogger("fastio.cache")

EvictionPolicy = Literal["plan", "lru"]
READY, FETCHING = "ready", "fetching"
_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY, url TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
    etag TEXT, state TEXT NOT NULL, owner TEXT NOT NULL, last_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owners (
    owner TEXT PRIMARY KEY, pid INTEGER NOT NULL, max_bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pins (
    owner TEXT NOT NULL, key TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (owner, key));
CREATE INDEX IF NOT EXISTS pins_by_key ON pins (key);
CREATE TABLE IF NOT EXISTS plans (
    owner TEXT NOT NULL, position INTEGER NOT NULL, key TEXT NOT NULL, url TEXT NOT NULL,
    PRIMARY KEY (owner, position));
CREATE INDEX IF NOT EXISTS plans_by_key ON plans (key, owner, position);
CREATE TABLE IF NOT EXISTS cursors (owner TEXT PRIMARY KEY, position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS clock (id INTEGER PRIMARY KEY CHECK (id = 0), tick INTEGER NOT NULL);
INSERT OR IGNORE INTO clock VALUES (0, 0);
"""

WAL_BYTES = 64 << 10
"""Past this size the write-ahead log is checkpointed and truncated."""
WAL_PEAK = 2 * WAL_BYTES
"""What the write-ahead log reaches before a checkpoint cuts it back: the
threshold and a transaction's pages (one of a shard's steps; a plan of many
thousand shards writes more)."""


_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL from Python 3.11 on
_SQLITE_READONLY = 8


def _read_only(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # extended: the primary in the low byte
    if code is not None and code & 0xFF == _SQLITE_READONLY:
        return True
    return "readonly database" in str(error)


def _full(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code == _SQLITE_FULL or "disk is full" in str(error)


def _cache_error(error: sqlite3.Error, subject: str, path: str) -> CacheError:
    """``error`` of the index at ``path`` as the cache's own, naming ``subject``."""
    if _full(error):
        return CacheFullError(subject, f"the cache's filesystem is full: its index ({path}) "
                                       f"cannot be written ({error})")  # fmt: skip
    if _read_only(error):
        return CacheUnavailableError(subject, f"the cache's index ({path}) cannot be written "
                                              f"({error})")  # fmt: skip
    return CacheError(subject, f"the cache's index ({path}) failed: {error}")


# The distance from each plan's cursor to the shard's next use there; the nearest counts.
_NEXT_USE = """(SELECT MIN(p.position - c.position) FROM plans AS p
    JOIN cursors AS c ON c.owner = p.owner WHERE p.key = e.key AND p.position >= c.position)"""
_CANDIDATES = f"""SELECT e.key, e.path, e.size, {_NEXT_USE} AS next_use FROM entries AS e
    WHERE e.state = '{READY}' AND NOT EXISTS (SELECT 1 FROM pins WHERE pins.key = e.key)"""
_EVICTION_ORDER = {
    "plan": f"{_CANDIDATES} ORDER BY next_use IS NULL DESC, next_use DESC, e.last_used",
    "lru": f"{_CANDIDATES} ORDER BY e.last_used",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """A shard in the cache: complete (``READY``) or being downloaded by ``owner``."""

    key: str
    url: str
    path: str
    size: int
    etag: str | None
    state: str
    owner: str


@dataclass(frozen=True, slots=True)
class Victim:
    key: str
    path: str
    size: int


class CacheIndex:
    """The database, one connection per process; threads take turns (``transaction``).

    Every method but :meth:`transaction` and :meth:`close` must run inside one.
    """

    def __init__(self, path: str, busy_timeout: float) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._busy_timeout = busy_timeout
        try:
            self._db = sqlite3.connect(
                path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise _cache_error(error, path, path) from error
        try:
            self._setup(busy_timeout)
        except BaseException:
            self._db.close()
            raise

    def _setup(self, busy_timeout: float) -> None:
        deadline = time.monotonic() + busy_timeout
        while True:  # a database being created elsewhere can refuse the switch to WAL
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as error:
                if time.monotonic() > deadline or _full(error):
                    raise _cache_error(error, self.path, self.path) from error
                time.sleep(0.01)
        # The write-ahead log is checkpointed by _cut_log, not by SQLite on
        # each commit: a checkpoint meeting another's gives up at once, and
        # with every process checkpointing the log grew past any bound (it
        # counts against the cache's limit).
        for pragma in ("synchronous=NORMAL", "wal_autocheckpoint=0",
                       f"journal_size_limit={WAL_BYTES}"):  # fmt: skip
            self._db.execute(f"PRAGMA {pragma}")
        with self.transaction():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, _VERSION):
                raise ValueError(f"{self.path}: a cache index of version {version}, not "
                                 f"{_VERSION}; remove the cache folder or use another")  # fmt: skip
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def transaction(self, subject: str | None = None) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction. An SQLite failure (a full disk
        above all) is rolled back and raised as :class:`CacheFullError` or
        :class:`CacheError` naming ``subject`` (a shard's URL; by default the
        index); the connection stays usable."""
        with self._lock:
            self._begin(subject or self.path)
            try:
                yield
                self._db.execute("COMMIT")
                self._cut_log(WAL_BYTES)
            except BaseException as failure:
                # SQLite may have rolled back by itself (a full disk does): then
                # ROLLBACK fails, harmlessly.
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                if isinstance(failure, sqlite3.Error):
                    raise _cache_error(failure, subject or self.path, self.path) from failure
                raise

    def _begin(self, subject: str) -> None:
        """``BEGIN IMMEDIATE`` once the write-ahead log is within :data:`WAL_BYTES`.

        Each commit checkpoints a log past that size, but a checkpoint that
        finds another running leaves the log to it, and that one polls for the
        write lock while other processes keep taking it: their commits would
        grow the log, which counts against the cache's limit, past any bound.
        So a transaction that finds the log too long gives way to the
        checkpoint before it writes. Past the busy timeout it goes on (the log
        past its room is better than a stalled job) and says so."""
        deadline, pause = time.monotonic() + self._busy_timeout, 0.001
        while True:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise _cache_error(error, subject, self.path) from error
            grown = self._log_bytes()
            if grown <= WAL_BYTES:
                return
            if time.monotonic() > deadline:
                log.warning("fastio: the shard cache's index log (%s-wal) is %d bytes, past "
                            "its room, and no checkpoint could cut it back for %.0f s",
                            self.path, grown, self._busy_timeout)  # fmt: skip
                return
            self._db.execute("ROLLBACK")
            if not self._checkpoint(subject):  # another's checkpoint is running
                time.sleep(pause)
                pause = min(2 * pause, 0.02)

    def _log_bytes(self) -> int:
        try:
            return os.path.getsize(self.path + "-wal")
        except FileNotFoundError:
            return 0

    def _checkpoint(self, subject: str) -> bool:
        """Checkpoints the write-ahead log and truncates it; False where another
        connection's checkpoint (or a reader) kept it from finishing."""
        try:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as error:
            raise _cache_error(error, subject, self.path) from error
        return not busy

    def cut_log(self, at_least: int = WAL_BYTES) -> None:
        """Checkpoints the write-ahead log and truncates it where it is past
        ``at_least`` bytes (as every commit does past :data:`WAL_BYTES`)."""
        with self._lock:
            self._cut_log(at_least)

    def _cut_log(self, at_least: int) -> None:
        """Checkpoints the write-ahead log and truncates it once it is past
        ``at_least``, waiting for other connections' reads (they take
        microseconds). One that finds another checkpoint running leaves the
        log to it."""
        if self._log_bytes() > at_least:
            self._checkpoint(self.path)

    # ---- entries ---------------------------------------------------------------------------

    def entry(self, key: str) -> Entry | None:
        row = self._db.execute(
            "SELECT key, url, path, size, etag, state, owner FROM entries WHERE key = ?", (key,)
        ).fetchone()
        return Entry(*row) if row else None

    def downloads(self, owner: str | None = None) -> list[Entry]:
        """Downloads in progress: ``owner``'s, or everyone's."""
        query = "SELECT key, url, path, size, etag, state, owner FROM entries WHERE state = ?"
        rows = self._db.execute(query + " AND owner = ?", (FETCHING, owner)) if owner else (
            self._db.execute(query, (FETCHING,)))  # fmt: skip
        return [Entry(*row) for row in rows]

    def keys(self) -> set[str]:
        return {key for (key,) in self._db.execute("SELECT key FROM entries")}

    def reserve(self, entry: Entry) -> None:
        """Counts ``entry`` (a download about to start) against the limit."""
        self._db.execute(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (entry.key, entry.url, entry.path, entry.size, entry.etag, FETCHING, entry.owner,
             self._tick()),
        )  # fmt: skip

    def publish(self, key: str, owner: str) -> bool:
        """Marks ``owner``'s download of ``key`` complete; False if it was taken
        from it (its owner was thought dead)."""
        cursor = self._db.execute(
            "UPDATE entries SET state = ?, last_used = ? WHERE key = ? AND owner = ? AND state = ?",
            (READY, self._tick(), key, owner, FETCHING),
        )
        return cursor.rowcount == 1

    def remove(self, key: str) -> None:
        self._db.execute("DELETE FROM entries WHERE key = ?", (key,))

    def touch(self, key: str) -> None:
        self._db.execute("UPDATE entries SET last_used = ? WHERE key = ?", (self._tick(), key))

    def _tick(self) -> int:
        self._db.execute("UPDATE clock SET tick = tick + 1 WHERE id = 0")
        tick: int = self._db.execute("SELECT tick FROM clock WHERE id = 0").fetchone()[0]
        return tick

    def totals(self) -> dict[str, int]:
        """Bytes and counts of complete shards, of downloads in progress, and of
        shards pinned (in use)."""
        rows = self._db.execute(
            "SELECT state, COUNT(*), COALESCE(SUM(size), 0) FROM entries GROUP BY state"
        )
        found = {state: (count, size) for state, count, size in rows}
        ready, fetching = found.get(READY, (0, 0)), found.get(FETCHING, (0, 0))
        pinned = self._db.execute(
            "SELECT COALESCE(SUM(size), 0) FROM entries WHERE key IN (SELECT key FROM pins)"
        ).fetchone()[0]
        return {"bytes_used": ready[1], "bytes_reserved": fetching[1], "bytes_pinned": pinned,
                "shards_cached": ready[0], "downloads": fetching[0]}  # fmt: skip

    def victims(
        self, excess: int, policy: EvictionPolicy, sooner_than: int | None
    ) -> list[Victim] | None:
        """Unpinned shards, in eviction order, that free ``excess`` bytes; None if
        those there are do not. With ``sooner_than``, only shards whose next use
        is later than that many steps (or never)."""
        chosen: list[Victim] = []
        freed = 0
        for key, path, size, next_use in self._db.execute(_EVICTION_ORDER[policy]):
            if freed >= excess:
                break
            if sooner_than is not None and next_use is not None and next_use <= sooner_than:
                return None  # in plan order every shard left is needed sooner
            chosen.append(Victim(key, path, size))
            freed += size
        return chosen if freed >= excess else None

    # ---- pins ------------------------------------------------------------------------------

    def pin(self, owner: str, key: str) -> None:
        self._db.execute(
            "INSERT INTO pins VALUES (?, ?, 1) ON CONFLICT (owner, key) DO UPDATE "
            "SET count = count + 1",
            (owner, key),
        )

    def unpin(self, owner: str, key: str) -> bool:
        cursor = self._db.execute(
            "UPDATE pins SET count = count - 1 WHERE owner = ? AND key = ?", (owner, key)
        )
        self._db.execute("DELETE FROM pins WHERE owner = ? AND key = ? AND count <= 0",
                         (owner, key))  # fmt: skip
        return cursor.rowcount == 1

    def pin_count(self, key: str) -> int:
        """Pins on ``key`` over all owners."""
        row = self._db.execute("SELECT SUM(count) FROM pins WHERE key = ?", (key,)).fetchone()
        return int(row[0] or 0)

    # ---- plans -----------------------------------------------------------------------------

    def set_plan(self, owner: str, planned: Iterable[tuple[str, str]]) -> None:
        """``owner`` will use these ``(key, url)``s in this order, from now."""
        self._db.execute("DELETE FROM plans WHERE owner = ?", (owner,))
        self._db.executemany(
            "INSERT INTO plans VALUES (?, ?, ?, ?)",
            ((owner, position, key, url) for position, (key, url) in enumerate(planned)),
        )
        self._db.execute("INSERT OR REPLACE INTO cursors VALUES (?, 0)", (owner,))

    def advance(self, owner: str, key: str) -> None:
        """``owner`` used ``key``: its plan moves past that use of it."""
        self._db.execute(
            "UPDATE cursors SET position = (SELECT MIN(p.position) + 1 FROM plans AS p "
            "WHERE p.owner = cursors.owner AND p.key = ? AND p.position >= cursors.position) "
            "WHERE owner = ? AND EXISTS (SELECT 1 FROM plans AS p WHERE p.owner = cursors.owner "
            "AND p.key = ? AND p.position >= cursors.position)",
            (key, owner, key),
        )

    def next_use(self, key: str) -> int | None:
        """Steps until some plan uses ``key`` again; None if none does."""
        row = self._db.execute(f"SELECT {_NEXT_USE} FROM (SELECT ? AS key) AS e", (key,))
        steps: int | None = row.fetchone()[0]
        return steps

    def planned_uses(self, key: str) -> int:
        """How many uses of ``key`` the plans hold from their cursors on."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM plans AS p JOIN cursors AS c ON c.owner = p.owner "
            "WHERE p.key = ? AND p.position >= c.position",
            (key,),
        )
        uses: int = row.fetchone()[0]
        return uses

    def upcoming(self, owner: str, count: int) -> list[str]:
        """The next ``count`` URLs of ``owner``'s plan that are not in the cache."""
        rows = self._db.execute(
            "SELECT p.url FROM plans AS p JOIN cursors AS c ON c.owner = p.owner "
            "WHERE p.owner = ? AND p.position >= c.position "
            "AND NOT EXISTS (SELECT 1 FROM entries WHERE entries.key = p.key) ORDER BY p.position",
            (owner,),
        )
        urls: dict[str, None] = {}
        for (url,) in rows:
            if len(urls) >= count:
                break
            urls[url] = None
        return list(urls)

    # ---- owners ----------------------------------------------------------------------------

    def register(self, owner: str, pid: int, max_bytes: int) -> None:
        self._db.execute("INSERT INTO owners VALUES (?, ?, ?)", (owner, pid, max_bytes))

    def owners(self) -> list[tuple[str, int]]:
        """``(owner, max_bytes)`` of every registered cache object."""
        return list(self._db.execute("SELECT owner, max_bytes FROM owners"))

    def unregister(self, owner: str) -> None:
        """Forgets ``owner``: its pins, plan and registration (not its downloads)."""
        for table in ("pins", "plans", "cursors", "owners"):
            self._db.execute(f"DELETE FROM {table} WHERE owner = ?", (owner,))
