"""ErrorPolicy: what a failure does under ``on_error``, and what it cost.

``"raise"`` raises the error as it is (it names the URL, byte offset and
sample); ``"skip"`` goes on and counts the samples lost; ``"warn"`` does the
same with a :class:`~fastio.SkippedSamplesWarning` per failure. The policy is
the one writer of the counts of skipped samples and shards.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import warnings
from typing import TYPE_CHECKING

from fastio._errors import SkippedSamplesWarning
from fastio.shared._mapped import OwnedFile
from fastio.spec._dataset import ON_ERROR, OnError

if TYPE_CHECKING:
    from collections.abc import Container

__all__ = ["ErrorPolicy", "WorkersTally", "place_of"]

log = logging.getLogger("fastio")

MAX_KEPT_ERRORS = 100


class ErrorPolicy:
    """Applies ``on_error`` to failures; counts samples and shards skipped and
    keeps the first :data:`MAX_KEPT_ERRORS` failures' texts."""

    def __init__(self, on_error: OnError) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, not {on_error!r}")
        self.on_error: OnError = on_error
        self.skipped = 0
        self.shards_skipped = 0
        self.errors: list[str] = []
        self.places: set[str] = set()  # of the failures counted (see place_of)
        # DataLoader workers' failures, which the process that made the
        # dataset reads (its stats); a worker's policy adds its own to it.
        self.workers = WorkersTally()
        self.reports = False

    @property
    def tolerates(self) -> bool:
        return self.on_error != "raise"

    def failure(self, error: Exception, lost: int | None, what: str, shards: int = 0,
                place: str | None = None) -> None:  # fmt: skip
        """``error`` cost ``lost`` samples (None: unknown) and ``shards``
        shards: raised under ``"raise"``, else counted, kept and (``"warn"``)
        warned about. ``place``: where the loss is, where not where ``error``
        was met (see :func:`place_of`). Each place counts once, however
        often it is met (each epoch meets a damaged shard's damage again, a
        never-seen shard that cannot be opened is met at open and again by
        the pass that streams it), as the DataLoader workers' tally counts
        it: delivered plus skipped is what the shards hold."""
        if self.on_error == "raise":
            raise error
        place = place_of(error) if place is None else place
        text = f"{error} ({what}" + (f"; {lost} samples skipped)" if lost else ")")
        if place in self.places:
            log.debug("fastio: %s (met before, counted then)", text)
            return
        self.places.add(place)
        if lost:
            self.skipped += lost
        self.shards_skipped += shards
        if len(self.errors) < MAX_KEPT_ERRORS:
            self.errors.append(text)
        if self.reports:
            self.workers.add(place, lost or 0, shards, text)
        if self.on_error == "warn":
            warnings.warn(text, SkippedSamplesWarning, stacklevel=3)
        else:
            log.debug("fastio: %s", text)

    def shard_left_out(self, error: Exception, url: str) -> None:
        """Shard ``url`` cannot be read at all (under skip/warn: it is left out)."""
        self.failure(error, None, f"shard {url} is unreadable and left out", shards=1)

    def shard_cut(self, error: Exception, url: str) -> None:
        """A read of shard ``url`` failed (after its retries) with part of it
        delivered, in a pass that had no index of it: how many samples it
        held past the failure is not known. Under skip/warn the rest of it is
        left out, and it counts among the shards skipped."""
        self.failure(error, None, f"shard {url} could not be read to its end; the rest of it "
                                  "is left out", shards=1)  # fmt: skip

    def iteration_ended(self) -> None:
        """Under ``"skip"``, say once per iteration what was skipped so far."""
        if self.on_error == "skip" and (self.skipped or self.shards_skipped):
            log.warning("fastio: %d samples and %d unreadable shards skipped so far "
                        "(on_error='skip'); see stats()", self.skipped,
                        self.shards_skipped)  # fmt: skip


def place_of(error: Exception) -> str:
    """Where ``error`` is: its shard (URL or file name) and byte offset, as far
    as it says (one line of text)."""
    fields = ("url", "filename", "offset")
    named = [str(value) for field in fields if (value := getattr(error, field, None)) is not None]
    return " ".join(" ".join(named).split()) or " ".join(str(error).split())


class WorkersTally(OwnedFile):
    """What the DataLoader workers of a dataset skipped, for the process that
    made it: its ``stats()`` counts them with its own (a worker's counts die
    with the worker, and a non-persistent worker's with its pass). A shared
    file, named by that process and removed with it, made by the first worker
    that skips: a line per place of damage (a shard, or a byte of one), its
    samples and shards lost and (for the first :data:`MAX_KEPT_ERRORS`) its
    text. Each place counts once, whichever workers found it, however often:
    each worker of each pass indexes a damaged shard anew, and each meets its
    damage."""

    kind = "skips"

    def add(self, place: str, samples: int, shards: int, text: str) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with open(fd, "rb", closefd=False) as lines:
                known = [line.split(b"\t", 3) for line in lines]
            if any(len(line) > 2 and line[2].decode(errors="replace") == place for line in known):
                return
            if len(known) >= MAX_KEPT_ERRORS:
                text = ""
            fields = (str(samples), str(shards), place, " ".join(text.split()))
            os.write(fd, ("\t".join(fields) + "\n").encode())
        finally:
            os.close(fd)

    def read(self, known: Container[str] = ()) -> tuple[int, int, list[str]]:
        """Samples and shards the workers skipped so far, and the texts of
        their failures, but at the places ``known`` (counted already)."""
        samples = shards = 0
        texts: list[str] = []
        with contextlib.suppress(FileNotFoundError), open(self._path, "rb") as lines:
            for line in lines:
                fields = line.rstrip(b"\n").split(b"\t", 3)
                if len(fields) == 4 and fields[2].decode(errors="replace") not in known:
                    samples, shards = samples + int(fields[0]), shards + int(fields[1])
                    if fields[3]:
                        texts.append(fields[3].decode(errors="replace"))
        return samples, shards, texts
