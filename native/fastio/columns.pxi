# Columns: records copied once into Arrow record batches, which leave through
# the Arrow PyCapsule interface (the C data interface): this module never
# imports pyarrow; pyarrow.record_batch(batch) takes one.
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.errno cimport E2BIG, ENOMEM
from libc.stdint cimport int32_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset

_TAR_COLUMN_ERRORS = {**_TAR_ERRORS, 4: "repeated_extension", 5: "truncated", 6: "bad_name"}


@cython.final
cdef class Collected(Scan):
    """What a collector took from a buffer: ``rows`` (samples) added to the
    batch and ``records`` (lines, TFRecords or tar members) framed before
    ``consumed``; ``full``: the scan stopped before a record that would take
    the batch past ``max_bytes`` (take the batch and scan again from
    ``consumed``; with no rows collected, that record alone is too large)."""


cdef Collected _collected_scan(size_t rows, size_t records, size_t consumed, size_t needed,
                               bint full, bint at_end, FrameError error):
    cdef Collected result = Collected.__new__(Collected)
    result.rows = rows
    result.records = records
    result.consumed = consumed
    result.needed = needed
    result.full = full
    result.at_end = at_end
    result.error = error
    return result


cdef void _release_schema_capsule(object capsule) noexcept:
    cdef ArrowSchema *schema = <ArrowSchema *>PyCapsule_GetPointer(capsule, b"arrow_schema")
    if schema != NULL:
        if schema.release != NULL:  # not taken by a consumer
            schema.release(schema)
        free(schema)


cdef void _release_array_capsule(object capsule) noexcept:
    cdef ArrowArray *data = <ArrowArray *>PyCapsule_GetPointer(capsule, b"arrow_array")
    if data != NULL:
        if data.release != NULL:
            data.release(data)
        free(data)


cdef class ArrowBatch:
    """A record batch made natively. pyarrow takes it, once, through the Arrow
    PyCapsule interface: ``pyarrow.record_batch(batch)``."""

    def __cinit__(self):
        self._schema = <ArrowSchema *>calloc(1, sizeof(ArrowSchema))
        self._array = <ArrowArray *>calloc(1, sizeof(ArrowArray))
        if self._schema == NULL or self._array == NULL:
            raise MemoryError()

    def __dealloc__(self):
        fio_export_release(self._schema, self._array)
        free(self._schema)
        free(self._array)

    def __arrow_c_array__(self, requested_schema=None):
        """The schema and array capsules (``requested_schema`` is not supported:
        the batch has the schema it has)."""
        if self._array == NULL or self._schema == NULL:
            raise ValueError("this batch was handed over already")
        schema = PyCapsule_New(self._schema, b"arrow_schema", _release_schema_capsule)
        self._schema = NULL
        data = PyCapsule_New(self._array, b"arrow_array", _release_array_capsule)
        self._array = NULL
        return schema, data


cdef class Collector:
    """Collects records from buffers into a batch: the buffers (kept here as
    memoryviews, so that they stay put) until :meth:`take`. One thread at a
    time may use a collector."""

    def __cinit__(self, *args, **kwargs):
        self._held = []

    cdef int _collected(self, int rc, size_t rows, object view) except -1:
        """After collecting from ``view``: keep it while records point into it."""
        if rc < 0:
            raise MemoryError()
        if rows:
            self._held.append(view)
        return 0


