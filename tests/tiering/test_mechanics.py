"""Tiering on real directories: budgets, migrations under readers, the shard cache,
shuffle spill and recorded I/O."""

from __future__ import annotations

import copy
import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastio
from fastio import TierFullError
from fastio.cache._cache import INDEX_ROOM, ShardCache
from fastio.tiering import DensityModel, Tier, Tiering


def two_tiers(root: Path, fast: int, slow: int) -> Tiering:
    return Tiering(
        [Tier("slow", root / "slow", slow, "hdd"), Tier("fast", root / "fast", fast, "ssd")]
    )


def on_disk(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


def test_temporaries_record_the_io_done(tmp_path: Path) -> None:
    tiering = two_tiers(tmp_path, 1 << 20, 8 << 20)
    with tiering.temporary("user", 100_000, producer="test") as file:
        assert file.tier.name == "fast"
        for _ in range(10):
            file.write(b"a" * 10_000)
        assert file.pread(5000, 0) == b"a" * 5000
        file.seek(0)
        assert len(file.read()) == 100_000
        path = file.path
    assert not os.path.exists(path)
    outcome = tiering.outcomes[-1]
    assert (outcome.operations, outcome.bytes_written, outcome.bytes_read) == (12, 100_000, 105_000)
    assert outcome.size == 100_000
    assert outcome.lifetime > 0
    assert tiering.usage() == {"fast": 0, "slow": 0}


def test_colder_files_are_demoted_for_hotter_ones(tmp_path: Path) -> None:
    tiering = two_tiers(tmp_path, 300_000, 8 << 20)
    with tiering.temporary("user", 200_000) as cold:
        cold.write(b"c" * 200_000)
        assert cold.tier.name == "fast"
        # An index is predicted much denser than a user temporary: it takes the room.
        with tiering.temporary("index", 200_000, access="random") as hot:
            assert hot.tier.name == "fast"
            assert cold.tier.name == "slow"
            assert cold.pread(10, 199_990) == b"c" * 10  # the owner reads on
            assert tiering.migrations == 1
        with pytest.raises(TierFullError):
            tiering.temporary("user", 9 << 20)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(["create", "grow", "close", "migrate"]),
                          st.integers(0, 5), st.integers(1, 300_000),
                          st.sampled_from(["user", "spill", "index"])), max_size=30))  # fmt: skip
def test_budgets_hold_under_any_sequence(
    tmp_path: Path, steps: list[tuple[str, int, int, str]]
) -> None:
    root = tmp_path / str(len(os.listdir(tmp_path)))
    tiering = two_tiers(root, 400_000, 900_000)
    files = []
    try:
        for action, which, size, kind in steps:
            try:
                if action == "create":
                    files.append(tiering.temporary(kind, size))
                elif files:
                    file = files[which % len(files)]
                    if action == "grow":
                        file.write(b"x" * size)
                    elif action == "close":
                        file.close()
                        files.remove(file)
                    else:
                        tiering.migrate(file, "slow" if file.tier.name == "fast" else "fast")
            except TierFullError:
                pass
            usage = tiering.usage()
            for tier in tiering.tiers:
                assert usage[tier.name] <= tier.capacity
                assert on_disk(tier.path) <= tier.capacity
            for file in files:
                assert file.size <= file._placed.reserved
    finally:
        tiering.close()
    assert tiering.usage() == {"fast": 0, "slow": 0}


def test_migration_never_shows_a_torn_file(tmp_path: Path) -> None:
    tiering = two_tiers(tmp_path, 4 << 20, 4 << 20)
    content = np.random.default_rng(0).bytes(1 << 20)
    problems: list[str] = []
    done = threading.Event()
    reads = [0]
    with tiering.temporary("spill", len(content)) as file:
        file.write(content)

        def reader() -> None:
            while not done.is_set():
                fd = file.open_reader()
                try:
                    data = b"".join(iter(lambda fd=fd: os.read(fd, 1 << 18), b""))
                finally:
                    os.close(fd)
                if data != content:
                    problems.append(f"read {len(data)} bytes, not the file")
                reads[0] += 1

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            for turn in range(30):
                tiering.migrate(file, "slow" if turn % 2 == 0 else "fast")
                assert file.pread(len(content), 0) == content
        finally:
            done.set()
            for thread in threads:
                thread.join()
    assert not problems, problems[:3]
    assert reads[0] > 0
    assert tiering.migrations == 30


# A process that makes temporaries in two tiers, then dies by SIGKILL in the
# middle of moving one (its copy in the new tier written, not renamed yet).
_KILLED_MID_MIGRATION = """
import os, signal, sys
from fastio.tiering import Tier, Tiering
root = sys.argv[1]
tiering = Tiering([Tier("slow", root + "/slow", 8 << 20, "hdd"),
                   Tier("fast", root + "/fast", 8 << 20, "ssd")])
kept = tiering.temporary("spill", 1 << 20)
kept.write(os.urandom(1 << 20))
moved = tiering.temporary("spill", 1 << 20)
moved.write(os.urandom(1 << 20))
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
tiering.migrate(moved, "slow")
"""

