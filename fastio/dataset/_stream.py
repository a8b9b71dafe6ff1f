"""A first epoch streamed: whole shards read once, indexed on the way.

The participant's shards (:func:`fastio.plan._stream.stream_shards`) are read
as one pipelined reader stream, each from its first byte; the format finds
the samples and their byte ranges in one pass
(:meth:`fastio.formats._records.RecordFormat.scanned`). A shard read whole
leaves its index (``on_indexed``), so later epochs and later datasets plan by
samples. Damage costs the damaged sample (counted); the pass goes on past it
where the format can find the next sample (TFRecord), else at the next shard.
Shuffled, samples wait in stream windows
(:func:`fastio.plan._windows.window_budget`) and leave in each window's
permutation; unshuffled, they leave as they are found, the windows counted
for the state alone.

The resume state is the window the position falls in (its number, the shard
and byte offset and sample number it starts at) and how many of its samples
were passed: a resumed pass reads from that window's first byte (from the
shard's start where it is compressed) and skips what was delivered.
"""

from __future__ import annotations

from itertools import chain, groupby
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError
from fastio.dataset._reads import Guarded
from fastio.formats._compression import codec_for
from fastio.plan._windows import permutation, window_budget
from fastio.reader._ranges import ByteRange, Shard

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from fastio.dataset._policy import ErrorPolicy
    from fastio.formats._records import RecordFormat
    from fastio.plan._cursor import EpochCursor
    from fastio.plan._participant import Participant
    from fastio.reader._reader import Reader
    from fastio.spec._dataset import ShuffleSettings

__all__ = ["StreamPass", "check_stream_state"]

# (shard ordinal in the pass, its URL's index, sample number, start, end, sample)
_Located = tuple[int, int, int, int, Any]


def check_stream_state(state: object) -> dict[str, int]:
    """The ``"stream"`` part of a saved state, checked. Raises ValueError."""
    keys = ("window", "shard", "offset", "sample", "passed")
    if not isinstance(state, dict) or not all(isinstance(state.get(k), int) for k in keys):
        raise ValueError(f"the state's 'stream' part is malformed: {state!r}")
    return {key: int(state[key]) for key in keys}


