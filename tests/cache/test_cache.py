"""The shard cache: the byte limit under concurrent threads and processes, crash
safety, one download per shard, eviction policies, and verification."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import pickle
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastio import CacheFullError, CacheIntegrityError, CacheTimeoutError
from fastio.cache._cache import INDEX_ROOM, ShardCache, etag_checksum
from fastio.cache._database import WAL_PEAK
from fastio.plan._assignment import shard_order
from tests.conftest import fill

SPAWN = multiprocessing.get_context("spawn")
# max_bytes bounds the whole folder, the cache's own index included: the
# limits below are the room for shards, on top of the index's.
OWN = INDEX_ROOM


def content(url: str, size: int) -> bytes:
    """The object at ``url``: the same bytes wherever and whenever it is fetched."""
    return hashlib.shake_256(url.encode()).digest(size)


def serve(url: str, size: int, pause: float = 0.0):
    """A fetch that writes the object in two parts, ``pause`` seconds apart."""

    def fetch(fetched_url: str, file) -> None:
        assert fetched_url == url
        data = content(url, size)
        file.write(data[: size // 2])
        time.sleep(pause)
        file.write(data[size // 2 :])

    return fetch


def disk_bytes(folder: str | Path) -> int:
    """Bytes of the files at the cache folder's top level: its copies and downloads."""
    total = 0
    with os.scandir(folder) as listing:
        for item in listing:
            try:
                if item.is_file(follow_symlinks=False):
                    total += item.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # evicted while we looked
                pass
    return total