# A process that holds a temporary until told to close it.
_HOLDING = """
import sys
from fastio.tiering import Tier, Tiering
root = sys.argv[1]
tiering = Tiering([Tier("slow", root + "/slow", 8 << 20, "hdd"),
                   Tier("fast", root + "/fast", 8 << 20, "ssd")])
with tiering.temporary("spill", 1000) as file:
    file.write(b"x" * 1000)
    print(file.path, flush=True)
    sys.stdin.readline()
"""


def test_what_a_killed_process_left_in_the_tiers_is_removed(tmp_path: Path) -> None:
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_MIGRATION, str(tmp_path)],
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = sorted(str(path) for path in tmp_path.glob("*/.*fastio-spill-*"))
    # Two temporaries in the fast tier, the copy being moved in the slow one.
    assert [Path(path).parent.name for path in left] == ["fast", "fast", "slow"], left
    assert sum(Path(path).stat().st_size for path in left) == 3 << 20
    tiering = two_tiers(tmp_path, 8 << 20, 8 << 20)
    assert sorted(tiering.swept) == left
    assert not list(tmp_path.glob("*/.*fastio-spill-*"))
    assert tiering.usage() == {"fast": 0, "slow": 0}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDING, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        held = holder.stdout.readline().strip()
        with tiering.temporary("spill", 1 << 20) as file:
            file.write(b"y" * (1 << 20))
            tiering.migrate(file, "slow")
            # Files of live processes are never swept, moved or not.
            assert two_tiers(tmp_path, 8 << 20, 8 << 20).swept == []
            present = sorted(map(str, tmp_path.glob("*/.*fastio-spill-*")))
            assert present == sorted([held, file.path])
            assert file.pread(4, 0) == b"yyyy"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait()
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()
    assert not list(tmp_path.glob("*/.*fastio-spill-*"))


def test_shard_cache_lands_where_the_policy_says(tmp_path: Path) -> None:
    tiering = two_tiers(tmp_path, 150_000, 1 << 20)
    payload = {f"s3://bucket/shard-{i}.tar": bytes([i]) * 100_000 for i in range(3)}

    def fetch(url: str, file: object) -> None:
        file.write(payload[url])  # type: ignore[attr-defined]

    # 250 KB for copies, on top of what the cache keeps for its index
    with ShardCache(tiering.directories, INDEX_ROOM + 250_000, placement=tiering) as cache:
        paths = {}
        for url in payload:
            with cache.use(url, 100_000, fetch) as path:
                paths[url] = path
        first, second, third = (tiering.tier_of(path).name for path in paths.values())
        # The first fits the fast tier; cache copies are the cache's to move, so the next go slow.
        assert (first, second, third) == ("fast", "slow", "slow")
        with cache.use("s3://bucket/shard-1.tar", 100_000, fetch):  # a hit: a whole read
            pass
        ended = tiering.usage()
    assert ended["fast"] + ended["slow"] <= 250_000  # the evicted copy's space came back
    gone = [o for o in tiering.outcomes if o.features.kind == "shard"]
    assert len(gone) == 1  # the one evicted to make room for the third
    assert (gone[0].bytes_written, gone[0].bytes_read, gone[0].operations) == (100_000, 0, 1)
    live = [p for p in tiering._files.values() if p.key]
    assert sorted(p.bytes_read for p in live) == [0, 100_000]


def test_a_copy_no_tier_has_room_for_is_a_full_cache_not_an_error(tmp_path: Path) -> None:
    """The cache's bytes fit the tiers together, not a copy in either: as a
    full cache (the shard is read remotely), never TierFullError."""
    tiering = two_tiers(tmp_path, 150_000, 150_000)
    payload = {f"s3://bucket/shard-{i}.tar": bytes([i]) * 100_000 for i in range(3)}

    def fetch(url: str, file: object) -> None:
        file.write(payload[url])  # type: ignore[attr-defined]

    with ShardCache(tiering.directories, INDEX_ROOM + 300_000, placement=tiering) as cache:
        held = [cache.get(url, 100_000, fetch) for url in list(payload)[:2]]  # one a tier
        with pytest.raises(fastio.CacheFullError, match="no tier has room") as caught:
            cache.get("s3://bucket/shard-2.tar", 100_000, fetch, wait=False)
        assert caught.value.filename == "s3://bucket/shard-2.tar"
        for url in list(payload)[:2]:
            cache.release(url)
        assert len(held) == 2


