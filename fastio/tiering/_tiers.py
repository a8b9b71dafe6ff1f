"""Tiers: named directories, the medium behind each, a byte budget and a measured profile.

The medium is read from the block device the directory's filesystem sits on:
``/sys/dev/block/MAJ:MIN`` leads to the device, a partition to its disk, whose
``queue/rotational`` says spinning (``hdd``) or not (``ssd``); tmpfs and ramfs
are ``ram``. Virtual machines often report virtual disks as rotational whatever
backs them, so the kind can be given instead (``Tier(..., media="ssd")``).

The profile (random 4 KiB reads per second, sequential MB/s) is a quick probe
of a scratch file in the tier, its pages dropped from the page cache with
``posix_fadvise`` so the device answers; it is cached on disk per device
(``~/.cache/fastio/tier-profiles.json``) because a device's speed does not
change from one run to the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["MEDIA", "Media", "Profile", "Tier", "device_of", "media_kind", "probe"]

Media = Literal["ram", "ssd", "hdd"]
MEDIA: tuple[Media, ...] = ("ram", "ssd", "hdd")
"""Fastest first: the order tiers are filled in."""
_MEMORY_FILESYSTEMS = {"tmpfs", "ramfs"}
_PROBE_BYTES = 16 << 20
_RANDOM_READ = 4096


@dataclass(frozen=True)
class Profile:
    """What a probe measured on a tier's device."""

    random_read_iops: float
    sequential_mb_s: float
    device: str

    def as_dict(self) -> dict[str, float | str]:
        return {"random_read_iops": self.random_read_iops,
                "sequential_mb_s": self.sequential_mb_s, "device": self.device}  # fmt: skip


@dataclass(frozen=True)
class Tier:
    """A directory intermediate files may go to, at most ``capacity`` bytes of them.

    ``media`` left out is detected (:func:`media_kind`). Raises ValueError for
    an empty name, a capacity below one byte or an unknown media kind.
    """

    name: str
    path: str
    capacity: int
    media: Media = field(default="ssd")
    detected: bool = True

    def __init__(
        self, name: str, path: str | os.PathLike[str], capacity: int, media: Media | None = None
    ) -> None:
        if not name:
            raise ValueError("a tier needs a name")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"tier {name!r}: capacity must be a positive byte count, "
                             f"not {capacity!r}")  # fmt: skip
        if media is not None and media not in MEDIA:
            raise ValueError(f"tier {name!r}: media must be one of {', '.join(MEDIA)}, "
                             f"not {media!r}")  # fmt: skip
        folder = os.path.abspath(os.fspath(path))
        os.makedirs(folder, exist_ok=True)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "path", folder)
        object.__setattr__(self, "capacity", capacity)
        object.__setattr__(self, "media", media or media_kind(folder))
        object.__setattr__(self, "detected", media is None)

    @property
    def rank(self) -> int:
        """0 for the fastest kind of medium."""
        return MEDIA.index(self.media)


def _mount_of(path: str) -> tuple[str, str]:
    """(filesystem type, mount point) of the mount holding ``path``."""
    best, kind = "", ""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            fstype = fields[fields.index("-") + 1]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fstype
    return kind, best


def device_of(path: str | os.PathLike[str]) -> str:
    """``"MAJ:MIN"`` of the filesystem holding ``path``."""
    stat = os.stat(path)
    return f"{os.major(stat.st_dev)}:{os.minor(stat.st_dev)}"


def media_kind(path: str | os.PathLike[str]) -> Media:
    """``ram`` (tmpfs, ramfs), ``hdd`` (a rotational disk) or ``ssd``.

    A device sysfs does not describe (network and overlay filesystems, most
    containers' virtual ones) counts as ``ssd``: the fast guess errs towards
    filling the tier, and ``Tier(media=...)`` overrides it.
    """
    folder = os.fspath(path)
    if _mount_of(folder)[0] in _MEMORY_FILESYSTEMS:
        return "ram"
    node = Path("/sys/dev/block", device_of(folder))
    if not node.exists():
        return "ssd"
    device = node.resolve()
    if (device / "partition").exists():  # a partition's queue is its disk's
        device = device.parent
    try:
        rotational = (device / "queue" / "rotational").read_text().strip()
    except OSError:
        return "ssd"
    return "hdd" if rotational == "1" else "ssd"


def probe(tier: Tier, *, refresh: bool = False, seconds: float = 0.3) -> Profile:
    """The tier's device profile, measured once per device and cached on disk.

    Writes a 16 MiB scratch file in the tier (removed at once), reads it
    sequentially, then at random 4 KiB offsets for about ``seconds``. Raises
    OSError where the tier cannot be written.
    """
    device = device_of(tier.path)
    key = f"{device}:{tier.media}"
    cached = _load_profiles()
    if not refresh and key in cached:
        entry = cached[key]
        return Profile(float(entry["random_read_iops"]), float(entry["sequential_mb_s"]), device)
    profile = _measure(tier.path, device, seconds)
    cached[key] = profile.as_dict()
    with contextlib.suppress(OSError):  # a read-only home still gets its profile, uncached
        where = _profile_cache()
        where.parent.mkdir(parents=True, exist_ok=True)
        temp = where.with_suffix(f".tmp{os.getpid()}")
        temp.write_text(json.dumps(cached, indent=1))
        os.replace(temp, where)
    return profile


def _profile_cache() -> Path:
    """Where measured profiles are kept: ``$XDG_CACHE_HOME`` (unset or empty:
    ``~/.cache``) as it is when asked, not as it was at import."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "fastio",
                "tier-profiles.json")  # fmt: skip


def _load_profiles() -> dict[str, dict[str, float | str]]:
    try:
        data = json.loads(_profile_cache().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _measure(folder: str, device: str, seconds: float) -> Profile:
    path = os.path.join(folder, f".fastio-probe-{os.getpid()}")
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        for offset in range(0, _PROBE_BYTES, len(block)):
            os.pwrite(fd, block, offset)
        os.fsync(fd)  # written pages are clean only once on disk; only clean pages drop
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        started = time.perf_counter()
        for offset in range(0, _PROBE_BYTES, len(block)):
            os.pread(fd, len(block), offset)
        sequential = _PROBE_BYTES / 1e6 / max(time.perf_counter() - started, 1e-9)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        slots = _PROBE_BYTES // _RANDOM_READ
        # A fixed stride through the file visits each block once: no page-cache repeats.
        stride, slot, reads = 7919, 0, 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and reads < slots:
            slot = (slot + stride) % slots
            os.pread(fd, _RANDOM_READ, slot * _RANDOM_READ)
            reads += 1
        iops = reads / max(time.perf_counter() - started, 1e-9)
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    return Profile(iops, sequential, device)