def folder_bytes(folder: str | Path) -> int:
    """Bytes of every file under the cache folder: copies, downloads and the
    cache's own files (its index)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # a download's, published
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def temporaries(folder: str | Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(".tmp-")]


def copies(folder: str | Path) -> list[str]:
    return [name for name in os.listdir(folder) if not name.startswith(".")]


# ---- the byte limit under concurrency ----------------------------------------------------


def run_sequence(
    cache: ShardCache, sizes: list[int], sequence: list[int], planned: bool, problems: list[str]
) -> None:
    """Gets ``sequence`` (shard numbers) in order, adding what goes wrong to ``problems``."""
    folder, max_bytes = cache.directories[0], cache.max_bytes
    try:
        if planned:
            cache.plan(f"mem://shard-{index}" for index in sequence)
        for index in sequence:
            url, size = f"mem://shard-{index}", sizes[index]
            with cache.use(url, size, serve(url, size, pause=0.001)) as path:
                if Path(path).read_bytes() != content(url, size):
                    problems.append(f"{url}: wrong content at {path}")
                if folder_bytes(folder) > max_bytes:
                    problems.append(f"{folder_bytes(folder)} bytes on disk > {max_bytes}")
    except Exception as error:
        problems.append(repr(error))


def run_threads(folder: str, max_bytes: int, policy: str, sizes: list[int],
                sequences: list[tuple[list[int], bool]]) -> list[str]:  # fmt: skip
    """``run_sequence`` on a thread each, sharing one cache object; the problems seen."""
    problems: list[str] = []
    with ShardCache(folder, OWN + max_bytes, policy, wait_timeout=30) as cache:
        threads = [
            threading.Thread(target=run_sequence, args=(cache, sizes, sequence, planned, problems))
            for sequence, planned in sequences
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return problems


@pytest.fixture(scope="module")
def pool():
    with SPAWN.Pool(2) as workers:
        yield workers


@st.composite
def workloads(draw):
    shard_count = draw(st.integers(2, 9))
    sizes = draw(st.lists(st.integers(0, 5000), min_size=shard_count, max_size=shard_count))
    max_bytes = draw(st.integers(max(max(sizes), 1), sum(sizes) + 1))
    policy = draw(st.sampled_from(["plan", "lru"]))
    sequence = st.lists(st.integers(0, shard_count - 1), min_size=1, max_size=10)
    # Three groups (this process, two others) of two threads each.
    groups = draw(st.lists(st.lists(st.tuples(sequence, st.booleans()), min_size=2, max_size=2),
                           min_size=3, max_size=3))  # fmt: skip
    return sizes, max_bytes, policy, groups


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads())
def test_byte_limit_holds_under_threads_and_processes(pool, tmp_path_factory, workload) -> None:
    sizes, max_bytes, policy, groups = workload
    folder = str(tmp_path_factory.mktemp("cache"))
    seen, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen[0] = max(seen[0], folder_bytes(folder))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        others = [pool.apply_async(run_threads, (folder, max_bytes, policy, sizes, group))
                  for group in groups[1:]]  # fmt: skip
        problems = run_threads(folder, max_bytes, policy, sizes, groups[0])
        for other in others:
            problems += other.get(timeout=60)
    finally:
        stop.set()
        watcher.join()
    assert problems == []
    assert seen[0] <= OWN + max_bytes  # the index's files included
    with ShardCache(folder, OWN + max_bytes, policy) as cache:
        stats = cache.stats()
    assert stats["bytes_used"] == disk_bytes(folder) <= max_bytes
    assert stats["bytes_reserved"] == stats["bytes_pinned"] == 0
    assert temporaries(folder) == []


# ---- crash safety ------------------------------------------------------------------------


def download_until_killed(folder: str, url: str, size: int, started: str) -> None:
    def fetch(_: str, file) -> None:
        file.write(content(url, size)[: size // 2])
        file.flush()
        Path(started).touch()
        time.sleep(60)

    ShardCache(folder, OWN + 10 * size).get(url, size, fetch)


def start_download_to_kill(tmp_path: Path, url: str, size: int):
    folder, started = str(tmp_path / "cache"), tmp_path / "started"
    child = SPAWN.Process(target=download_until_killed, args=(folder, url, size, str(started)))
    child.start()
    # However long a loaded machine takes to spawn it: the suite's own
    # timeout stops a download that never starts.
    while not started.exists():
        assert child.is_alive(), "the download process died"
        time.sleep(0.01)
    return folder, child


def test_a_download_killed_midway_is_neither_served_nor_leaked(tmp_path) -> None:
    url, size = "s3://bucket/train-0000.tar", 100_000
    folder, child = start_download_to_kill(tmp_path, url, size)
    assert temporaries(folder)
    assert disk_bytes(folder) == size // 2
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    with ShardCache(folder, OWN + 10 * size) as cache:  # the next run
        assert temporaries(folder) == []
        assert disk_bytes(folder) == 0
        assert cache.stats()["bytes_reserved"] == cache.stats()["bytes_used"] == 0
        fetched = []
        with cache.use(url, size, lambda u, f: fetched.append(f.write(content(u, size)))) as path:
            assert Path(path).read_bytes() == content(url, size)
        assert fetched == [size]
        assert cache.stats()["bytes_used"] == disk_bytes(folder) == size


def test_a_waiting_process_takes_over_from_one_killed_midway(tmp_path) -> None:
    url, size = "s3://bucket/train-0001.tar", 50_000
    folder, child = start_download_to_kill(tmp_path, url, size)
    with ShardCache(folder, OWN + 10 * size, wait_timeout=30) as cache:  # opened while it lives
        threading.Timer(0.3, os.kill, (child.pid, signal.SIGKILL)).start()
        with cache.use(url, size, serve(url, size)) as path:
            assert Path(path).read_bytes() == content(url, size)
        child.join()
        stats = cache.stats()
        assert stats["misses"] == 1
        assert stats["bytes_used"] == disk_bytes(folder) == size
    assert temporaries(folder) == []


def test_files_the_index_does_not_know_are_removed_at_start(tmp_path) -> None:
    folder = tmp_path / "cache"
    with ShardCache(folder, OWN + 1000) as cache:
        kept = Path(cache.get("mem://kept", 10, serve("mem://kept", 10))).name
    (folder / ("0" * 40 + ".tar")).write_bytes(b"x" * 100)  # published, then the index lost it
    (folder / f".tmp-999999-abcdef-{'1' * 40}").write_bytes(b"x" * 100)  # owner long gone
    (folder / "notes.txt").write_text("not the cache's")
    with ShardCache(folder, OWN + 1000) as cache:
        assert cache.stats()["bytes_used"] == 10
    assert sorted(os.listdir(folder)) == sorted([".fastio-cache", "notes.txt", kept])


# ---- one download per shard --------------------------------------------------------------


def get_once(folder: str, url: str, size: int, log: str, barrier) -> bytes:
    def fetch(_: str, file) -> None:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        serve(url, size, pause=0.5)(url, file)

    with ShardCache(folder, OWN + 10 * size) as cache:
        barrier.wait()
        with cache.use(url, size, fetch) as path:
            return Path(path).read_bytes()


def test_two_processes_getting_one_shard_download_it_once(tmp_path) -> None:
    url, size, log = "https://host/train-0002.tar", 200_000, str(tmp_path / "log")
    manager = SPAWN.Manager()
    barrier = manager.Barrier(2)
    with SPAWN.Pool(2) as workers:
        results = [workers.apply_async(get_once, (str(tmp_path / "c"), url, size, log, barrier))
                   for _ in range(2)]  # fmt: skip
        answers = [result.get(timeout=60) for result in results]
    manager.shutdown()
    assert len(Path(log).read_text().split()) == 1
    assert answers == [content(url, size)] * 2


def test_threads_getting_one_shard_download_it_once(tmp_path) -> None:
    url, size, calls = "mem://one", 10_000, []
    fetch = serve(url, size, pause=0.2)

    def counted(u, file) -> None:
        calls.append(u)
        fetch(u, file)

    with ShardCache(tmp_path, OWN + 10 * size) as cache:
        threads = [threading.Thread(target=cache.get, args=(url, size, counted))
                   for _ in range(4)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert calls == [url]
        stats = cache.stats()
        assert (stats["misses"], stats["hits"], stats["bytes_pinned"]) == (1, 3, size)
        for _ in threads:
            cache.release(url)
        assert cache.stats()["bytes_pinned"] == 0


def test_waiting_for_another_download_times_out_with_a_clear_error(tmp_path) -> None:
    url = "mem://slow"
    with (
        ShardCache(tmp_path, OWN + 100) as first,
        ShardCache(tmp_path, OWN + 100, wait_timeout=0.2) as second,
    ):
        downloading = threading.Thread(target=first.get, args=(url, 10, serve(url, 10, pause=1)))
        downloading.start()
        while not temporaries(tmp_path):
            time.sleep(0.01)
        with pytest.raises(CacheTimeoutError, match=rf"for process {os.getpid()} .*'{url}'"):
            second.get(url, 10, serve(url, 10))
        downloading.join()
        assert second.get(url, 10, serve(url, 10)) == first.get(url, 10, serve(url, 10))


# ---- eviction policies -------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> list[str]:
    """40 local shards of 1000 bytes: a remote dataset stand-in."""
    folder = tmp_path_factory.mktemp("remote")
    urls = []
    for index in range(40):
        path = folder / f"train-{index:04d}.tar"
        path.write_bytes(content(str(path), 1000))
        urls.append(str(path))
    return urls


def copy_file(url: str, file) -> None:
    with open(url, "rb") as source:
        while block := source.read(256):
            file.write(block)


def hits_per_epoch(folder: Path, policy: str, orders: list[list[str]], fraction: float):
    size = 1000
    max_bytes = int(len(orders[0]) * size * fraction)
    with ShardCache(folder, OWN + max_bytes, policy) as cache:
        cache.plan(url for order in orders for url in order)
        hits = []
        for order in orders:
            before = cache.stats()["hits"]
            for url in order:
                with cache.use(url, size, copy_file) as path:
                    assert Path(path).read_bytes() == content(url, size)
                assert disk_bytes(folder) <= max_bytes
            hits.append(cache.stats()["hits"] - before)
    return hits


def test_plan_keeps_half_the_dataset_across_stored_order_epochs(dataset, tmp_path) -> None:
    orders = [dataset] * 3
    plan = hits_per_epoch(tmp_path / "plan", "plan", orders, 0.5)
    lru = hits_per_epoch(tmp_path / "lru", "lru", orders, 0.5)
    # The first epoch fills the cache (misses whatever the policy); after it, a cache of
    # half the dataset can serve at most half of each epoch.
    warm = len(dataset) * 2
    assert sum(plan[1:]) / warm >= 0.45
    assert sum(lru) == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plan_is_at_least_lru_in_shuffled_epochs(dataset, tmp_path, seed) -> None:
    orders = [[dataset[i] for i in shard_order(len(dataset), seed, epoch)] for epoch in range(3)]
    plan = hits_per_epoch(tmp_path / "plan", "plan", orders, 0.5)
    lru = hits_per_epoch(tmp_path / "lru", "lru", orders, 0.5)
    assert sum(plan) >= sum(lru)


def test_prefetch_names_what_the_plan_needs_and_fetch_ahead_keeps_sooner_shards(
    dataset, tmp_path
) -> None:
    urls = dataset[:6]
    with ShardCache(tmp_path, OWN + 3000) as cache:
        cache.plan(urls + urls[:2])
        assert cache.prefetch(2) == urls[:2]
        assert all(cache.fetch_ahead(url, 1000, copy_file) for url in urls[:3])
        assert cache.prefetch(2) == urls[3:5]
        # Full: urls[3] would have to evict a shard needed before it.
        assert not cache.fetch_ahead(urls[3], 1000, copy_file)
        assert cache.stats()["prefetched"] == 3
        for url in urls[:3]:
            with cache.use(url, 1000, copy_file):
                pass
        stats = cache.stats()
        assert (stats["hits"], stats["misses"]) == (3, 0)
        # urls[2] is never needed again, urls[:2] are: fetching ahead evicts urls[2].
        assert cache.fetch_ahead(urls[3], 1000, copy_file)
        assert cache.stats()["evictions"] == 1
        assert not cache.fetch_ahead("mem://unplanned", 10, serve("mem://unplanned", 10))


def test_pinned_shards_are_never_evicted(tmp_path) -> None:
    with ShardCache(tmp_path, OWN + 2000, "lru", wait_timeout=0.3) as cache:
        first = cache.get("mem://a", 1000, serve("mem://a", 1000))
        for name in "bcd":
            with cache.use(f"mem://{name}", 1000, serve(f"mem://{name}", 1000)):
                pass
        assert Path(first).read_bytes() == content("mem://a", 1000)
        with (
            cache.use("mem://e", 1000, serve("mem://e", 1000)),
            pytest.raises(
                CacheFullError,
                match=rf"2000 of the cache.s {OWN + 2000} bytes are shards in use.*mem://f",
            ),
        ):
            cache.get("mem://f", 1000, serve("mem://f", 1000))
        cache.release("mem://a")
        with pytest.raises(ValueError, match="not pinned"):
            cache.release("mem://a")


# ---- verification ------------------------------------------------------------------------


def wrong_size(delta: int):
    def fetch(url: str, file) -> None:
        file.write(content(url, 1000 + delta))

    return fetch


@pytest.mark.parametrize(
    ("fetch", "checksum", "message"),
    [
        (wrong_size(-1), None, "ended after 999 of 1000 bytes"),
        (wrong_size(+1), None, "longer than the 1000 bytes"),
        (wrong_size(0), "sha256:" + "0" * 64, "sha256 is [0-9a-f]{64}, not 0{64}"),
        (wrong_size(0), etag_checksum('"' + "a" * 32 + '"'), "md5 is .*, not a{32}"),
    ],
    ids=["short", "long", "sha256", "md5-etag"],
)
def test_a_wrong_download_is_an_error_naming_the_url_and_nothing_is_cached(
    tmp_path, fetch, checksum, message
) -> None:
    url = "s3://bucket/train-0003.tar"
    with ShardCache(tmp_path, OWN + 5000) as cache:
        with pytest.raises(CacheIntegrityError, match=message) as raised:
            cache.get(url, 1000, fetch, checksum=checksum)
        assert raised.value.filename == url
        assert url in str(raised.value)
        assert copies(tmp_path) == temporaries(tmp_path) == []
        stats = cache.stats()
        assert stats["bytes_used"] == stats["bytes_reserved"] == stats["misses"] == 0
        good = hashlib.md5(content(url, 1000)).hexdigest()
        with cache.use(url, 1000, wrong_size(0), checksum=etag_checksum(f'"{good}"')) as path:
            assert Path(path).read_bytes() == content(url, 1000)


def test_a_failing_fetch_releases_its_reservation(tmp_path) -> None:
    def broken(url: str, file) -> None:
        file.write(b"x" * 10)
        raise ConnectionResetError(f"{url}: reset")

    with ShardCache(tmp_path, OWN + 100) as cache:
        with pytest.raises(ConnectionResetError):
            cache.get("mem://x", 100, broken)
        assert cache.stats()["bytes_reserved"] == 0
        assert temporaries(tmp_path) == []
        with pytest.raises(CacheFullError, match="101 bytes are more than the cache's max_bytes"):
            cache.get("mem://y", 101, broken)


def test_an_index_log_grown_past_its_peak_is_cut_before_a_shard_is_refused(tmp_path) -> None:
    """Another process's read held open keeps every commit's checkpoint
    from emptying the index's write-ahead log, which counts against
    ``max_bytes``: once the read is over, a shard that fits the cache is
    served, the log cut back first, not refused for it."""
    index = tmp_path / ".fastio-cache" / "index.sqlite"
    with ShardCache(tmp_path, OWN + 1000) as cache:
        with cache.use("mem://a", 10, serve("mem://a", 10)):
            pass
        reader = sqlite3.connect(index)
        writer = sqlite3.connect(index, isolation_level=None)
        try:
            writer.execute("PRAGMA wal_autocheckpoint=0")
            reader.execute("BEGIN")
            reader.execute("SELECT * FROM entries").fetchall()  # a snapshot the log must keep
            for _ in range(200):  # a page a commit
                writer.execute("UPDATE clock SET tick = tick + 1")
        finally:
            reader.close()
            writer.close()
        log = Path(f"{index}-wal").stat().st_size
        assert log > OWN  # the cache's own files are past their reserve
        with cache.use("mem://b", 1000, serve("mem://b", 1000)) as path:
            assert Path(path).read_bytes() == content("mem://b", 1000)
        assert Path(f"{index}-wal").stat().st_size < log
        assert folder_bytes(tmp_path) <= OWN + 1000


def test_commits_give_way_to_a_checkpoint_waiting_for_the_write_lock(tmp_path) -> None:
    """Another process's checkpoint, once it holds the checkpoint lock, polls
    for the write lock; commits taken meanwhile would grow the index's log,
    which counts against ``max_bytes``. They wait for the checkpoint instead:
    the log stays within its peak, and every shard is served."""
    index = tmp_path / ".fastio-cache" / "index.sqlite"
    sizes = [100 + number for number in range(100)]
    logs: list[int] = []

    def log_bytes() -> None:
        with contextlib.suppress(FileNotFoundError):
            logs.append(Path(f"{index}-wal").stat().st_size)

    def fetch_and_look(url: str, file) -> None:
        log_bytes()  # the download's reservation committed
        serve(url, sizes[int(url.rsplit("-", 1)[1])])(url, file)

    with ShardCache(tmp_path, OWN + sum(sizes)) as cache:
        with cache.use("mem://first", 10, serve("mem://first", 10)):
            pass
        writer = sqlite3.connect(index, isolation_level=None)
        checkpointer = sqlite3.connect(
            index, timeout=30, isolation_level=None, check_same_thread=False
        )
        checkpoint = threading.Thread(
            target=lambda: checkpointer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        )
        try:
            writer.execute("BEGIN IMMEDIATE")  # the checkpoint waits for this write lock
            checkpoint.start()
            time.sleep(0.5)  # its polls for the lock now come 100 ms apart
            writer.execute("ROLLBACK")
            for number, size in enumerate(sizes):
                url = f"mem://shard-{number}"
                with cache.use(url, size, fetch_and_look) as path:
                    assert Path(path).read_bytes() == content(url, size)
                log_bytes()
            checkpoint.join(timeout=60)
            assert not checkpoint.is_alive()
        finally:
            writer.close()
        checkpointer.close()
    assert len(logs) == 2 * len(sizes)
    assert max(logs) <= WAL_PEAK
    assert folder_bytes(tmp_path) <= OWN + sum(sizes)


def test_another_etag_replaces_the_copy(tmp_path) -> None:
    with ShardCache(tmp_path, OWN + 100) as cache:
        with cache.use("mem://v", 10, lambda u, f: f.write(b"0" * 10), etag="v1") as path:
            assert Path(path).read_bytes() == b"0" * 10
        with cache.use("mem://v", 10, lambda u, f: f.write(b"1" * 10), etag="v2") as path:
            assert Path(path).read_bytes() == b"1" * 10
        assert cache.stats()["misses"] == 2


def test_a_copy_cut_short_on_disk_is_fetched_again(tmp_path) -> None:
    """Not served as a hit (whose reads would fail, or be skipped, every run)."""
    url, size = "mem://cut", 4096
    with ShardCache(tmp_path, OWN + 2 * size) as cache:
        with cache.use(url, size, serve(url, size)) as path:
            assert Path(path).read_bytes() == content(url, size)
        os.truncate(path, size // 3)
        with cache.use(url, size, serve(url, size)) as again:
            assert Path(again).read_bytes() == content(url, size)
        assert (cache.stats()["misses"], cache.stats()["hits"]) == (2, 0)


def test_etag_checksum_takes_only_md5_etags() -> None:
    assert etag_checksum('"' + "A" * 32 + '"') == "md5:" + "a" * 32
    assert etag_checksum('"' + "a" * 32 + '-3"') is None  # multipart
    assert etag_checksum('W/"' + "a" * 32 + '"') is None
    assert etag_checksum('"5f1e-6a2b"') is None


# ---- the object --------------------------------------------------------------------------


def test_placement_chooses_the_directory(tmp_path) -> None:
    asked = []

    def placement(key: str, size: int, kind: str, reuse: float) -> str:
        asked.append((len(key), size, kind, reuse))
        return str(tmp_path / "hdd")

    folders = [tmp_path / "ssd", tmp_path / "hdd"]
    with ShardCache(folders, OWN + 100, placement=placement) as cache:
        path = cache.get("mem://p.tar", 10, serve("mem://p.tar", 10))
        assert Path(path).parent == tmp_path / "hdd"
        assert path.endswith(".tar")
        assert asked == [(40, 10, "shard", 1.0)]  # no plan: one read
        cache.release("mem://p.tar")
        # With a plan, the placement hears how many reads of the copy it holds.
        cache.plan(["mem://r", "mem://p.tar", "mem://r", "mem://s", "mem://r"])
        cache.get("mem://r", 10, serve("mem://r", 10))
        cache.release("mem://r")
        assert asked[-1] == (40, 10, "shard", 3.0)
        cache.placement = lambda key, size, kind, reuse: str(tmp_path)
        with pytest.raises(ValueError, match="not one of the cache's directories"):
            cache.get("mem://q", 10, serve("mem://q", 10))
        assert cache.stats()["bytes_reserved"] == 0


def test_pickled_cache_shares_the_folder(tmp_path) -> None:
    with ShardCache(tmp_path, OWN + 100, "lru") as cache:
        cache.get("mem://s", 10, serve("mem://s", 10))
        copy = pickle.loads(pickle.dumps(cache))
        assert (copy.max_bytes, copy.policy) == (OWN + 100, "lru")
        assert copy.get("mem://s", 10, serve("mem://s", 10)) == cache.get(
            "mem://s", 10, serve("mem://s", 10)
        )
        assert copy.stats()["hits"] == 1
        copy.close()


def get_in_child(cache: ShardCache, url: str) -> None:
    with cache.use(url, 10, serve(url, 10)) as path:
        assert Path(path).read_bytes() == content(url, 10)
    assert cache.stats()["misses"] == 1  # the parent's counts stay the parent's
    cache.get(url, 10, serve(url, 10))  # a pin the child's death must give back


# A DataLoader worker is a forked child; the pytest process has threads (other tests' pools).
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_uses_the_cache_as_its_own(tmp_path) -> None:
    with ShardCache(tmp_path, OWN + 1000) as cache:
        cache.get("mem://parent", 10, serve("mem://parent", 10))
        child = multiprocessing.get_context("fork").Process(
            target=get_in_child, args=(cache, "mem://child")
        )
        child.start()
        child.join()
        assert child.exitcode == 0
        with ShardCache(tmp_path, OWN + 1000) as other:  # reaps the dead child, not the parent
            stats = other.stats()
            assert (stats["shards_cached"], stats["bytes_pinned"]) == (2, 10)
        cache.release("mem://parent")
        assert cache.stats()["misses"] == 1


def test_max_bytes_must_agree_while_open_and_a_lower_limit_trims(tmp_path) -> None:
    with ShardCache(tmp_path, OWN + 100) as cache:
        for name in "abc":
            with cache.use(f"mem://{name}", 30, serve(f"mem://{name}", 30)):
                pass
        with pytest.raises(ValueError, match=f"open elsewhere with max_bytes {OWN + 100}, not "):
            ShardCache(tmp_path, OWN + 50)
    with ShardCache(tmp_path, OWN + 50) as cache:
        assert cache.stats()["bytes_used"] == disk_bytes(tmp_path) == 30


def test_errors_pickle_and_are_oserrors() -> None:
    for error in (CacheFullError("u", "m"), CacheIntegrityError("u", "m"),
                  CacheTimeoutError("u", "m")):  # fmt: skip
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error)
        assert str(again) == str(error)
        assert isinstance(error, OSError)
        assert error.filename == "u"
    assert isinstance(CacheTimeoutError("u", "m"), TimeoutError)


def test_bad_arguments(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        ShardCache(tmp_path, 0)
    with pytest.raises(ValueError, match="policy"):
        ShardCache(tmp_path, OWN + 10, "fifo")  # type: ignore[arg-type]
    with ShardCache(tmp_path, OWN + 10) as cache, pytest.raises(ValueError, match="checksum"):
        cache.get("mem://z", 1, serve("mem://z", 1), checksum="nope")
    assert cache.stats()["shards_cached"] == 0  # a closed cache opens anew when used
    cache.close()


def test_a_full_filesystem_fails_downloads_naming_the_shard(small_filesystem) -> None:
    folder, size = small_filesystem / "cache", 300_000  # three fill the 1 MiB filesystem
    with ShardCache(folder, 64 << 20, wait_timeout=5) as cache:
        urls = [f"s3://bucket/train-{number}.tar" for number in range(4)]
        with pytest.raises(CacheFullError, match=r"filesystem (has no room|is full)") as raised:
            for url in urls:
                with cache.use(url, size, serve(url, size)) as path:
                    assert Path(path).read_bytes() == content(url, size)
        assert raised.value.filename in urls[2:]
        # The failed download's file and reservation go at the next step, even
        # should the index have been unable to record its end.
        with cache.use("s3://bucket/small.tar", 1000, serve("s3://bucket/small.tar", 1000)):
            assert cache.stats()["bytes_reserved"] == 0
            assert cache.stats()["shards_cached"] == 3
        assert temporaries(folder) == []

        fill(small_filesystem)  # now the index cannot grow either
        url, failures = "s3://bucket/train-9.tar", []
        for _ in range(3):  # one may fit what a page had left
            try:
                cache.get(url, 5000, serve(url, 5000))
            except CacheFullError as error:
                failures.append(error.filename)  # an SQLite error would not name the shard
        assert failures
        assert set(failures) == {url}
        os.remove(small_filesystem / "filler")
        with cache.use(url, 5000, serve(url, 5000)) as path:  # room again: nothing left behind
            assert Path(path).read_bytes() == content(url, 5000)
        assert cache.stats()["bytes_reserved"] == 0
        assert temporaries(folder) == []

    fill(small_filesystem)
    with pytest.raises(CacheFullError, match=r"its index .* cannot be written"):
        ShardCache(small_filesystem / "other", 64 << 20).stats()


def test_a_cache_dropped_unclosed_lets_go_of_its_owner_lock(tmp_path) -> None:
    """A cache collected without close() (a dataset dropped in a loop) lets go
    of its claim: its lock file goes and its descriptor closes, rather than
    counting as a live owner until the process exits."""
    import gc

    folder = tmp_path / "cache"

    def owners() -> list[str]:
        return sorted(os.listdir(folder / ".fastio-cache" / "owners"))

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    ShardCache(str(folder), 1 << 30).close()  # its folders made once
    before, fds = owners(), descriptors()
    for _ in range(5):
        cache = ShardCache(str(folder), 1 << 30)
        assert len(owners()) == len(before) + 1
        del cache
        gc.collect()
    assert owners() == before
    assert descriptors() <= fds