def test_shuffle_spill_keeps_the_order_and_lands_on_the_fast_tier(tmp_path: Path) -> None:
    shards = []
    for number in range(3):
        path = tmp_path / f"part-{number}.jsonl"
        path.write_text("".join(f'{{"shard": {number}, "row": {row}}}\n' for row in range(200)))
        shards.append(str(path))
    tiering = two_tiers(tmp_path / "tiers", 1 << 20, 8 << 20)
    options = {"shuffle_buffer": 4000, "shuffle_shards": 3, "seed": 3,
               "index_dir": tmp_path / "index"}  # fmt: skip
    with fastio.Dataset(shards, **options).index() as plain:  # windows from the first epoch
        expected = list(plain)
    with fastio.Dataset(shards, shuffle_memory=1000, tiering=tiering, **options) as spilled:
        got, seen = [], False  # spill files on the fast tier while the epoch runs
        for sample in spilled:  # (the first windows are small: they need not spill)
            got.append(sample)
            names = os.listdir(tiering.tiers[0].path)
            seen = seen or any(name.startswith(".fastio-spill-") for name in names)
        assert seen
        assert spilled._spill is not None
        assert spilled._spill.windows_spilled > 1
        assert spilled.stats()["samples"] == len(expected)
    assert got == expected
    spills = [o for o in tiering.outcomes if o.features.kind == "spill"]
    written = sum(o.bytes_written for o in spills)
    operations = sum(o.operations for o in spills)  # one write, one read each spilled sample
    # All but the first, smallest windows spill.
    assert operations % 2 == 0
    assert len(expected) < operations <= 2 * len(expected)
    assert written == sum(o.bytes_read for o in spills) > 0
    assert tiering.usage() == {"fast": 0, "slow": 0}


def test_spill_resumes_at_the_same_sample(tmp_path: Path) -> None:
    path = tmp_path / "part.jsonl"
    path.write_text("".join(f'{{"row": {row}}}\n' for row in range(300)))
    tiering = two_tiers(tmp_path / "tiers", 1 << 20, 8 << 20)
    options = {"shuffle_buffer": 3000, "seed": 1, "shuffle_memory": 500, "tiering": tiering}
    with fastio.Dataset([str(path)], **options) as first:
        iterator = iter(first)
        head = [next(iterator) for _ in range(77)]
        state = first.state_dict()
        iterator.close()
    with fastio.Dataset([str(path)], **options) as second:
        second.load_state_dict(state)
        tail = list(second)
    assert len(head) + len(tail) == 300
    assert sorted(r["row"] for r in head + tail) == list(range(300))
    with pytest.raises(ValueError, match="shuffle_memory"):
        fastio.Dataset([str(path)], tiering=tiering)


def test_model_error_falls_across_periods_on_real_files(tmp_path: Path) -> None:
    tiering = Tiering(
        [Tier("fast", tmp_path / "fast", 64 << 20, "ssd")], DensityModel(strength=2.0)
    )
    errors = []
    for _period in range(4):
        before = copy.deepcopy(tiering.model)
        start = len(tiering.outcomes)
        for number in range(8):
            hot = number % 2 == 0
            with tiering.temporary("hot" if hot else "cold", 64 << 10, producer="bench") as file:
                file.write(b"z" * (64 << 10))
                for offset in range(0, 64 << 10, 512 if hot else 64 << 10):
                    file.pread(512, offset)
        errors.append(before.error(tiering.outcomes[start:]))
    assert errors[-1] < errors[0] * 0.5, errors


def test_a_spill_tier_whose_filesystem_fills_names_the_file(
    tmp_path: Path, small_filesystem: Path
) -> None:
    """A tier declared larger than its filesystem's room: the spill that
    runs out of it (part of a sample written, then no room) raises an
    OSError naming the spill file and its tier, not a truncated sample
    read back as damage."""
    path = tmp_path / "part.jsonl"
    path.write_text("".join(f'{{"row": {row}, "pad": "{"x" * 20_000}"}}\n' for row in range(60)))
    filler = os.open(small_filesystem / "filler", os.O_WRONLY | os.O_CREAT)
    free = os.statvfs(small_filesystem)
    os.write(filler, bytes(free.f_bavail * free.f_frsize - 6_000))  # 6 KB left, or one page
    os.close(filler)
    tiering = Tiering([Tier("fast", small_filesystem / "tier", 1 << 30, "ssd")])
    spilled = fastio.Dataset(str(path), shuffle_memory=1000, tiering=tiering, seed=1,
                             index_dir=tmp_path / "index").index()  # fmt: skip
    with spilled, pytest.raises(OSError, match="tier 'fast'") as raised:
        for _ in spilled:
            pass
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename.startswith(str(small_filesystem / "tier" / ".fastio-spill-"))
    assert tiering.usage() == {"fast": 0}