cdef class RecordColumns(Collector):
    """Records collected into batches of one binary column ``name``."""

    def __cinit__(self, str name="record"):
        self._name = name.encode()
        memset(&self._records, 0, sizeof(self._records))

    def __dealloc__(self):
        fio_records_free(&self._records)

    @property
    def rows(self):
        """Records collected since the last :meth:`take`."""
        return self._records.rows

    def tfrecord(self, object data, bint verify=True,
                 unsigned long long max_bytes=FIO_COLUMN_MAX_BYTES,
                 unsigned long long base=0):
        """Collect the complete TFRecords at the start of ``data`` (framed and
        checked as :func:`scan_tfrecords` does; ``base``: the shard offset of
        ``data``, which :meth:`take_examples` names a record by).

        Returns a :class:`Collected`, whose ``error`` is that of
        :func:`scan_tfrecords`. Runs without the GIL.
        """
        cdef Py_buffer buffer
        cdef size_t rows = 0, consumed = 0, needed = 0
        cdef int full = 0, rc = 0
        cdef fio_frame_error error
        error.kind = 0
        view = memoryview(data)
        PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
        try:
            with nogil:
                rc = fio_tfrecord_collect(<const unsigned char *>buffer.buf, <size_t>buffer.len,
                                          base, verify, max_bytes, &self._records, &rows,
                                          &consumed, &needed, &full, &error)
        finally:
            PyBuffer_Release(&buffer)
        self._collected(rc, rows, view)
        problem = None
        if error.kind:
            problem = _frame_error(_FRAME_ERRORS[error.kind], error.offset, rows)
        return _collected_scan(rows, rows, consumed, needed, full, False, problem)

    def lines(self, object data, object prefix=b"", bint final=False,
              unsigned long long max_bytes=FIO_COLUMN_MAX_BYTES):
        """Collect the complete lines at the start of ``data``, without their
        newlines; the first begins with ``prefix`` (the start of a line cut by
        earlier buffers). With ``final``, what follows the last newline is a line
        too. Returns a :class:`Collected`; both buffers must stay unchanged until
        :meth:`take`. Runs without the GIL."""
        cdef Py_buffer buffer, carried
        cdef size_t rows = 0, consumed = 0
        cdef int full = 0, rc = 0
        view = memoryview(data)
        carried_view = memoryview(prefix)
        PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(carried_view, &carried, PyBUF_SIMPLE)
            try:
                with nogil:
                    rc = fio_lines_collect(<const unsigned char *>buffer.buf, <size_t>buffer.len,
                                           <const unsigned char *>carried.buf,
                                           <size_t>carried.len, final, max_bytes,
                                           &self._records, &rows, &consumed, &full)
            finally:
                PyBuffer_Release(&carried)
        finally:
            PyBuffer_Release(&buffer)
        self._collected(rc, rows, view)
        self._collected(rc, rows if len(carried_view) else 0, carried_view)
        return _collected_scan(rows, rows, consumed, 0, full, False, None)

    def take(self):
        """The records collected since the last take as an :class:`ArrowBatch`,
        or None without any; the buffers they came from are let go."""
        cdef ArrowBatch batch
        cdef const char *name = self._name
        cdef size_t rows = self._records.rows
        cdef int rc = 0
        if not rows:
            return None
        batch = ArrowBatch()
        with nogil:
            rc = fio_records_export(&self._records, name, batch._schema, batch._array)
        if rc < 0:
            raise MemoryError()
        batch.num_rows = rows
        self._held.clear()
        return batch

    def detach_examples(self):
        """The TFRecords collected since the last take as :class:`ExampleRows`,
        not copied yet (they keep the buffers they came from), or None without
        any; the collector goes on empty."""
        cdef ExampleRows part
        if not self._records.count:
            return None
        part = ExampleRows.__new__(ExampleRows)
        part._records = fio_records_detach(&self._records)
        if part._records == NULL:
            raise MemoryError()
        part._held = self._held
        part.num_rows = part._records.count
        self._held = []
        return part


