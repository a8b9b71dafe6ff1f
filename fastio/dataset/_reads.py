"""How a dataset's samples are read: reads planned from windows, run through
one reader stream, decoded by the format, failures put through the error
policy."""

from __future__ import annotations

import functools
from itertools import groupby, islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import DecodeError, ShardChangedError, TruncatedFileError, TruncatedShardError
from fastio._native import Read, whole_reads  # native: a plan makes thousands
from fastio.dataset._policy import place_of
from fastio.formats._compression import codec_for
from fastio.reader._ranges import Shard

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from fastio.dataset._policy import ErrorPolicy
    from fastio.formats._layout import Layout, ShardFormat
    from fastio.plan._windows import Window
    from fastio.reader._reader import Reader

__all__ = ["SKIPPED", "Read", "ReadSamples", "SampleReads", "located"]


class _Skipped:
    """The place of a damaged record that the format stepped over, in a
    read's decoded samples (or parts: it counts as one row)."""

    num_rows = 1

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()
_END = object()


class ReadSamples:
    """One read's samples (:data:`SKIPPED` in a damaged record's place), in
    order, decoded as they are taken: iterable once. ``count`` is the places
    they filled so far. None is held beyond the sample handed out: a read of
    a whole shard decoded into a list first held megabytes of fresh payload
    copies, which cost the cache misses and page faults of a working set
    that size, more than the decoding itself
    (``benchmarks/bench_tfrecord_cpu.py``). In columnar mode, the same for
    the read's parts (tables, arrays or samples not copied yet), ``count``
    their rows: a part comes as soon as its bytes are decoded, and stored
    order hands out a batch before the rest of its read is in."""

    __slots__ = ("count", "samples")

    def __init__(self) -> None:
        self.count = 0
        self.samples: Iterator[Any] = iter(())

    def __iter__(self) -> Iterator[Any]:
        return self.samples


