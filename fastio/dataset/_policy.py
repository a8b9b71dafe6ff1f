"""ErrorPolicy: what a failure does under ``on_error``, and what it cost.

``"raise"`` raises the error as it is (it names the URL, byte offset and
sample); ``"skip"`` goes on and counts the samples lost; ``"warn"`` does the
same with a :class:`~fastio.SkippedSamplesWarning` per failure. The policy is
the one writer of the counts of skipped samples and shards.
"""

from __future__ import annotations

import logging
import warnings

from fastio._errors import SkippedSamplesWarning
from fastio.spec._dataset import ON_ERROR, OnError

__all__ = ["ErrorPolicy"]

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

    @property
    def tolerates(self) -> bool:
        return self.on_error != "raise"

    def failure(self, error: Exception, lost: int | None, what: str) -> None:
        """``error`` cost ``lost`` samples (None: unknown): raised under
        ``"raise"``, else counted, kept and (``"warn"``) warned about."""
        if self.on_error == "raise":
            raise error
        if lost:
            self.skipped += lost
        text = f"{error} ({what}" + (f"; {lost} samples skipped)" if lost else ")")
        if len(self.errors) < MAX_KEPT_ERRORS:
            self.errors.append(text)
        if self.on_error == "warn":
            warnings.warn(text, SkippedSamplesWarning, stacklevel=3)
        else:
            log.debug("fastio: %s", text)

    def shard_left_out(self, error: Exception, url: str) -> None:
        """Shard ``url`` cannot be read at all (under skip/warn: it is left out)."""
        if self.on_error != "raise":
            self.shards_skipped += 1
        self.failure(error, None, f"shard {url} is unreadable and left out")

    def shard_cut(self, error: Exception, url: str) -> None:
        """A read of shard ``url`` failed (after its retries) with part of it
        delivered, in a pass that had no index of it: how many samples it
        held past the failure is not known. Under skip/warn the rest of it is
        left out, and it counts among the shards skipped."""
        if self.on_error != "raise":
            self.shards_skipped += 1
        self.failure(error, None, f"shard {url} could not be read to its end; the rest of it "
                                  "is left out")  # fmt: skip

    def iteration_ended(self) -> None:
        """Under ``"skip"``, say once per iteration what was skipped so far."""
        if self.on_error == "skip" and (self.skipped or self.shards_skipped):
            log.warning("fastio: %d samples and %d unreadable shards skipped so far "
                        "(on_error='skip'); see stats()", self.skipped,
                        self.shards_skipped)  # fmt: skip
