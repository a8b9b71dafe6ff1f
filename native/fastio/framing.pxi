# Record framing: records found in the caller's buffer as offsets, never
# copies, without the GIL; each scan says in a small typed result what it found
# and where it stopped.
cimport cython
from cpython cimport array
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc

import array as _array

cdef array.array _OFFSETS = _array.array("Q")
# Records or lines found per pass without the GIL, between appends to the arrays.
cdef enum:
    _FRAMING_BATCH = 4096

_FRAME_ERRORS = {1: "length_crc", 2: "data_crc"}
_TAR_ERRORS = {1: "header_checksum", 2: "bad_number", 3: "bad_pax"}


@cython.final
cdef class FrameError:
    """Damaged data a scan stopped at: ``kind`` names the damage (the scan
    says which kinds it reports), ``offset`` is where the damaged record's
    header starts in the scanned buffer and ``index`` counts the records (tar
    members) before it there."""

    def __repr__(self):
        return f"<FrameError {self.kind} offset={self.offset} index={self.index}>"


cdef FrameError _frame_error(str kind, uint64_t offset, size_t index):
    cdef FrameError error = FrameError.__new__(FrameError)
    error.kind = kind
    error.offset = offset
    error.index = index
    return error


cdef class Scan:
    """Where a scan of a buffer stopped. The next scan starts at ``consumed``;
    ``needed`` is how many bytes from there the next record needs, as far as
    its header tells (0 unless it is cut off at the end of the buffer);
    ``at_end``: the format's end marker stopped the scan; ``error``: None, or
    the damage that stopped it (the records before it are in the result)."""


@cython.final
cdef class TFRecordScan(Scan):
    """The TFRecord records a scan found: their data ``offsets`` and
    ``lengths`` (``array('Q')``)."""


@cython.final
cdef class LineScan(Scan):
    """The complete lines a scan found: their ``ends`` (the positions of their
    newlines, ``array('Q')``)."""


@cython.final
@cython.freelist(64)
cdef class TarMember:
    """A tar member: its ``name`` (UTF-8, ``surrogateescape``), where its data
    starts and its ``size``, its ``typeflag`` (``"0"`` for a regular file,
    ``"5"`` for a directory, ...) and where its first header block starts."""

    def __repr__(self):
        return (f"<TarMember {self.name!r} size={self.size} typeflag={self.typeflag!r} "
                f"data_offset={self.data_offset}>")


@cython.final
cdef class TarScan(Scan):
    """The complete tar ``members`` a scan found (a list of :class:`TarMember`)."""


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

    Returns a :class:`TFRecordScan`. Records before a checksum mismatch are
    found, and ``error`` describes it (kind ``"length_crc"`` or
    ``"data_crc"``); a record cut off at the end is left for the next scan.
    Runs without the GIL.
    """
    cdef Py_buffer view
    cdef fio_record *found = <fio_record *>malloc(_FRAMING_BATCH * sizeof(fio_record))
    cdef uint64_t *parts = <uint64_t *>malloc(_FRAMING_BATCH * sizeof(uint64_t))
    cdef array.array offsets = array.clone(_OFFSETS, 0, False)
    cdef array.array lengths = array.clone(_OFFSETS, 0, False)
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index
    cdef fio_frame_error error
    cdef const unsigned char *start
    cdef TFRecordScan scan = TFRecordScan.__new__(TFRecordScan)
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
    scan.offsets = offsets
    scan.lengths = lengths
    scan.consumed = total
    scan.needed = needed
    if error.kind:
        scan.error = _frame_error(_FRAME_ERRORS[error.kind], error.offset, len(offsets))
    return scan


def split_lines(object data):
    """The complete lines at the start of ``data``, as a :class:`LineScan`."""
    cdef Py_buffer view
    cdef uint64_t *ends = <uint64_t *>malloc(_FRAMING_BATCH * sizeof(uint64_t))
    cdef array.array result = array.clone(_OFFSETS, 0, False)
    cdef size_t total = 0, consumed = 0, count = 0
    cdef const unsigned char *start
    cdef LineScan scan = LineScan.__new__(LineScan)
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
    scan.ends = result
    scan.consumed = total
    return scan


def scan_tar(object data):
    """Find the complete members of a tar stream at the start of ``data``
    (ustar, GNU long names, pax path and size).

    Returns a :class:`TarScan`; ``at_end`` is set at the end-of-archive marker,
    ``error`` at a damaged header block (kind ``"header_checksum"``,
    ``"bad_number"`` or ``"bad_pax"``), and ``needed`` counts as far as the
    next member's header blocks tell. Scanning runs without the GIL.
    """
    cdef Py_buffer view
    cdef fio_tar_member *found = <fio_tar_member *>malloc(
        _FRAMING_BATCH * sizeof(fio_tar_member))
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index
    cdef int at_end = 0
    cdef fio_frame_error error
    cdef const unsigned char *start
    cdef fio_tar_member *member
    cdef TarMember item
    cdef list members = []
    cdef TarScan scan = TarScan.__new__(TarScan)
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
                item = TarMember.__new__(TarMember)
                item.name = name.decode("utf-8", "surrogateescape")
                item.data_offset = total + member.data_offset
                item.size = member.size
                item.typeflag = chr(member.typeflag or 48)  # NUL means a regular file: "0"
                item.header_offset = total + member.header_offset
                members.append(item)
            if error.kind:
                error.offset += total
            total += consumed
            if error.kind or at_end or count < _FRAMING_BATCH:
                break
    finally:
        PyBuffer_Release(&view)
        free(found)
    scan.members = members
    scan.consumed = total
    scan.needed = needed
    scan.at_end = at_end
    if error.kind:
        scan.error = _frame_error(_TAR_ERRORS[error.kind], error.offset, len(members))
    return scan


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
    cdef size_t numbers_size = 0, at = 0, most_strings = 1
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
