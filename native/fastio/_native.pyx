# cython: language_level=3
"""Thin binding over the C engine (engine.h): typed arguments, buffer
ownership while the kernel or a worker thread writes into it, errno to OSError.
Policy (which engine, warnings, retries) lives in fastio, not here."""

cimport cython
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_WRITABLE
from cpython cimport array
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memset
from posix.stdlib cimport posix_memalign

import array as _array
import os

DIRECT_ALIGNMENT = 4096
"""Alignment of offsets, lengths and addresses that O_DIRECT reads use here.
4096 satisfies every logical block size Linux devices report (512 or 4096)."""

_KINDS = {"auto": FIO_ENGINE_AUTO, "io_uring": FIO_ENGINE_URING, "threads": FIO_ENGINE_THREADS}
_NAMES = {FIO_ENGINE_URING: "io_uring", FIO_ENGINE_THREADS: "threads"}


cdef inline int _raise_errno(int negative_errno, str what) except -1:
    raise OSError(-negative_errno, f"{what}: {os.strerror(-negative_errno)}")


cdef class Engine:
    """Positional reads into caller buffers, completed asynchronously.

    ``kind`` is ``"io_uring"``, ``"threads"`` (a pread thread pool) or ``"auto"``
    (io_uring, else threads; ``fallback_errno`` then says why io_uring was not
    used). Completions make :meth:`fileno` (an eventfd) readable; call
    :meth:`reap` then. One thread at a time may use an engine.
    """

    def __cinit__(self, str kind="auto", unsigned capacity=256, unsigned max_threads=0):
        cdef int uring_errno = 0
        cdef int rc
        if kind not in _KINDS:
            raise ValueError(f"engine kind must be one of {sorted(_KINDS)}, not {kind!r}")
        if capacity == 0 or capacity > 65536:
            raise ValueError(f"capacity must be in 1..65536, not {capacity}")
        self._views = <Py_buffer *>calloc(capacity, sizeof(Py_buffer))
        self._completions = <fio_completion *>calloc(capacity, sizeof(fio_completion))
        if self._views == NULL or self._completions == NULL:
            raise MemoryError()
        rc = fio_engine_open(&self._engine, _KINDS[kind], capacity,
                             max_threads or capacity, &uring_errno)
        if rc < 0:
            _raise_errno(rc, f"cannot start the {kind} I/O engine")
        self.kind = _NAMES[fio_engine_kind(self._engine)]
        self.capacity = capacity
        self.fallback_errno = uring_errno
        self.owner_pid = os.getpid()

    def __dealloc__(self):
        cdef unsigned i
        if self._engine != NULL:
            if not self._closed and os.getpid() == self.owner_pid:
                fio_engine_shutdown(self._engine)
                while fio_engine_inflight(self._engine):
                    fio_engine_wait(self._engine, 100)
                    fio_engine_reap(self._engine, self._completions, self.capacity)
            fio_engine_destroy(self._engine)
            self._engine = NULL
        if self._views != NULL:
            for i in range(self.capacity):
                PyBuffer_Release(&self._views[i])
            free(self._views)
        free(self._completions)

    cdef fio_engine *_live(self) except NULL:
        if self._closed:
            raise ValueError("I/O operation on a closed engine")
        if os.getpid() != self.owner_pid:
            raise RuntimeError(
                f"this engine was created in process {self.owner_pid} and cannot be used "
                f"after fork; create a new one in process {os.getpid()}")
        return self._engine

    @property
    def closed(self):
        return self._closed

    @property
    def inflight(self):
        """Reads submitted and not yet reaped."""
        return 0 if self._closed else fio_engine_inflight(self._engine)

    @property
    def threads(self):
        """Worker threads running (thread pool only; io_uring uses none of ours)."""
        return 0 if self._closed else fio_engine_threads(self._engine)

    def fileno(self):
        """The eventfd that becomes readable when completions may be waiting."""
        return fio_engine_eventfd(self._live())

    def submit(self, int fd, object buffer, unsigned long long offset,
               unsigned long long tag, bint direct=False):
        """Queue a read filling ``buffer`` (writable, contiguous) from ``offset``.

        The engine keeps the buffer exported until the read is reaped. Nothing
        starts before :meth:`flush`. Raises BlockingIOError when ``capacity``
        reads are already in flight, ValueError for a buffer that O_DIRECT
        cannot use.
        """
        cdef fio_engine *engine = self._live()
        cdef Py_buffer view
        cdef int slot
        PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
        if direct and ((<uintptr_t>view.buf) % FIO_DIRECT_SECTOR
                       or view.len % FIO_DIRECT_SECTOR or offset % FIO_DIRECT_SECTOR):
            PyBuffer_Release(&view)
            raise ValueError("O_DIRECT reads need buffer address, length and offset "
                             f"aligned to {FIO_DIRECT_SECTOR} bytes")
        slot = fio_engine_prep_read(engine, fd, view.buf, <size_t>view.len, offset, tag,
                                    FIO_READ_DIRECT if direct else 0)
        if slot < 0:
            PyBuffer_Release(&view)
            if slot == -11:  # EAGAIN
                raise BlockingIOError(11, f"all {self.capacity} engine slots are in flight")
            _raise_errno(slot, "cannot queue read")
        self._views[slot] = view

    def flush(self):
        """Start every queued read. Returns how many started."""
        cdef fio_engine *engine = self._live()
        cdef int rc
        with nogil:
            rc = fio_engine_flush(engine)
        if rc < 0:
            _raise_errno(rc, "cannot submit reads")
        return rc

    cdef int _reap_into(self, list results) except -1:
        cdef int count, i
        cdef fio_completion *done
        while True:
            with nogil:
                count = fio_engine_reap(self._engine, self._completions, self.capacity)
            for i in range(count):
                done = &self._completions[i]
                PyBuffer_Release(&self._views[done.slot])
                if results is not None:
                    results.append((done.tag, done.result))
            if <unsigned>count < self.capacity:
                return 0

    def reap(self):
        """Finished reads as ``[(tag, result), ...]`` without blocking; ``result``
        is the byte count, or ``-errno`` for a failed read."""
        self._live()
        cdef list results = []
        self._reap_into(results)
        return results

    def wait(self, timeout=None):
        """Block (without the GIL) until a completion may be ready, or
        ``timeout`` seconds pass. Returns True if one may be ready."""
        cdef fio_engine *engine = self._live()
        cdef int timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        cdef int rc
        with nogil:
            rc = fio_engine_wait(engine, timeout_ms)
        if rc < 0:
            _raise_errno(rc, "cannot wait for completions")
        return rc > 0

    def close(self):
        """Cancel reads not yet started, wait for the running ones and free
        everything: fds, threads, buffers. Idempotent."""
        cdef unsigned i
        if self._closed:
            return
        self._closed = True
        if os.getpid() == self.owner_pid:
            fio_engine_shutdown(self._engine)
            while fio_engine_inflight(self._engine):
                with nogil:
                    fio_engine_wait(self._engine, 100)
                self._reap_into(None)
        fio_engine_destroy(self._engine)
        self._engine = NULL
        for i in range(self.capacity):
            PyBuffer_Release(&self._views[i])

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else f"inflight={self.inflight}"
        return f"<Engine {self.kind} capacity={self.capacity} {state}>"