class SampleReads:
    """Reads samples of ``layouts`` (decoded by ``shard_format``) through the
    reader ``reader()`` gives, failures through ``policy``."""

    def __init__(
        self,
        layouts: Sequence[Layout],
        shard_format: ShardFormat,
        reader: Callable[[], Reader],
        policy: ErrorPolicy,
    ) -> None:
        self.layouts = layouts
        self.format = shard_format
        self.reader = reader
        self.policy = policy
        self.failing: dict[int, Exception] = {}
        """Shards whose reads fail at once with this error (changed since indexed)."""
        self.on_changed: Callable[[int], None] | None = None
        """Told of each shard a read found changed since its layout was made."""

    def plan(
        self,
        windows: list[Window],
        first: int,
        skip: int,
        order_of: Callable[[int], np.ndarray | None],
    ) -> list[Read]:
        """Reads for windows ``first``.., the first of which has delivered
        ``skip`` of its samples already (only the rest are read again);
        ``order_of(window)`` is a window's delivery order (None: stored)."""
        # Whole windows in one loop: a dataset of thousands of shards plans
        # a read for each before its first sample.
        whole = first + 1 if skip else first
        reads = whole_reads(windows, whole)
        if not skip or first >= len(windows):
            return reads
        window = windows[first]  # what is left of the first window, read first
        order = order_of(first)
        wanted = np.arange(skip, window.count) if order is None else np.sort(order[skip:])
        rest: list[Read] = []
        for run in window.runs:
            inside = wanted[(wanted >= run.base) & (wanted < run.base + len(run))]
            if not len(inside):
                continue
            samples = inside - run.base + run.start
            if not self.layouts[run.shard].per_sample:
                rest.append(Read(first, run, int(samples[0]), int(samples[-1]) + 1))
                continue
            # Runs of consecutive samples: read only those.
            breaks = np.flatnonzero(np.diff(samples) != 1) + 1
            rest.extend(Read(first, run, int(r[0]), int(r[-1]) + 1)
                        for r in np.split(samples, breaks))  # fmt: skip
        return rest + reads

    def execute(
        self,
        reads: list[Read],
        columnar: bool,
        policy: ErrorPolicy | None = None,
        encoded: bool = False,
    ) -> Iterator[tuple[Read, Any]]:
        """Every read decoded, in order: (read, decoded), decoded a list of
        columnar parts (``columnar``) or :class:`ReadSamples`, to be taken
        before the next read; with ``encoded``, samples as the format holds
        them for a shuffle window (:meth:`finish` makes them). A failing read
        goes through the error policy (``policy``, else the dataset's) where
        it fails (after the samples before the failure); a failed stream
        restarts after it."""
        policy = policy or self.policy
        # Shards whose reads failed twice in this pass after all their retries
        # (a server that stops answering for one object): their other reads
        # are skipped at once, not each asked again with every retry (a
        # stalled object cost minutes, its ranges asked for a hundred times).
        failures: dict[int, int] = {}
        dead: dict[int, Exception] = {}
        k = 0
        while k < len(reads):
            shard = reads[k].run.shard
            failing = self.failing.get(shard) or dead.get(shard)
            if failing is not None:
                # Each read given up so is a loss of its own (its samples).
                place = f"{place_of(failing)} samples {reads[k].start}"
                policy.failure(
                    failing, reads[k].stop - reads[k].start, "shard skipped", place=place
                )
                yield reads[k], _nothing(columnar)
                k += 1
                continue
            stop = len(reads)
            if self.failing or dead:  # (a pass of thousands of reads looks at none of them)
                stop = next((i for i in range(k, len(reads))
                             if reads[i].run.shard in self.failing or reads[i].run.shard in dead),
                            stop)  # fmt: skip
            # Each read's ranges are worked out as the reader comes to it, not
            # all before the first: an epoch's part may be thousands of reads.
            leading = self.layouts[reads[k].run.shard]
            mapped = self.format.maps_cached(columnar, leading.size / max(leading.count, 1))
            chunks = self.reader().stream(map(self._shard, reads[k:stop]), mapped=mapped)
            guarded = Guarded(chunks, cut=True)
            expected = k
            try:
                for position, group in _uncut(groupby(guarded, key=attrgetter("shard")),
                                              guarded):  # fmt: skip
                    index = k + position
                    while expected < index:  # reads that produced no bytes
                        yield reads[expected], _nothing(columnar)
                        expected += 1
                    read = reads[index]
                    first = self.layouts[read.run.shard].decoded_from(read.start)
                    samples = ReadSamples()
                    if columnar:
                        samples.samples = self._parts(read, group, first, policy, samples,
                                                      guarded, position)  # fmt: skip
                    else:
                        samples.samples = self._samples(read, group, first, policy, samples,
                                                        guarded, position, encoded)  # fmt: skip
                    yield read, samples
                    expected = index + 1
            finally:
                guarded.close()
            if guarded.failure is not None and guarded.failed_at is not None:
                failed = k + guarded.failed_at
                if isinstance(guarded.failure, ShardChangedError) and self.on_changed is not None:
                    self.on_changed(reads[failed].run.shard)
                lost = reads[failed].run.shard
                failures[lost] = failures.get(lost, 0) + 1
                if failures[lost] >= _DEAD_AFTER:
                    dead[lost] = guarded.failure
                if failed >= expected:  # failed before delivering any of its bytes
                    while expected < failed:
                        yield reads[expected], _nothing(columnar)
                        expected += 1
                    read = reads[failed]
                    policy.failure(
                        guarded.failure,
                        read.stop - read.start,
                        "read failed",
                        place=f"{place_of(guarded.failure)} samples {read.start}",
                    )
                    yield read, _nothing(columnar)
                    expected = failed + 1
            else:
                while expected < stop:
                    yield reads[expected], _nothing(columnar)
                    expected += 1
            k = expected

    def _shard(self, read: Read) -> Shard:
        layout = self.layouts[read.run.shard]
        # Cut at read_size, most remote ranges would go as a full request
        # (4 MiB less 64 KiB) and a short one.
        ranges, _ = layout.ranges(read.start, read.stop, self.reader().piece_limit(layout.url))
        return Shard(tuple(ranges), whole=layout.meta.get("whole", False))

    def finish(self, encoded: Any, read: Read, policy: ErrorPolicy | None = None) -> Any:
        """The sample an encoded one of ``read`` is, or :data:`SKIPPED` for a
        damaged record (through the error policy, ``policy`` else the dataset's)."""
        layout = self.layouts[read.run.shard]
        try:
            return self.format.finish(encoded, layout.url)
        except DecodeError as error:
            (policy or self.policy).failure(located(error, layout), 1, "damaged record skipped")
            return SKIPPED

    def _samples(
        self, read: Read, chunks: Iterable[Any], first: int, policy: ErrorPolicy,
        taken: ReadSamples, guarded: Guarded, position: int, encoded: bool = False,
    ) -> Iterator[Any]:  # fmt: skip
        """The samples of ``read`` (whose bytes, the stream's ``position``-th
        shard, decode from sample ``first`` on), counted in ``taken``; a
        damaged record the format stepped over (a DecodeError it gives in a
        record's place) goes through ``policy`` and comes as :data:`SKIPPED`,
        and so, after the samples before it, does an error that cuts the read
        short."""
        layout = self.layouts[read.run.shard]
        skip, want = read.start - first, read.stop - read.start
        items = (self.format.encoded if encoded else self.format.samples)(chunks, layout)
        failed: list[Exception] = []
        for sample in _until_failure(islice(_in_places(items, layout), skip, skip + want),
                                     layout, failed):  # fmt: skip
            if isinstance(sample, DecodeError):
                policy.failure(located(sample, layout), 1, "damaged record skipped")
                sample = SKIPPED
            taken.count += 1
            yield sample
        error = failed[0] if failed else None
        after = self._after_damage(read, error, read.start + taken.count, guarded, position)
        if after is not None:  # the index knows where the next sample starts: read on there
            assert error is not None
            decode = functools.partial(self._samples, encoded=encoded)
            yield from self._read_on(read, after, error, policy, taken, decode)
            return
        if error is None and taken.count < want:
            error = TruncatedShardError(
                f"holds {skip + taken.count} samples from {first} on, the index says "
                f"{skip + want} (the shard changed after it was indexed?)",
                layout.url, -1, first + skip + taken.count,
            )  # fmt: skip
        _cut_short(policy, error, guarded, position, want - taken.count, read.start + taken.count)

    def _read_on(
        self,
        read: Read,
        after: Read,
        error: Exception,
        policy: ErrorPolicy,
        taken: ReadSamples,
        decode: Callable[..., Iterator[Any]],
    ) -> Iterator[Any]:
        """``read``'s items from ``after`` on, read anew (see :meth:`_after_damage`):
        the damaged sample before it, unless it came, is lost (SKIPPED in its
        place), and ``decode`` (:meth:`_samples` or :meth:`_parts`) gives the rest."""
        lost = after.start - read.start - taken.count
        policy.failure(error, lost, "damaged record skipped")
        for _ in range(lost):
            taken.count += 1
            yield SKIPPED
        rest = ReadSamples()
        chunks = Guarded(self.reader().stream([self._shard(after)]), cut=True)
        try:
            first = self.layouts[after.run.shard].decoded_from(after.start)
            yield from decode(after, chunks, first, policy, rest, chunks, 0)
        finally:
            chunks.close()
            taken.count += rest.count

    def _after_damage(self, read: Read, error: Exception | None, came: int,
                      guarded: Guarded, position: int) -> Read | None:  # fmt: skip
        """The rest of ``read`` after the sample whose damage ended its
        decoding (``error``), where its index says where each sample starts
        (a shard damaged since it was indexed, its size and times kept): the
        samples after it are intact, and only it is lost (or nothing, where
        the damage is in a member after those of it that came: a header
        that cannot name its sample ends the one before). None where the
        read failed otherwise, or nothing follows the damaged sample."""
        layout = self.layouts[read.run.shard]
        if not isinstance(error, DecodeError) or error.record is None or not layout.per_sample:
            return None
        if guarded.failed_at == position or codec_for(layout.url) is not None:
            return None
        # ``came``: the sample after those decoded before the damage.
        resume = max(error.record + 1, read.start)
        if not came - 1 <= error.record <= came or resume >= read.stop:
            return None
        return Read(read.window, read.run, resume, read.stop)

    def _parts(
        self, read: Read, chunks: Iterable[Any], first: int, policy: ErrorPolicy,
        taken: ReadSamples, guarded: Guarded, position: int,
    ) -> Iterator[Any]:  # fmt: skip
        """The columnar parts of ``read`` (whose bytes, the stream's
        ``position``-th shard, decode from sample ``first`` on), their rows
        counted in ``taken``; a damaged record the format stepped over (a
        DecodeError it gives in a record's place) goes through ``policy`` and
        comes as :data:`SKIPPED` (one row), and so, after the rows before it,
        does an error that cuts the read short."""
        from fastio.dataset._batching import rows_of, slice_rows  # batches' only

        layout = self.layouts[read.run.shard]
        skip, want = read.start - first, read.stop - read.start
        failed: list[Exception] = []
        rows = 0
        for decoded in _until_failure(_in_places(self.format.parts(chunks, layout), layout),
                                      layout, failed):  # fmt: skip
            part = decoded
            if isinstance(part, DecodeError):
                if skip <= rows < skip + want:  # in its place among the rows: one
                    policy.failure(located(part, layout), 1, "damaged record skipped")
                part = SKIPPED
            n = rows_of(part)
            lo, hi = max(skip - rows, 0), min(skip + want - rows, n)
            rows += n
            if lo < hi:
                taken.count += hi - lo
                yield part if (lo, hi) == (0, n) else slice_rows(part, lo, hi)
            if rows >= skip + want:
                break
        error = failed[0] if failed else None
        after = self._after_damage(read, error, first + rows, guarded, position)
        if after is not None:  # the index knows where the next sample starts: read on there
            assert error is not None
            yield from self._read_on(read, after, error, policy, taken, self._parts)
            return
        if error is None and taken.count < want:
            error = TruncatedShardError(
                f"holds {taken.count} of the {want} samples its index places from sample "
                f"{read.start}", layout.url, -1, read.start + taken.count,
            )  # fmt: skip
        _cut_short(policy, error, guarded, position, want - taken.count, read.start + taken.count)


