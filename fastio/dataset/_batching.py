"""Columnar batches of a dataset: a window's parts (Arrow tables, numpy
arrays, or samples not copied yet) joined, gathered in the window's order
and cut into batches of exactly the batch size, one Python object per batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fastio._errors import MixedTypesError
from fastio.formats._parts import Part, PartBuilder

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from fastio.dataset._arrow_rows import ArrowRows
    from fastio.plan._cursor import EpochCursor

__all__ = ["BatchSchema", "assemble", "rebatch", "rows_of", "slice_rows"]


def rows_of(part: Any) -> int:
    return len(part) if isinstance(part, np.ndarray) else int(part.num_rows)


def slice_rows(part: Any, lo: int, hi: int) -> Any:
    return part[lo:hi] if isinstance(part, np.ndarray) else part.slice(lo, hi - lo)


def assemble(parts: list[tuple[int, Any]], count: int) -> tuple[Any, np.ndarray]:
    """One table (or array) of a window's parts, and for each window position
    its row in it (-1 where the sample was skipped)."""
    rows_at = np.full(count, -1, np.int64)
    row = 0
    for at, part in parts:
        n = rows_of(part)
        rows_at[at : at + n] = np.arange(row, row + n)
        row += n
    return _concat([part for _, part in parts]), rows_at


def _concat(parts: list[Any]) -> Any:
    if not parts:
        return None
    if all(isinstance(part, Part) for part in parts):
        return type(parts[0]).join(parts)
    # Rows of a window gathered as it was and of one joined first: as Arrow.
    parts = [part.batch() if isinstance(part, Part) else part for part in parts]
    if isinstance(parts[0], np.ndarray):
        return parts[0] if len(parts) == 1 else _concat_arrays(parts)
    import pyarrow as pa  # numpy batches (npy, fixed) need no pyarrow

    if len(parts) == 1:
        return parts[0]
    if _joinable_batches(pa, parts):
        # One copy into one batch, where joining tables and combining their
        # chunks took three times as long (a batch across two record batches).
        return pa.concat_batches(parts)
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in parts]
    try:
        # Types widened where they differ (JSON lines: a field of integers in
        # one shard and of floats in the next makes floats; null and lists, lists).
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
        raise MixedTypesError(f"samples of one batch do not make one table: {error}; "
                              "iterate samples instead") from None  # fmt: skip


def _concat_arrays(parts: list[np.ndarray]) -> np.ndarray:
    """Rows of numpy shards (npy, fixed) in one array: in their files' dtype
    (its byte order too) where they share it; else in the dtype that holds
    every value of each (int8 and int64 rows make int64, never the first's
    int8); rows no one array holds (other row shapes, structured dtypes of
    other fields) raise MixedTypesError."""
    dtypes = {part.dtype for part in parts}
    shapes = {part.shape[1:] for part in parts}
    if len(shapes) > 1:
        raise MixedTypesError(f"rows of one batch have shapes {sorted(shapes)}: one array "
                              "cannot hold them; iterate samples instead")  # fmt: skip
    if len(dtypes) == 1:
        return np.concatenate(parts, dtype=parts[0].dtype)
    try:
        common = np.result_type(*dtypes)
    except TypeError:
        common = None
    if common is None or not all(_holds(common, dtype) for dtype in dtypes):
        raise MixedTypesError(f"rows of one batch are of dtypes {', '.join(map(str, dtypes))}, "
                              "which no one dtype holds; iterate samples instead")  # fmt: skip
    return np.concatenate(parts, dtype=common)


def _holds(common: np.dtype[Any], dtype: np.dtype[Any]) -> bool:
    """Whether ``common`` holds every value of ``dtype``: a safe cast, and of
    integers to floats only where the float's mantissa holds every integer
    (numpy calls int64 to float64 safe: 2**62 + 1 would come as 2**62)."""
    if not np.can_cast(dtype, common, "safe"):
        return False
    if dtype.kind in "iu" and common.kind in "fc":
        digits = dtype.itemsize * 8 - (dtype.kind == "i")
        return bool(digits <= np.finfo(common).nmant + 1)
    return True


def _joinable_batches(pa: Any, parts: list[Any]) -> bool:
    """Whether ``parts`` are record batches of one schema that this pyarrow
    joins as batches (``concat_batches``, 19 and newer)."""
    if not hasattr(pa, "concat_batches") or any(type(p) is not pa.RecordBatch for p in parts):
        return False
    schema = parts[0].schema
    return all(part.schema is schema or part.schema.equals(schema) for part in parts[1:])


def _take(table: Any, rows: np.ndarray | range) -> Any:
    """Rows of a table in order: a zero-copy slice where they are consecutive
    (stored order), else one gather."""
    if isinstance(rows, range):
        return slice_rows(table, rows.start, rows.stop)
    if (
        len(rows)
        and int(rows[-1]) - int(rows[0]) + 1 == len(rows)
        and (len(rows) == 1 or bool(np.all(np.diff(rows) == 1)))
    ):
        return slice_rows(table, int(rows[0]), int(rows[-1]) + 1)
    if isinstance(table, np.ndarray):
        return table[rows]
    if isinstance(table, Part):
        return table.pick(rows)  # gathered once, when the batch is made
    return table.take(rows)


def _gatherable(table: Any, rows: np.ndarray | range, batch_size: int) -> Any:
    """A window's table, ready for its batches' gathers. Where the window
    makes at most two batches, or its rows are large, each batch is gathered
    from the window as it is: samples not copied yet (parts) straight from
    their read buffers, Arrow rows from their chunks. Where it makes more of
    small rows, the window is joined into one chunk first (one copy), since
    then the costs of a gather per span or per chunk, which each batch would
    pay again, outweigh the bytes. A window of large rows joined would be a
    copy of the whole shuffle buffer beside it (110 KB samples in batches of
    64: 263 MiB more in a process, against 85 unshuffled)."""
    if isinstance(rows, range) or table is None or isinstance(table, np.ndarray):
        return table
    if len(rows) <= 2 * batch_size:
        return table
    if isinstance(table, Part):
        row_bytes = table.row_bytes()
        return table if row_bytes is not None and row_bytes >= _BUILT_ROW_BYTES else table.batch()
    if table.num_rows and table.nbytes / table.num_rows >= _BUILT_ROW_BYTES:
        return table
    # A record batch (units joined by ``_concat``) is one chunk already.
    return table.combine_chunks() if hasattr(table, "combine_chunks") else table


def _as_batch(table: Any) -> Any:
    if isinstance(table, np.ndarray):
        return table
    import pyarrow as pa  # numpy batches (npy, fixed) need no pyarrow

    if type(table) is pa.RecordBatch:  # a slice of a unit, or units joined
        return table
    if isinstance(table, Part):
        table = table.batch()
        if type(table) is pa.RecordBatch:
            return table
    combined = table.combine_chunks()
    batches = combined.to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=combined.schema)
    return batches[0]


# A built batch's row offsets are allocated for all of its rows up front (4
# bytes a row and column): larger batches are gathered once complete.
_MOST_BUILT_ROWS = 1 << 16
# Arrow rows are copied into a batch as they come where they are large (on
# average, in the part that starts the batch): a part is then a few rows and
# many bytes, which it would pin in the reader's buffers (12 MB record
# batches of 110 KB rows), and its few numpy steps per column cost little
# beside its bytes. Parts of 1 KB rows are joined once the batch is
# complete: built, they ran at 1.15M rows/s against 1.8M joined.
_BUILT_ROW_BYTES = 16 << 10


class _Carry:
    """The rows of the batch being made. Rows not copied yet (tar samples,
    tf.train.Example records) are copied into the batch as they come in,
    while the buffers they were read into are still in the CPU's caches: in
    stored order a batch of large samples is made of many reads, and
    gathered only once complete (110 KB samples in batches of 256: 28 MB),
    its first reads' bytes had left the caches by then. Arrow record batches
    of plain columns are copied in as they come too (see
    :mod:`fastio.dataset._arrow_rows`), which lets go of what they were read
    into; other rows (Arrow of other types, numpy) are kept and joined once,
    when the batch is complete."""

    __slots__ = ("arrow", "builder", "builds", "parts", "rows", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.builds = size <= _MOST_BUILT_ROWS
        self.builder: PartBuilder | None = None
        self.arrow: ArrowRows | None = None
        self.parts: list[Any] = []
        self.rows = 0

    def add(self, rows: Any) -> None:
        self.rows += rows_of(rows)
        if isinstance(rows, Part):
            self._close_arrow()  # rows built before these come first
            if self.builds and not self.parts:
                if self.builder is None or self.builder.kind is not type(rows):
                    self._close_builder()
                    self.builder = type(rows).building(self.size)
                if self.builder is not None:
                    rest = self.builder.add(rows)
                    if rest is not None:
                        self._close_builder()
                        self.parts.append(rest)
                    return
        self._close_builder()
        if self.builds and not self.parts and self._arrow_takes(rows):
            assert self.arrow is not None
            self.arrow.add(rows)
            return
        self._close_arrow()
        self.parts.append(rows)

    def take(self) -> Any:
        """The batch, of the rows added since the last take."""
        self._close_builder()
        self._close_arrow()
        parts, self.parts, self.rows = self.parts, [], 0
        return _as_batch(_concat(parts))

    def _arrow_takes(self, rows: Any) -> bool:
        """Whether ``rows`` go into the Arrow builder: rows after others it
        holds, where they fit; or a batch's first rows, where they are large
        (see ``_BUILT_ROW_BYTES``), with a builder made for their schema."""
        if isinstance(rows, np.ndarray | Part):
            return False
        import pyarrow as pa  # rows that are not numpy are Arrow

        if type(rows) is not pa.RecordBatch:
            return False
        arrow = self.arrow
        if arrow is not None and arrow.num_rows:
            return arrow.takes(rows)
        least = _BUILT_ROW_BYTES * rows.num_rows
        # The buffers' whole size first (a slice's bounds it from above, in
        # under a microsecond): the bytes the rows reference take 13 us.
        if not rows.num_rows or rows.get_total_buffer_size() < least or rows.nbytes < least:
            return False
        if arrow is not None and arrow.takes(rows):
            return True
        from fastio.dataset._arrow_rows import ArrowRows  # Arrow rows only

        self.arrow = ArrowRows.building(pa, rows, self.size)
        return self.arrow is not None and self.arrow.takes(rows)

    def _close_builder(self) -> None:
        builder = self.builder
        if builder is not None and builder.num_rows:
            self.parts.append(builder.take())

    def _close_arrow(self) -> None:
        arrow = self.arrow
        if arrow is not None and arrow.num_rows:
            self.parts.append(arrow.take())


def rebatch(
    units: Iterator[Any], batch_size: int, drop_last: bool, cursor: EpochCursor
) -> Iterator[Any]:
    """Batches of exactly ``batch_size`` rows (the last may be short) from the
    windows' (table, rows, positions, end) units. The cursor advances as
    batches are delivered: a saved state never skips rows that were assembled
    but not yet handed out."""
    carry = _Carry(batch_size)
    last_end = 0
    for table, rows, positions, end in units:
        last_end = end
        if not len(rows):  # all of the unit's samples were lost
            if not carry.rows:
                cursor.move_to(end)
            continue
        table = _gatherable(table, rows, batch_size)
        start = 0
        if carry.rows:
            need = min(batch_size - carry.rows, len(rows))
            carry.add(_take(table, rows[:need]))
            start = need
            if carry.rows == batch_size:
                cursor.deliver_batch(batch_size, int(positions[need - 1]) + 1)
                yield carry.take()
        while start + batch_size <= len(rows):
            stop = start + batch_size
            cursor.deliver_batch(batch_size, int(positions[stop - 1]) + 1 if stop < len(rows)
                                 else end)  # fmt: skip
            yield _as_batch(_take(table, rows[start:stop]))
            start = stop
        if start < len(rows):
            carry.add(_take(table, rows[start:]))
        elif not carry.rows:
            cursor.move_to(end)
    if carry.rows and not drop_last:
        cursor.deliver_batch(carry.rows, last_end)
        yield carry.take()
    cursor.move_to(max(cursor.position, last_end))


class BatchSchema:
    """The columns a dataset's Arrow batches have had, with their types: each
    batch is given them all, in that order (null where its rows lack one, a
    type widened as Arrow widens it: integers and floats make floats), and
    extends them with any column it brings. Formats without a schema
    (TFRecord Examples, JSON lines, WebDataset extensions) make a batch's
    columns of its rows alone, so that one of a shard without a feature
    lacked its column, and a consumer of a fixed signature (tf.data, a
    compiled step) failed in the middle of an epoch. A column first met in
    a later shard joins from there on: after a pass, every batch has every
    column. Where records name their columns (``by_name``: TFRecord
    features, JSON fields, tar members), the columns are in name order
    (``__key__`` and ``__url__`` first): the order of the first batch
    depends on which shard the shuffle or a worker starts with, and batches
    of every worker and epoch must have one schema (a ``ParquetWriter``, a
    positional consumer)."""

    __slots__ = ("by_name", "schema")

    def __init__(self, by_name: bool = False) -> None:
        self.by_name = by_name
        self.schema: Any = None

    def adopt(self, data: bytes | None) -> bool:
        """Join the columns another process kept (``data``: a schema as
        pyarrow serializes it; one that does not read, or whose types do not
        join these, is passed over). Returns whether the columns here hold
        more than those kept, to be kept in their place."""
        import pyarrow as pa

        try:
            theirs = None if data is None else self._ordered(pa.ipc.read_schema(pa.py_buffer(data)))
            if theirs is None or self.schema is None:
                self.schema = self.schema if theirs is None else theirs
                return theirs is None and self.schema is not None
            union = pa.unify_schemas([self.schema, theirs], promote_options="permissive")
        except (pa.ArrowException, ValueError, OSError):
            return False
        self.schema = self._ordered(union)
        return not self.schema.equals(theirs)

    def conformed(self, batches: Iterator[Any], grown: Callable[[], None]) -> Iterator[Any]:
        """``batches`` conformed; ``grown()`` where a batch added a column or
        widened a type."""
        try:
            for batch in batches:
                before = self.schema
                batch = self.conform(batch)
                if self.schema is not before and (before is None or not before.equals(self.schema)):
                    grown()
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def conform(self, batch: Any) -> Any:
        import pyarrow as pa

        known = self.schema
        if type(batch) is not pa.RecordBatch or batch.schema is known:
            return batch
        if known is not None and batch.schema.equals(known):
            self.schema = batch.schema
            return batch
        try:
            union = self._ordered(batch.schema if known is None else pa.unify_schemas(
                [known, batch.schema], promote_options="permissive"))  # fmt: skip
            if union.equals(batch.schema):
                self.schema = batch.schema
                return batch
            columns = []
            for field in union:
                at = batch.schema.get_field_index(field.name)
                if at < 0:
                    columns.append(pa.nulls(batch.num_rows, field.type))
                    continue
                column = batch.column(at)
                columns.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise MixedTypesError(f"a batch's columns ({batch.schema}) do not join the "
                                  f"columns of the batches before ({known}): {error}; "
                                  "iterate samples instead") from None  # fmt: skip
        made = pa.RecordBatch.from_arrays(columns, names=union.names)
        self.schema = made.schema
        return made

    def _ordered(self, schema: Any) -> Any:
        """``schema`` in name order where records name the columns, those of
        the sample's own (``__key__``, ``__url__``) first."""
        if not self.by_name:
            return schema
        fields = sorted(schema, key=lambda field: (not field.name.startswith("__"), field.name))
        if [field.name for field in fields] == schema.names:
            return schema
        import pyarrow as pa

        return pa.schema(fields, schema.metadata)