cdef class Region:
    """A huge-page-advised memory mapping that :class:`AlignedBuffer` objects are
    carved from; unmapped when the last buffer referring to it is gone."""

    def __cinit__(self, size_t size):
        cdef int rc = fio_region_map(&self._region, size)
        if rc < 0:
            raise MemoryError(f"cannot map {size} bytes: {os.strerror(-rc)}")

    def __dealloc__(self):
        fio_region_unmap(&self._region)

    def __len__(self):
        return self._region.size


HUGE_PAGE = FIO_HUGE_PAGE
"""Size of the transparent huge pages read buffers are carved from."""


def allocate_buffers(Py_ssize_t size, Py_ssize_t count):
    """``count`` buffers of ``size`` bytes (a multiple of 4096) carved from one
    huge-page-advised region, so each is physically contiguous where the kernel
    grants huge pages (see native/hugemem.h for why reads care)."""
    if size <= 0 or size % DIRECT_ALIGNMENT or count <= 0:
        raise ValueError(f"need a positive multiple of {DIRECT_ALIGNMENT} bytes and count, "
                         f"not {size} x {count}")
    region = Region(size * count)
    return [AlignedBuffer(size, DIRECT_ALIGNMENT, region, index * size)
            for index in range(count)]


# A buffer refers only to its Region, which refers to nothing: no cycle can run
# through it, so the cyclic GC must leave it alone (a GC "clear" dropping the
# region first would unmap memory that the buffer still exposes).
@cython.no_gc
cdef class AlignedBuffer:
    """Writable memory of ``size`` bytes aligned to ``alignment`` (a power of two).

    Exposes the buffer protocol; ``exports`` counts views alive right now, so a
    pool can tell when nobody holds on to the memory any more. With ``region``,
    the bytes are ``region``'s from ``offset`` on (see :func:`allocate_buffers`).
    """

    def __cinit__(self, Py_ssize_t size, Py_ssize_t alignment=DIRECT_ALIGNMENT,
                  Region region=None, Py_ssize_t offset=0):
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, not {alignment}")
        if region is not None:
            if offset < 0 or offset + size > <Py_ssize_t>region._region.size:
                raise ValueError(f"{size} bytes at {offset} do not fit the region")
            if (<uintptr_t>(region._region.data + offset)) % alignment:
                raise ValueError(f"offset {offset} is not aligned to {alignment}")
            self._data = region._region.data + offset
            self._owner = region
            self._owns_data = False
        elif posix_memalign(<void **>&self._data, max(alignment, sizeof(void *)),
                            max(size, 1)) != 0:
            raise MemoryError(f"cannot allocate {size} bytes aligned to {alignment}")
        else:
            self._owns_data = True
        self._size = size
        self._itemsize = 1
        self.alignment = alignment

    def __dealloc__(self):
        if self._owns_data:
            free(self._data)

    def __len__(self):
        return self._size

    @property
    def address(self):
        return <uintptr_t>self._data

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        buffer.buf = self._data
        buffer.obj = self
        buffer.len = self._size
        buffer.readonly = 0
        buffer.itemsize = 1
        if flags & PyBUF_FORMAT:
            buffer.format = b"B"
        else:
            buffer.format = NULL
        buffer.ndim = 1
        buffer.shape = &self._size if flags & PyBUF_ND else NULL
        buffer.strides = &self._itemsize if flags & PyBUF_STRIDES else NULL
        buffer.suboffsets = NULL
        buffer.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __repr__(self):
        return (f"<AlignedBuffer size={self._size} alignment={self.alignment} "
                f"exports={self.exports}>")