cdef class TarColumns(Collector):
    """WebDataset samples of tar buffers collected into batches.

    Members are grouped into samples by key as webdataset does; each extension
    has a column slot that lasts across batches (so that they share a schema)
    until :meth:`reset`.
    """

    def __cinit__(self):
        self._wds = fio_wds_new()
        if self._wds == NULL:
            raise MemoryError()

    def __dealloc__(self):
        fio_wds_free(self._wds)

    @property
    def columns(self):
        """Extension slots so far."""
        return fio_wds_columns(self._wds)

    @property
    def rows(self):
        """Samples collected since the last :meth:`take`."""
        return fio_wds_rows(self._wds)

    def reset(self):
        """Forget the extension slots (only between batches)."""
        if fio_wds_rows(self._wds):
            raise ValueError("take the collected samples before resetting the columns")
        fio_wds_reset_columns(self._wds)

    def scan(self, object data, bint final=False,
             unsigned long long max_bytes=FIO_COLUMN_MAX_BYTES):
        """Collect the complete samples at the start of ``data``, which starts on
        a member's header.

        A sample is complete once its members are and the next member with
        another key shows its header, or the end-of-archive marker follows, or
        (``final``: nothing comes after ``data``) ``data`` ends.

        Returns a :class:`Collected`: ``rows`` are samples, ``records`` tar
        members, ``consumed`` where the first sample not added starts, and
        ``needed`` what that sample needs as far as known. ``error`` kinds are
        ``"header_checksum"``, ``"bad_number"``, ``"bad_pax"``,
        ``"repeated_extension"``, ``"truncated"`` (only when ``final``) and
        ``"bad_name"`` (a key or extension that is not UTF-8). Holds the GIL:
        it reads headers only, for less time than waiting to take the GIL back
        from the reader's threads would cost (see :func:`group_tar`).
        """
        cdef Py_buffer buffer
        cdef fio_wds_result result
        cdef int rc = 0
        view = memoryview(data)
        PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
        try:
            rc = fio_wds_scan(self._wds, <const unsigned char *>buffer.buf,
                              <size_t>buffer.len, final, max_bytes, &result)
        finally:
            PyBuffer_Release(&buffer)
        self._collected(rc, result.rows, view)
        error = None
        if result.error.kind:
            error = _frame_error(_TAR_COLUMN_ERRORS[result.error.kind], result.error.offset,
                                 result.error_members)
        return _collected_scan(result.rows, result.members, result.consumed, result.needed,
                               result.full, result.at_end, error)

    def take(self, str url):
        """The samples collected since the last take as an :class:`ArrowBatch`
        (``__key__``, ``__url__`` and one binary column per extension slot, by
        name), or None without any; the buffers they came from are let go."""
        cdef ArrowBatch batch
        cdef bytes encoded = url.encode()
        cdef const char *text = encoded
        cdef size_t length = len(encoded)
        cdef size_t rows = fio_wds_rows(self._wds)
        cdef int rc = 0
        if not rows:
            return None
        batch = ArrowBatch()
        with nogil:
            rc = fio_wds_export(self._wds, text, length, batch._schema, batch._array)
        if rc < 0:
            raise MemoryError()
        batch.num_rows = rows
        self._held.clear()
        return batch

    def detach(self):
        """The samples collected since the last take as :class:`TarRows`, not
        copied yet (they keep the buffers they came from), or None without
        any; the collector goes on empty, with its extension slots."""
        cdef TarRows part
        cdef size_t rows = fio_wds_rows(self._wds)
        if not rows:
            return None
        part = TarRows.__new__(TarRows)
        part._wds = fio_wds_detach(self._wds)
        if part._wds == NULL:
            raise MemoryError()
        part._held = self._held
        part.num_rows = rows
        self._held = []
        return part


@cython.final
cdef class TarRows:
    """WebDataset samples a :class:`TarColumns` collected, where they lie in
    the buffers it kept: :func:`gather_tar` copies them into a batch."""

    def __dealloc__(self):
        fio_wds_free(self._wds)

    @property
    def nbytes(self):
        """The bytes of the samples' members (what gathering them copies)."""
        return fio_wds_bytes(self._wds)


cdef tuple _url_dictionary(list urls):
    """The bytes of ``urls`` joined, and their offsets (a calloc'ed array the
    caller frees)."""
    encoded = [url.encode() for url in urls]
    text = b"".join(encoded)
    if len(text) > FIO_COLUMN_MAX_BYTES:
        raise OverflowError("the urls pass an Arrow string column's 2 GiB")
    cdef int32_t *offsets = <int32_t *>calloc(len(encoded) + 1, sizeof(int32_t))
    if offsets == NULL:
        raise MemoryError()
    for index in range(len(encoded)):
        offsets[index + 1] = offsets[index] + <int32_t>len(encoded[index])
    return text, <size_t>offsets


def gather_tar(list spans, list urls):
    """One :class:`ArrowBatch` of ``spans``, ``(TarRows, first_row, rows,
    url)`` each, in order: rows ``first_row..first_row + rows`` of the
    samples, whose ``__url__`` is ``urls[url]``. Columns as
    :meth:`TarColumns.take` makes them, the extensions of all spans sorted by
    name. Each sample's bytes are copied once, without the GIL. Raises
    OverflowError where a column would pass an Arrow binary column's 2 GiB,
    IndexError for rows or a url that are not there."""
    cdef ArrowBatch batch
    cdef TarRows part
    cdef size_t count = len(spans), index, total = 0
    cdef fio_wds_span *native_spans
    cdef int rc = 0
    text, address = _url_dictionary(urls)
    cdef const char *url_text = text
    cdef int32_t *url_offsets = <int32_t *><size_t>address
    cdef size_t url_count = len(urls)
    native_spans = <fio_wds_span *>calloc(count + 1, sizeof(fio_wds_span))
    try:
        if native_spans == NULL:
            raise MemoryError()
        for index in range(count):
            part, first_row, rows, url = spans[index]
            if first_row < 0 or rows < 0 or first_row + rows > part.num_rows:
                raise IndexError(f"rows {first_row}..{first_row + rows} of {part.num_rows}")
            if not 0 <= url < <Py_ssize_t>url_count:
                raise IndexError(f"url {url} of {url_count}")
            native_spans[index].wds = part._wds
            native_spans[index].first_row = first_row
            native_spans[index].rows = rows
            native_spans[index].url = url
            total += rows
        batch = ArrowBatch()
        with nogil:
            rc = fio_wds_gather(native_spans, count, url_text, url_offsets, url_count,
                                batch._schema, batch._array)
        if rc == -E2BIG:
            raise OverflowError("a column of these samples passes Arrow's 2 GiB")
        if rc < 0:
            raise MemoryError()
        batch.num_rows = total
        return batch
    finally:
        free(native_spans)
        free(url_offsets)


