"""EpochCursor: where one participant's iteration stands, and the one writer of it.

The *position* counts the samples of the participant's part of the epoch that
have been passed, delivered or lost to a failure: because the order is a pure
function of the plan, ``(epoch, position)`` is the whole resume state. The
cursor also counts the samples delivered in this process, and holds a saved
state until an iteration begins from it (which epoch a pass reads is the
:class:`~fastio.plan._ledger.EpochLedger`'s to say). Everything that moves the
position goes through its methods: samples one at a time, batches, runs a
failure lost, and jumps to another participant's part (work stealing).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fastio.spec._records import record

if TYPE_CHECKING:
    from fastio.plan._participant import Participant

__all__ = ["EpochCursor", "Start"]


@record(frozen=True)
class Start:
    """Where an iteration begins: the epoch and the position in its part."""

    epoch: int
    position: int


class EpochCursor:
    """The epoch of the next iteration, and the position and delivered count of
    the running one (see the module)."""

    __slots__ = ("_resume", "delivered", "epoch", "participant", "position", "running")

    def __init__(self) -> None:
        self.epoch = 0
        """The running iteration's epoch, or the next one's between iterations."""
        self.position = 0
        self.delivered = 0
        """Samples this process delivered, over all its iterations."""
        self.running = False
        self.participant: Participant | None = None
        self._resume: tuple[dict[str, Any], int, int, int] | None = None

    # ---- between iterations ------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next iteration reads ``epoch``: from its start, unless a loaded
        state of that epoch waits (the loop that set the epoch resumes it)."""
        if self._resume is not None and self._resume[1] != int(epoch):
            self._resume = None
        self.epoch = int(epoch)
        self.running = False

    def resume(self, saved: dict[str, Any], epoch: int, token: int) -> None:
        """An iteration may continue the saved state ``saved`` (of ``epoch``);
        ``token`` names this load (see :class:`~fastio.plan._ledger.EpochLedger`)."""
        self.epoch = epoch
        self.running = False
        self._resume = (saved, epoch, token, os.getpid())

    @property
    def pending(self) -> dict[str, Any] | None:
        """The saved state a next iteration may continue, if any."""
        return None if self._resume is None else self._resume[0]

    def pending_resume(self) -> tuple[int, int, bool] | None:
        """``(token, epoch, loaded in this process)`` of the pending state."""
        if self._resume is None:
            return None
        _, epoch, token, pid = self._resume
        return token, epoch, pid == os.getpid()

    def begin(self, participant: Participant, start: Start) -> None:
        """An iteration begins as ``participant`` at ``start``; a pending state
        is used up (taken, or outdated by this iteration)."""
        self._resume = None
        self.participant = participant
        self.epoch, self.position, self.running = start.epoch, start.position, True

    # ---- while delivering --------------------------------------------------------------

    def deliver_one(self) -> None:
        """One sample delivered."""
        self.position += 1
        self.delivered += 1

    def pass_over(self, count: int) -> None:
        """``count`` samples passed without delivering them (a failure lost them)."""
        self.position += count

    def deliver_batch(self, count: int, position: int) -> None:
        """A batch of ``count`` samples delivered, the position after it ``position``."""
        self.delivered += count
        self.position = position

    def move_to(self, position: int) -> None:
        """Continue from ``position`` (the end of a window, or another part's unit)."""
        self.position = position