# ---- record framing (framing.h): offsets into the caller's buffer, no copies ----

cdef array.array _OFFSETS = _array.array("Q")
# Records or lines found per pass without the GIL, between appends to the arrays.
cdef enum:
    _FRAMING_BATCH = 4096

_FRAME_ERRORS = {1: "length_crc", 2: "data_crc"}


def crc32c(object data, unsigned int value=0, bint portable=False):
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value`` (the CRC of the
    bytes before it): ``crc32c(b, crc32c(a)) == crc32c(a + b)``. ``portable``
    forces the table-driven code that CPUs without CRC instructions run."""
    cdef Py_buffer view
    cdef uint32_t result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            if portable:
                result = fio_crc32c_portable(value, view.buf, <size_t>view.len)
            else:
                result = fio_crc32c(value, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


cdef inline void _append(array.array target, const uint64_t *values, size_t count,
                         uint64_t shift):
    cdef Py_ssize_t start = len(target)
    cdef size_t index
    array.resize_smart(target, start + count)
    for index in range(count):
        target.data.as_ulonglongs[start + index] = values[index] + shift


def scan_tfrecords(object data, bint verify=True):
    """Find the complete TFRecord records at the start of ``data``.

    Returns ``(offsets, lengths, consumed, error, needed)``: the records' data
    offsets and lengths (``array('Q')``), where the next scan should start,
    ``None`` or ``(kind, offset)`` for a checksum mismatch (``"length_crc"`` or
    ``"data_crc"``) in the record whose header is at ``offset``, and how many
    bytes from ``consumed`` on the next record needs (0 unless it is cut off).
    Records before a mismatch are returned; a record cut off at the end is left
    for the next scan. Runs without the GIL.
    """
    cdef Py_buffer view
    cdef fio_record *found = <fio_record *>malloc(_FRAMING_BATCH * sizeof(fio_record))
    cdef uint64_t *parts = <uint64_t *>malloc(_FRAMING_BATCH * sizeof(uint64_t))
    cdef array.array offsets = array.clone(_OFFSETS, 0, False)
    cdef array.array lengths = array.clone(_OFFSETS, 0, False)
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index
    cdef fio_frame_error error
    cdef const unsigned char *start
    if found == NULL or parts == NULL:
        free(found)
        free(parts)
        raise MemoryError()
    error.kind = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        start = <const unsigned char *>view.buf
        while True:
            with nogil:
                count = fio_tfrecord_scan(start + total, <size_t>view.len - total, verify,
                                          found, _FRAMING_BATCH, &consumed, &needed, &error)
            for index in range(count):
                parts[index] = found[index].offset
            _append(offsets, parts, count, total)
            for index in range(count):
                parts[index] = found[index].length
            _append(lengths, parts, count, 0)
            if error.kind:
                error.offset += total
            total += consumed
            if error.kind or count < _FRAMING_BATCH:
                break
    finally:
        PyBuffer_Release(&view)
        free(found)
        free(parts)
    problem = (_FRAME_ERRORS[error.kind], error.offset) if error.kind else None
    return offsets, lengths, total, problem, needed


def split_lines(object data):
    """End offsets (positions of ``\\n``) of the complete lines at the start of
    ``data`` as ``array('Q')``, and where the next scan should start."""
    cdef Py_buffer view
    cdef uint64_t *ends = <uint64_t *>malloc(_FRAMING_BATCH * sizeof(uint64_t))
    cdef array.array result = array.clone(_OFFSETS, 0, False)
    cdef size_t total = 0, consumed = 0, count = 0
    cdef const unsigned char *start
    if ends == NULL:
        raise MemoryError()
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        start = <const unsigned char *>view.buf
        while True:
            with nogil:
                count = fio_split_lines(start + total, <size_t>view.len - total, ends,
                                        _FRAMING_BATCH, &consumed)
            _append(result, ends, count, total)
            total += consumed
            if count < _FRAMING_BATCH:
                break
    finally:
        PyBuffer_Release(&view)
        free(ends)
    return result, total


_TAR_ERRORS = {1: "header_checksum", 2: "bad_number", 3: "bad_pax"}


def scan_tar(object data):
    """Find the complete members of a tar stream at the start of ``data``
    (ustar, GNU long names, pax path and size).

    Returns ``(members, consumed, at_end, error, needed)``: ``members`` is a list
    of ``(name, data_offset, size, typeflag, header_offset)``; ``consumed`` is
    where the next scan should start; ``at_end`` is true at the end-of-archive
    marker; ``error`` is ``None`` or ``(kind, offset)`` for a damaged header block
    (``"header_checksum"``, ``"bad_number"``, ``"bad_pax"``); ``needed`` is how many
    bytes from ``consumed`` on the next member needs, as far as its header
    blocks tell (0 unless it is cut off). Names are decoded as UTF-8 with
    ``surrogateescape``. Scanning runs without the GIL.
    """
    cdef Py_buffer view
    cdef fio_tar_member *found = <fio_tar_member *>malloc(
        _FRAMING_BATCH * sizeof(fio_tar_member))
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index
    cdef int at_end = 0
    cdef fio_frame_error error
    cdef const unsigned char *start
    cdef fio_tar_member *member
    cdef list members = []
    if found == NULL:
        raise MemoryError()
    error.kind = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        start = <const unsigned char *>view.buf
        while True:
            with nogil:
                count = fio_tar_scan(start + total, <size_t>view.len - total, found,
                                     _FRAMING_BATCH, &consumed, &needed, &at_end, &error)
            for index in range(count):
                member = &found[index]
                name = start[total + member.name_offset:
                             total + member.name_offset + member.name_length]
                if member.prefix_length:
                    name = (start[total + member.prefix_offset:
                                  total + member.prefix_offset + member.prefix_length]
                            + b"/" + name)
                members.append((name.decode("utf-8", "surrogateescape"),
                                total + member.data_offset, member.size,
                                chr(member.typeflag or 48),  # NUL means a regular file: "0"
                                total + member.header_offset))
            if error.kind:
                error.offset += total
            total += consumed
            if error.kind or at_end or count < _FRAMING_BATCH:
                break
    finally:
        PyBuffer_Release(&view)
        free(found)
    problem = (_TAR_ERRORS[error.kind], error.offset) if error.kind else None
    return members, total, bool(at_end), problem, needed


# ---- tf.train.Example (framing.h) ----

cdef enum:
    _EXAMPLE_FEATURES = 32  # described on the stack; more are allocated


def parse_example(object record, object frombuffer, object int64, object float32):
    """The features of a serialized ``tf.train.Example`` as ``{name: values}``.

    Bytes features are lists of bytes; int64 and float features are arrays that
    ``frombuffer(data, dtype, count, offset)`` makes (``numpy.frombuffer``: this
    module does not import numpy) with dtype ``int64`` or ``float32``, views of one
    bytearray per record. A name given twice keeps its first place and its last
    value. Raises ValueError for a malformed record (UnicodeDecodeError for a
    name that is not UTF-8).
    """
    cdef Py_buffer view
    cdef fio_feature stack_features[_EXAMPLE_FEATURES]
    cdef fio_feature *features = stack_features
    cdef fio_feature *feature
    cdef fio_record *values = NULL
    cdef const unsigned char *data
    cdef const char *what = NULL
    cdef char *numbers
    cdef int64_t count, index
    cdef size_t numbers_size = 0, at = 0, most_strings = 1, item
    cdef dict result = {}
    PyObject_GetBuffer(record, &view, PyBUF_SIMPLE)
    try:
        data = <const unsigned char *>view.buf
        count = fio_example_features(data, <size_t>view.len, features, _EXAMPLE_FEATURES, &what)
        if count > _EXAMPLE_FEATURES:
            features = <fio_feature *>malloc(count * sizeof(fio_feature))
            if features == NULL:
                raise MemoryError()
            count = fio_example_features(data, <size_t>view.len, features, count, &what)
        if count < 0:
            raise ValueError(what.decode())
        for index in range(count):
            feature = &features[index]
            if feature.kind == FIO_FEATURE_INT64:
                numbers_size += feature.count * 8
            elif feature.kind == FIO_FEATURE_FLOAT:
                numbers_size += (feature.count * 4 + 7) & ~(<size_t>7)  # int64s stay aligned
            elif feature.kind == FIO_FEATURE_BYTES:
                most_strings = max(most_strings, feature.count)
        slab = PyByteArray_FromStringAndSize(NULL, numbers_size)
        numbers = PyByteArray_AS_STRING(slab)
        values = <fio_record *>malloc(most_strings * sizeof(fio_record))
        if values == NULL:
            raise MemoryError()
        for index in range(count):
            feature = &features[index]
            name = PyUnicode_DecodeUTF8(<const char *>data + feature.name_offset,
                                        feature.name_length, NULL)
            if feature.kind == FIO_FEATURE_INT64:
                fio_feature_int64s(data, feature, <int64_t *>(numbers + at))
                value = frombuffer(slab, int64, feature.count, at)
                at += feature.count * 8
            elif feature.kind == FIO_FEATURE_FLOAT:
                fio_feature_floats(data, feature, <float *>(numbers + at))
                value = frombuffer(slab, float32, feature.count, at)
                at += (feature.count * 4 + 7) & ~(<size_t>7)
            elif feature.kind == FIO_FEATURE_BYTES:
                fio_feature_bytes(data, feature, values)
                value = [data[values[item].offset:values[item].offset + values[item].length]
                         for item in range(feature.count)]
            else:
                value = []
            result[name] = value
    finally:
        PyBuffer_Release(&view)
        if features != stack_features:
            free(features)
        free(values)
    return result


# ---- columns (columnar.h): records copied once into Arrow record batches ----
# Batches leave through the Arrow PyCapsule interface (the C data interface):
# this module never imports pyarrow; pyarrow.record_batch(batch) takes one.

_TAR_COLUMN_ERRORS = {1: "header_checksum", 2: "bad_number", 3: "bad_pax",
                      4: "repeated_extension", 5: "truncated", 6: "bad_name"}


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
                 unsigned long long max_bytes=FIO_COLUMN_MAX_BYTES):
        """Collect the complete TFRecords at the start of ``data`` (framed and
        checked as :func:`scan_tfrecords` does).

        Returns ``(rows, consumed, error, needed, full)``: the records added, and
        ``consumed``, ``error`` and ``needed`` as :func:`scan_tfrecords` says;
        ``full`` means the scan stopped before a record that would take the batch
        past ``max_bytes`` (take the batch and scan again from ``consumed``; with
        no rows collected, that record alone is too large). Runs without the GIL.
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
                                          verify, max_bytes, &self._records, &rows, &consumed,
                                          &needed, &full, &error)
        finally:
            PyBuffer_Release(&buffer)
        self._collected(rc, rows, view)
        problem = (_FRAME_ERRORS[error.kind], error.offset) if error.kind else None
        return rows, consumed, problem, needed, bool(full)

    def lines(self, object data, object prefix=b"", bint final=False,
              unsigned long long max_bytes=FIO_COLUMN_MAX_BYTES):
        """Collect the complete lines at the start of ``data``, without their
        newlines; the first begins with ``prefix`` (the start of a line cut by
        earlier buffers). With ``final``, what follows the last newline is a line
        too. Returns ``(rows, consumed, full)`` (see :meth:`tfrecord`); both
        buffers must stay unchanged until :meth:`take`. Runs without the GIL."""
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
        return rows, consumed, bool(full)

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

        Returns ``(rows, consumed, at_end, full, error, needed, members)``: the
        samples added; where the first sample not added starts; whether the
        end-of-archive marker ended them; ``full``, as
        :meth:`RecordColumns.tfrecord` says; ``error``, None or ``(kind, offset,
        members_before)`` with kind ``"header_checksum"``, ``"bad_number"``,
        ``"bad_pax"``, ``"repeated_extension"``, ``"truncated"`` (only when
        ``final``) or ``"bad_name"`` (a key or extension that is not UTF-8); how
        many bytes from ``consumed`` on the next sample needs as far as known; and
        the tar members before ``consumed``. Runs without the GIL.
        """
        cdef Py_buffer buffer
        cdef fio_wds_result result
        cdef int rc = 0
        view = memoryview(data)
        PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
        try:
            with nogil:
                rc = fio_wds_scan(self._wds, <const unsigned char *>buffer.buf,
                                  <size_t>buffer.len, final, max_bytes, &result)
        finally:
            PyBuffer_Release(&buffer)
        self._collected(rc, result.rows, view)
        error = None
        if result.error.kind:
            error = (_TAR_COLUMN_ERRORS[result.error.kind], result.error.offset,
                     result.error_members)
        return (result.rows, result.consumed, bool(result.at_end), bool(result.full), error,
                result.needed, result.members)

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