@cython.final
cdef class TarBatch:
    """A batch of up to ``rows`` WebDataset samples built as they come in:
    :meth:`add` copies a span of :class:`TarRows` into the batch's columns at
    once (without the GIL), so the buffers they lie in are read while still
    in the CPU's caches and can be reused before the batch is complete.
    :meth:`take` makes the batch, columns as :func:`gather_tar` makes them."""

    def __cinit__(self, Py_ssize_t rows):
        if rows < 0:
            raise ValueError(f"rows must not be negative, not {rows}")
        self._builder = fio_wds_builder_new(rows)
        if self._builder == NULL:
            raise MemoryError()
        self._urls = []
        self._url_index = {}

    def __dealloc__(self):
        fio_wds_builder_free(self._builder)

    @property
    def num_rows(self):
        return fio_wds_builder_rows(self._builder)

    def add(self, TarRows part, Py_ssize_t first_row, Py_ssize_t rows, str url):
        """Copies rows ``first_row..first_row + rows`` of ``part``, from the
        shard ``url``. Raises IndexError for rows that are not there, and
        OverflowError where the batch would pass its rows or a column
        Arrow's 2 GiB (then nothing is added)."""
        cdef fio_wds_span span
        cdef int rc = 0
        if first_row < 0 or rows < 0 or first_row + rows > part.num_rows:
            raise IndexError(f"rows {first_row}..{first_row + rows} of {part.num_rows}")
        index = self._url_index.get(url)
        fresh = index is None
        if fresh:
            index = self._url_index[url] = len(self._urls)
            self._urls.append(url)
        span.wds = part._wds
        span.first_row = first_row
        span.rows = rows
        span.url = index
        with nogil:
            rc = fio_wds_builder_add(self._builder, &span, 1)
        if rc < 0 and fresh:
            del self._url_index[url]
            self._urls.pop()
        if rc == -E2BIG:
            raise OverflowError("these samples would pass the batch's rows or Arrow's 2 GiB")
        if rc < 0:
            raise MemoryError()

    def take(self):
        """The rows added as one :class:`ArrowBatch`; the builder is empty again."""
        cdef ArrowBatch batch = ArrowBatch()
        cdef size_t rows = fio_wds_builder_rows(self._builder)
        cdef int rc = 0
        text, address = _url_dictionary(self._urls)
        cdef const char *url_text = text
        cdef int32_t *url_offsets = <int32_t *><size_t>address
        cdef size_t url_count = len(self._urls)
        self._urls = []
        self._url_index = {}
        try:
            with nogil:
                rc = fio_wds_builder_export(self._builder, url_text, url_offsets, url_count,
                                            batch._schema, batch._array)
        finally:
            free(url_offsets)
        if rc < 0:
            raise MemoryError()
        batch.num_rows = rows
        return batch


cdef list _records_of(fio_records *records, size_t first, size_t rows):
    cdef size_t index
    cdef fio_piece *piece
    found = []
    for index in range(first, first + rows):
        piece = &records.pieces[index]
        found.append((piece.position, (<const char *>piece.data)[:piece.length]))
    return found


cdef class ExampleRows:
    """TFRecords a :class:`RecordColumns` collected, where they lie in the
    buffers it kept: :func:`gather_examples` parses them into a batch."""

    def __dealloc__(self):
        if self._records != NULL:
            fio_records_free(self._records)
            free(self._records)

    def check(self):
        """The records that are not ``tf.train.Example``: (row, its header's
        shard offset, why) each, in order."""
        cdef size_t first = 0, bad = 0
        cdef const char *what = NULL
        cdef int rc = 0
        found = []
        while first < self._records.count:
            with nogil:
                rc = fio_examples_check(self._records, first, &bad, &what)
            if rc < 0:
                raise MemoryError()
            if bad >= self._records.count:
                break
            found.append((bad, self._records.pieces[bad].position, what.decode()))
            first = bad + 1
        return found

    def records(self, Py_ssize_t first, Py_ssize_t rows):
        """Rows ``first..first + rows`` as (header offset, a copy of the bytes)."""
        if first < 0 or rows < 0 or first + rows > self.num_rows:
            raise IndexError(f"rows {first}..{first + rows} of {self.num_rows}")
        return _records_of(self._records, first, rows)