_DEAD_AFTER = 2  # reads of a shard failed in a pass, after their retries


def _uncut(groups: Iterator[Any], guarded: Guarded) -> Iterator[Any]:
    """``groups`` until a read's failure cuts one short where its decoder
    had stopped taking it (said after the groups, see Guarded)."""
    try:
        yield from groups
    except OSError as error:
        if error is not guarded.failure:
            raise


def _until_failure(items: Iterator[Any], layout: Layout, failed: list[Exception]
                   ) -> Iterator[Any]:  # fmt: skip
    """``items`` up to the first that raises (a DecodeError or OSError, a
    read's failure among them): that error, naming the sample where the
    index knows it, goes to ``failed``, and the items end there."""
    while True:
        try:
            item = next(items, _END)
        except (DecodeError, OSError) as failure:
            failed.append(located(failure, layout))
            return
        if item is _END:
            return
        yield item


def _cut_short(policy: ErrorPolicy, error: Exception | None, guarded: Guarded, position: int,
               lost: int, first_lost: int) -> None:  # fmt: skip
    """A read's failure through ``policy``: the stream's own (the
    ``position``-th shard's read failed midway), else its decoding's, if any.
    Its place is where the loss begins (the shard's sample ``first_lost``):
    the reads of a shard that fail alike lose samples of their own each."""
    if guarded.failed_at == position:
        error = guarded.failure
    if error is not None:
        policy.failure(error, lost, "read failed", place=f"{place_of(error)} samples {first_lost}")