class StreamPass:
    """One participant's streamed pass over ``shards`` (indexes into ``urls``);
    its windows hold at most ``memory`` bytes where that is less than the
    shuffle buffer (``shuffle_memory``: no window of a streamed pass spills)."""

    def __init__(
        self,
        shards: Sequence[int],
        urls: Sequence[str],
        shard_format: RecordFormat,
        reader: Callable[[], Reader],
        policy: ErrorPolicy,
        cursor: EpochCursor,
        shuffle: ShuffleSettings,
        epoch: int,
        participant: Participant,
        resume: dict[str, int] | None,
        on_indexed: Callable[[int, Any, bool], None],
        memory: int | None = None,
    ) -> None:
        self.shards = list(shards)
        self.urls = urls
        self.format = shard_format
        self.reader = reader
        self.policy = policy
        self.cursor = cursor
        self.shuffle = shuffle
        self.epoch = epoch
        self.participant = participant
        self.on_indexed = on_indexed
        self.memory = shuffle.buffer if memory is None else min(shuffle.buffer, memory)
        state = resume or {"window": 0, "shard": 0, "offset": 0, "sample": 0, "passed": 0}
        self.window = state["window"]
        self.start = (state["shard"], state["offset"], state["sample"])  # the window's first
        self.skip = state["passed"]  # of the first window, delivered before the resume
        self.next_position = cursor.position - self.skip  # where the next window begins
        # Windows handed out lately: (first position, number, start). Batches may
        # still hold rows of one when the next is read, so a state names the
        # window the cursor is in, not the last one read.
        self.recent: list[tuple[int, int, tuple[int, int, int]]] = [
            (self.next_position, self.window, self.start)]  # fmt: skip

    def state(self) -> dict[str, int]:
        """Where the pass is: the window the position is in, and the samples of
        it passed."""
        position = self.cursor.position
        first, window, (shard, offset, sample) = next(
            (record for record in reversed(self.recent) if record[0] <= position),
            self.recent[0])  # fmt: skip
        return {"window": window, "shard": shard, "offset": offset, "sample": sample,
                "passed": position - first}  # fmt: skip

    def items(self, columnar: bool) -> Iterator[Any]:
        """Samples in delivery order; or, ``columnar``, a unit per window as
        :func:`fastio.dataset._batching.rebatch` takes them. Shuffled samples
        wait encoded where the format holds them so (made as delivered)."""
        if not columnar and not self.shuffle.enabled:
            yield from self._in_order()
            return
        window: list[Any] = []
        held = 0
        following = self.start
        encoded = not columnar and self.shuffle.enabled and self.format.encodes
        for ordinal, number, start, end, sample in self._located(encoded):
            if not window:
                self.start = (ordinal, start, number)
            window.append((sample, ordinal) if encoded else sample)
            held += end - start
            following = (ordinal, end, number + 1)
            if held >= window_budget(self.window, self.memory):
                yield from self._deliver(window, columnar, encoded)
                window, held = [], 0
                self.start = following
        if window:
            yield from self._deliver(window, columnar, encoded)

    def _in_order(self) -> Iterator[Any]:
        """Unshuffled samples as they are found. A window's order is then the
        order its samples are found in, so none waits for the rest of its
        window: nothing is held, and each sample's memory is free again before
        the next one is made. Windows are still counted, for the state."""
        skip, self.skip = self.skip, 0
        held = found = first = 0
        for ordinal, number, start, end, sample in self._located():
            if not found:
                self.start = (ordinal, start, number)
                first = self._open_window()
            found += 1
            held += end - start
            if found > skip:
                self.cursor.deliver_one()
                yield sample
            del sample
            if held >= window_budget(self.window, self.memory):
                self._close_window(first, found)
                held = found = skip = 0
        if found:
            self._close_window(first, found)

    def _open_window(self) -> int:
        """The window starting at ``self.start``, recorded for :meth:`state`;
        returns its first position."""
        first = self.next_position
        self.recent = [*self.recent[-3:], (first, self.window, self.start)]
        return first

    def _close_window(self, first: int, count: int) -> None:
        """The window from position ``first`` ended with ``count`` samples."""
        self.next_position = first + count
        self.window += 1

    def _deliver(self, window: list[Any], columnar: bool, encoded: bool = False
                 ) -> Iterator[Any]:  # fmt: skip
        skip, self.skip = self.skip, 0
        order: Any = range(len(window))
        if self.shuffle.enabled:
            who = self.participant
            order = permutation(len(window), self.shuffle.seed, self.epoch, who.rank,
                                who.worker, self.window)  # fmt: skip
        first = self._open_window()
        self._close_window(first, len(window))
        if columnar:
            rows = [window[i] for i in order[skip:]]
            if rows:
                begin = first + skip
                batch = self.format.batch_of(rows)
                yield batch, range(len(rows)), range(begin, begin + len(rows)), self.next_position
            return
        for slot in order[skip:]:
            sample = window[slot]
            window[slot] = None  # the window shrinks as it is delivered
            if encoded:
                item, ordinal = sample
                url = self.urls[self.shards[ordinal]]
                try:
                    sample = self.format.finish(item, url)
                except DecodeError as error:  # framed and indexed, yet not a sample
                    self.policy.failure(error, 1, "damaged record skipped")
                    self.cursor.pass_over(1)
                    continue
            self.cursor.deliver_one()
            yield sample

    def _located(self, encoded: bool = False) -> Iterator[_Located]:
        """Every sample of the pass from the resume point on, with where it is
        (``encoded``: as the format holds it for a window)."""
        ordinal, offset, number = self.start
        shard = _ShardRead(from_start=offset == 0 and number == 0)
        while ordinal < len(self.shards):
            url = self.urls[self.shards[ordinal]]
            compressed = codec_for(url) is not None
            skip_samples = number if compressed and (offset or number) else 0
            begin = 0 if compressed else offset
            # The later shards as the reader comes to them: a pass may have thousands.
            later = (Shard((ByteRange(self.urls[s]),)) for s in self.shards[ordinal + 1 :])
            # Scanned sample by sample, batches too.
            chunks = self.reader().stream(chain([Shard((ByteRange(url, begin),))], later),
                                          mapped=self.format.maps_cached(False, None))  # fmt: skip
            guarded = Guarded(chunks, cut=True)
            again: tuple[int, int, int] | None = None  # the same shard, past damage
            try:
                for position, chunks in groupby(guarded, key=attrgetter("shard")):
                    here = ordinal + position
                    if position:
                        shard = _ShardRead(from_start=True)
                    count = number if position == 0 else 0
                    stepped = 0  # damaged records stepped over, for the records' numbers
                    shard_url = self.urls[self.shards[here]]
                    try:
                        for start, end, sample in self.format.scanned(chunks, shard_url,
                                                                      encoded):  # fmt: skip
                            if isinstance(sample, DecodeError):  # stepped over, in its place
                                if not skip_samples:  # (else counted before the resume)
                                    shard.damaged = True
                                    what = f"shard {shard_url} is damaged"
                                    damaged = sample.numbered(count + stepped)
                                    self.policy.failure(damaged, sample.lost, what)
                                stepped += 1
                                continue
                            if skip_samples:
                                skip_samples -= 1
                                continue
                            shard.starts.append(start)
                            shard.ends.append(end)
                            yield here, count, start, end, sample
                            count += 1
                    except OSError as error:
                        if error is not guarded.failure:
                            raise
                        break  # its read failed: said below, after the samples before it
                    except DecodeError as error:
                        shard.damaged = True
                        again = self._failed(error.numbered(count + stepped), here, count)
                        if again is None:  # nothing more of it can be found: the next one
                            self._finish(here, shard)
                            again = (here + 1, 0, 0)
                            shard = _ShardRead(from_start=True)
                        break
                    if guarded.failed_at == position:
                        break
                    self._finish(here, shard)
            finally:
                guarded.close()
            if again is not None:
                ordinal, offset, number = again
                continue
            if guarded.failure is not None and guarded.failed_at is not None:
                failed = ordinal + guarded.failed_at
                failed_url = self.urls[self.shards[failed]]
                resumed_inside = guarded.failed_at == 0 and begin > 0
                if guarded.untouched and not resumed_inside:  # not one byte of it
                    self.policy.shard_left_out(guarded.failure, failed_url)
                else:
                    self.policy.shard_cut(guarded.failure, failed_url)
                ordinal, offset, number = failed + 1, 0, 0
                shard = _ShardRead(from_start=True)
                continue
            return

    def _failed(self, error: DecodeError, ordinal: int, count: int) -> tuple[int, int, int] | None:
        """Put damage through the policy (the damaged sample is lost); where the
        shard goes on past it, where the format can find the next sample."""
        url = self.urls[self.shards[ordinal]]
        self.policy.failure(error, error.lost, f"shard {url} is damaged")
        locator = self.format.locator()
        if locator.resync is not None and codec_for(url) is None:
            skip_to = locator.resync(self.reader(), url, error)
            if skip_to is not None and skip_to > error.offset:  # only forward: no loop
                return ordinal, skip_to, count + 1
        return None

    def _finish(self, ordinal: int, shard: _ShardRead) -> None:
        """A shard read to its end: its index where it was read from its start
        (kept where it is intact; this dataset's alone where damaged)."""
        if shard.from_start:
            ranges = (np.asarray(shard.starts, np.uint64), np.asarray(shard.ends, np.uint64))
            self.on_indexed(self.shards[ordinal], ranges, shard.damaged)


class _ShardRead:
    """What a pass found of one shard so far."""

    __slots__ = ("damaged", "ends", "from_start", "starts")

    def __init__(self, from_start: bool) -> None:
        self.from_start = from_start
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.damaged = False
