"""EpochCursor: where one participant's iteration stands, and the one writer of it.

The *position* counts the samples of the participant's epoch sequence that
have been passed, delivered or lost to a failure: because the order is a pure
function of the plan, ``(epoch, position)`` is the whole resume state. The
cursor also counts the samples delivered in this process, and holds a saved
state until the next iteration begins from it. Everything that moves the
position goes through its methods: samples one at a time, batches, runs a
failure lost, and jumps to another participant's part (work stealing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastio.plan._participant import Participant

__all__ = ["EpochCursor", "Start"]


@dataclass(frozen=True)
class Start:
    """Where an iteration begins: the epoch, the position in it, and the rest
    of the saved state it resumes from (None when it starts afresh)."""

    epoch: int
    position: int
    saved: dict[str, Any] | None = None


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
        self._resume: tuple[Participant, Start] | None = None

    # ---- between iterations ------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next iteration reads ``epoch`` (from its start)."""
        self.epoch = int(epoch)
        self.running = False
        self._resume = None

    def resume(self, saved_by: Participant, start: Start) -> None:
        """The next iteration continues a saved one: ``start`` as ``saved_by`` left it."""
        self.epoch = start.epoch
        self.running = False
        self._resume = (saved_by, start)

    @property
    def pending(self) -> Start | None:
        """The saved start the next iteration will take, if any."""
        return None if self._resume is None else self._resume[1]

    def begin(self, participant: Participant) -> Start:
        """Start an iteration as ``participant``: the saved start if there is
        one, else the epoch's beginning. Raises ValueError when the state was
        saved by another participant (the order would differ)."""
        start = Start(self.epoch, 0)
        if self._resume is not None:
            saved_by, start = self._resume
            if saved_by != participant:
                raise ValueError(
                    f"state was saved by {saved_by.describe()}; resuming as "
                    f"{participant.describe()} would change the order (resume with the same "
                    "world size and number of workers)"
                )
            self._resume = None
        self.participant = participant
        self.epoch, self.position, self.running = start.epoch, start.position, True
        return start

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