def _nothing(columnar: bool) -> Any:
    """What a read that produced no bytes decodes to."""
    return [] if columnar else ReadSamples()


def _in_places(decoded: Iterable[Any], layout: Layout) -> Iterator[Any]:
    """What a format decoded, without the damaged records it stepped over
    that the shard's index left out (counted lost when it was built): those
    the index holds (found damaged only now) keep their places."""
    starts = layout.starts
    for item in decoded:
        if isinstance(item, DecodeError) and starts is not None:
            at = int(np.searchsorted(starts, item.offset))
            if at == len(starts) or int(starts[at]) != item.offset:
                continue
        yield item


def located(error: Exception, layout: Layout) -> Exception:
    """``error`` naming the sample (its number in the shard) where the
    index knows which sample holds the failing byte."""
    if not isinstance(error, DecodeError) or not layout.per_sample or error.offset < 0:
        return error
    assert layout.ends is not None
    return error.numbered(int(np.searchsorted(layout.ends, error.offset, side="right")))


def _changed(error: OSError) -> OSError:
    """A read's failure as a dataset says it: a file that ended before bytes
    a read asked for is a shard changed since it was laid out (its index, or
    its open, said it held them), :class:`~fastio.ShardChangedError`."""
    if not isinstance(error, TruncatedFileError):
        return error
    url = error.filename or ""
    return ShardChangedError(url, f"{url} changed while it was read ({error.strerror})")


class Guarded:
    """A reader stream that ends, instead of raising, at a failed read, and
    says which of its shards failed: the decoder of the shard before never
    sees the next shard's error (the reader raises it right after the last
    chunk it delivered). With ``cut``, a shard whose read fails after some
    of its bytes came ends in that failure instead (:attr:`failure`, raised
    to its framing): the end of its bytes there is not the shard's end (a
    record cut there is not damage, a line cut there is not its last line)."""

    def __init__(self, stream: Iterator[Any], cut: bool = False) -> None:
        self.stream = stream
        self.cut = cut
        self.failure: OSError | None = None
        self.failed_at: int | None = None
        self.untouched = False  # whether no byte of the failed shard came

    def __iter__(self) -> Iterator[Any]:
        last = None
        try:
            for chunk in self.stream:
                last = chunk
                yield chunk
        except OSError as error:
            failure = self.failure = _changed(error)
            if last is None:
                self.failed_at, self.untouched = 0, True
            else:
                self.failed_at = last.shard + 1 if last.end_of_shard else last.shard
                self.untouched = last.end_of_shard
                if self.cut and not self.untouched:
                    if failure is error:
                        raise
                    raise failure from None

    def close(self) -> None:
        self.stream.close()  # type: ignore[attr-defined]