def gather_examples(list spans):
    """One :class:`ArrowBatch` of ``spans``, ``(ExampleRows, first_row, rows)``
    each, in order, every row checked as an example: columns as
    ``fio_examples_gather`` makes them. Each value is copied once,
    without the GIL. None where the features cannot be typed here (a feature
    of two kinds and the like: see ``fio_examples_export``)."""
    cdef ArrowBatch batch
    cdef ExampleRows part
    cdef size_t count = len(spans), index, total = 0
    cdef fio_records_span *native_spans
    cdef int rc = 0
    native_spans = <fio_records_span *>calloc(count + 1, sizeof(fio_records_span))
    if native_spans == NULL:
        raise MemoryError()
    try:
        for index in range(count):
            part, first_row, rows = spans[index]
            if first_row < 0 or rows < 0 or first_row + rows > part.num_rows:
                raise IndexError(f"rows {first_row}..{first_row + rows} of {part.num_rows}")
            native_spans[index].records = part._records
            native_spans[index].first = first_row
            native_spans[index].rows = rows
            total += rows
        batch = ArrowBatch()
        with nogil:
            rc = fio_examples_gather(native_spans, count, batch._schema, batch._array)
    finally:
        free(native_spans)
    if rc < 0:
        raise MemoryError()
    if rc == FIO_EXAMPLES_UNTYPED:
        return None
    batch.num_rows = total
    return batch


@cython.final
cdef class ExampleBatch:
    """A batch of up to ``rows`` tf.train.Example records built as they come
    in: :meth:`add` parses a span of :class:`ExampleRows` into the batch's
    columns at once (without the GIL), while the buffers they lie in are
    still in the CPU's caches, and keeps nothing of them: their buffers may
    go back to the reader. :meth:`take` makes the batch, columns as
    :func:`gather_examples` makes them."""

    def __cinit__(self, Py_ssize_t rows):
        if rows < 0:
            raise ValueError(f"rows must not be negative, not {rows}")
        self._builder = fio_examples_builder_new(rows)
        if self._builder == NULL:
            raise MemoryError()
        self.num_rows = 0

    def __dealloc__(self):
        fio_examples_builder_free(self._builder)

    def add(self, ExampleRows part, Py_ssize_t first_row, Py_ssize_t rows):
        """Parses rows ``first_row..first_row + rows`` of ``part``; False where
        the batch with them could not be typed here (a feature of two kinds and
        the like: see ``fio_examples_gather``), and then nothing is added and
        :meth:`take` makes the rows before. Raises IndexError for rows that
        are not there, and OverflowError where the batch would pass its rows
        (nothing added either)."""
        cdef fio_records_span span
        cdef int rc = 0
        if first_row < 0 or rows < 0 or first_row + rows > part.num_rows:
            raise IndexError(f"rows {first_row}..{first_row + rows} of {part.num_rows}")
        span.records = part._records
        span.first = first_row
        span.rows = rows
        with nogil:
            rc = fio_examples_builder_add(self._builder, &span, 1)
        if rc == -E2BIG:
            raise OverflowError("these records would pass the batch's rows")
        if rc == -ENOMEM:
            raise MemoryError()
        if rc:
            return False
        self.num_rows += rows
        return True

    def take(self):
        """The rows added as one :class:`ArrowBatch`; the builder is empty again."""
        cdef ArrowBatch batch = ArrowBatch()
        cdef size_t rows = self.num_rows
        cdef int rc = 0
        self.num_rows = 0
        with nogil:
            rc = fio_examples_builder_export(self._builder, batch._schema, batch._array)
        if rc:  # only after an add that raised MemoryError
            raise MemoryError()
        batch.num_rows = rows
        return batch


def copy_into(object destination, object source):
    """Copy the bytes of ``source`` to the start of ``destination`` (both
    contiguous buffers, the destination writable and at least as long)
    without the GIL, as a batch's rows are copied: non-temporal stores for
    large copies (a batch is larger than the caches; the lines it is written
    to are then not read from memory first). Raises ValueError where the
    destination is shorter."""
    cdef Py_buffer to, source_view
    PyObject_GetBuffer(destination, &to, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(source, &source_view, PyBUF_SIMPLE)
        try:
            if source_view.len > to.len:
                raise ValueError(f"{source_view.len} bytes do not fit in {to.len}")
            with nogil:
                fio_stream_copy(<unsigned char *>to.buf,
                                <const unsigned char *>source_view.buf, <size_t>source_view.len)
        finally:
            PyBuffer_Release(&source_view)
    finally:
        PyBuffer_Release(&to)
