"""A batch of Arrow rows copied in as they come: the rows of a batch that
spans record batches (or row groups, or files) are copied into the batch's
own buffers when each arrives, not kept until the batch is complete and
joined then. The copies are the same (each value once), but the record batch
a part came from is let go at once: read zero-copy from an Arrow IPC file, it
pins the reader's buffer it lies in (a 12 MiB buffer for a 12 MB record
batch), and a batch that spans three files would otherwise pin three.

Columns of fixed-width primitive types and binary or string columns (32- or
64-bit offsets) are built here, without nulls; a part with another type or
with nulls in it (or more bytes than 32-bit offsets reach) stops the
building: the rows built so far become one part, and the batch is joined
from its parts (``pyarrow.concat_batches``).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from fastio._native import copy_into

__all__ = ["ArrowRows"]

_MOST_BYTES = (1 << 31) - 1  # of a column with 32-bit offsets


def _column_kind(pa: Any, kind: Any) -> tuple[str, Any] | None:
    """How a column of ``kind`` is built: ("fixed", its numpy dtype),
    ("binary", its offsets' dtype), or None where it is not built here."""
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        return "binary", np.dtype(np.int32)
    if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        return "binary", np.dtype(np.int64)
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and kind.bit_width >= 8:
        return "fixed", np.dtype(f"u{kind.bit_width // 8}")
    return None


class _Column:
    """One column's buffers (from pyarrow's memory pool, which keeps freed
    memory for the next batch), made at a batch's first rows: values and
    offsets for all of the batch's rows at once, binary data by what the
    first rows suggest, at least doubled where that falls short. Each buffer
    is written through a numpy view of it; binary data, megabytes a part, by
    :func:`fastio._native.copy_into` (non-temporal stores, without the GIL)."""

    __slots__ = ("data", "dtype", "kind", "offsets", "offsets_view", "view", "written")

    def __init__(self, kind: str, dtype: np.dtype) -> None:
        self.kind, self.dtype = kind, dtype
        self.written = 0  # binary bytes
        self.data: Any = None  # values (fixed) or bytes (binary)
        self.view = np.empty(0, dtype if kind == "fixed" else np.uint8)
        self.offsets: Any = None
        self.offsets_view = np.zeros(1, dtype)

    def fits(self, array: Any) -> bool:
        """Whether the values of ``array`` fit after those written (offsets
        of 32 bits reach 2 GiB)."""
        if self.kind == "fixed" or self.dtype.itemsize == 8:
            return True
        offsets = np.frombuffer(array.buffers()[1], self.dtype, array.offset + len(array) + 1)
        return self.written + int(offsets[-1]) - int(offsets[array.offset]) <= _MOST_BYTES

    def add(self, pa: Any, array: Any, at: int, rows: int, capacity: int) -> None:
        """Rows of ``array`` (as ``pyarrow.Array``, a slice perhaps) as rows
        ``at..at + rows`` of a batch of ``capacity`` rows."""
        buffers = array.buffers()
        first = array.offset
        if self.kind == "fixed":
            if self.data is None:
                self.data = pa.allocate_buffer(capacity * self.dtype.itemsize)
                self.view = np.frombuffer(self.data, self.dtype)
            self.view[at : at + rows] = np.frombuffer(buffers[1], self.dtype, first + rows)[first:]
            return
        if self.offsets is None:
            self.offsets = pa.allocate_buffer((capacity + 1) * self.dtype.itemsize)
            self.offsets_view = np.frombuffer(self.offsets, self.dtype)
            self.offsets_view[0] = 0
        offsets = np.frombuffer(buffers[1], self.dtype, first + rows + 1)[first:]
        low, high = int(offsets[0]), int(offsets[-1])
        size = high - low
        if self.written + size > len(self.view):
            per_row = (self.written + size) / (at + rows)
            want = max(int(per_row * capacity * 17 / 16), self.written + size, 2 * len(self.view))
            grown = pa.allocate_buffer(want)
            view = np.frombuffer(grown, np.uint8)
            view[: self.written] = self.view[: self.written]
            self.data, self.view = grown, view
        if size:
            copy_into(self.view[self.written :], np.frombuffer(buffers[2], np.uint8, size, low))
        self.offsets_view[at + 1 : at + rows + 1] = offsets[1:] - (low - self.written)
        self.written += size

    def array(self, pa: Any, kind: Any, rows: int) -> Any:
        if self.kind == "fixed":
            return pa.Array.from_buffers(kind, rows, [None, self.data])
        data = self.data if self.data is not None else pa.allocate_buffer(0)
        return pa.Array.from_buffers(kind, rows, [None, self.offsets, data])


class ArrowRows:
    """The rows of one batch of up to ``capacity`` rows, of one schema,
    copied in part by part (see the module); made by :meth:`building`."""

    def __init__(self, pa: Any, schema: Any, kinds: list[tuple[str, np.dtype]],
                 capacity: int) -> None:  # fmt: skip
        self._pa = pa
        self.schema = schema
        self.capacity = capacity
        self.num_rows = 0
        self._kinds = kinds
        self._columns = self._fresh()

    @classmethod
    def building(cls, pa: Any, part: Any, capacity: int) -> ArrowRows | None:
        """A builder for batches of ``part``'s schema, or None where its
        columns are not built here."""
        kinds = [_column_kind(pa, field.type) for field in part.schema]
        if None in kinds:
            return None
        return cls(pa, part.schema, cast("list[tuple[str, np.dtype]]", kinds), capacity)

    def takes(self, part: Any) -> bool:
        """Whether ``part`` (a record batch) can be added: its schema, no
        nulls, room for its rows and for its values."""
        return (
            type(part) is self._pa.RecordBatch
            and self.num_rows + part.num_rows <= self.capacity
            and (part.schema is self.schema or part.schema.equals(self.schema, check_metadata=True))
            and not any(column.null_count for column in part.columns)
            and all(map(_Column.fits, self._columns, part.columns))
        )

    def add(self, part: Any) -> None:
        """Copies the rows of ``part`` (see :meth:`takes`) in after the rows so far."""
        rows = part.num_rows
        for column, array in zip(self._columns, part.columns, strict=True):
            column.add(self._pa, array, self.num_rows, rows, self.capacity)
        self.num_rows += rows

    def take(self) -> Any:
        """The rows added as one record batch; the builder is empty again."""
        pa, rows = self._pa, self.num_rows
        arrays = [column.array(pa, field.type, rows)
                  for column, field in zip(self._columns, self.schema, strict=True)]  # fmt: skip
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._columns = self._fresh()
        self.num_rows = 0
        return batch

    def _fresh(self) -> list[_Column]:
        return [_Column(*kind) for kind in self._kinds]
