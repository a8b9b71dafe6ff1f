# Record framing: records found in the caller's buffer as offsets, never
# copies, without the GIL where the scan reads the data (checksums), with it
# where it reads tar headers alone; each scan says in a small typed result
# what it found and where it stopped.
cimport cython
from cpython cimport array
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Contains, PyDict_SetItem
from libc.string cimport memchr, memcmp, memcpy
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


@cython.final
cdef class TarSamples(Scan):
    """The samples a tar scan grouped (see :func:`group_tar`): ``samples``
    (dicts), their byte ranges in the buffer (``starts``, ``ends``:
    ``array('Q')``), the header offsets of the first sample's members
    (``first_offsets``), the ``members`` framed, and ``repeat``: None, or
    ``(offset, name)`` of a member that repeats an extension of its sample
    (the scan stopped there; the sample it belongs to is the last one)."""


cdef extern from *:
    """
    static const unsigned char *fio_memrchr(const unsigned char *s, int c, size_t n)
    {
        while (n--)
            if (s[n] == (unsigned char)c)
                return s + n;
        return NULL;
    }
    """
    const unsigned char *fio_memrchr(const unsigned char *s, int c, size_t n) nogil


# Bytes of member data copied into ``bytes`` values with the GIL given up, at
# least: held, the copy of a buffer of 110 KB samples (2 MB, some 300 us)
# kept the reader's threads from their next reads meanwhile (an epoch of such
# samples from the page cache ran at 49k samples/s instead of 56k). Fewer
# bytes are copied with it held, where giving it up and taking it back would
# cost more than the copy.
cdef enum:
    _COPY_WITHOUT_GIL = 256 * 1024


cdef struct _pending_copy:
    char *target
    const unsigned char *source
    size_t size


cdef inline void _copy_all(_pending_copy *copies, size_t count) noexcept nogil:
    cdef size_t index
    for index in range(count):
        memcpy(copies[index].target, copies[index].source, copies[index].size)


cdef inline void _copy_pending(_pending_copy *copies, size_t *count, size_t *nbytes) noexcept:
    if nbytes[0] >= _COPY_WITHOUT_GIL:
        with nogil:
            _copy_all(copies, count[0])
    else:
        _copy_all(copies, count[0])
    count[0] = 0
    nbytes[0] = 0


cdef inline object _member_value(object view, object own, const unsigned char *start,
                                 uint64_t offset, uint64_t size, _pending_copy *copies,
                                 size_t *count, size_t *nbytes):
    """A member's value; a ``bytes`` one is made empty and its copy noted in
    ``copies`` (done by :func:`_copy_pending` before anything else sees it)."""
    cdef object value
    if own is bytes:
        value = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>size)
        copies[count[0]].target = PyBytes_AS_STRING(value)
        copies[count[0]].source = start + offset
        copies[count[0]].size = size
        count[0] += 1
        nbytes[0] += size
        return value
    value = view[offset:offset + size]
    return value if own is None else own(value)


_ASCII_LOWER = {upper: upper + 32 for upper in range(65, 91)}  # str.translate: A-Z to a-z


cdef inline bint _has_upper(const unsigned char *text, size_t length) noexcept nogil:
    cdef size_t at
    for at in range(length):
        if 65 <= text[at] <= 90:
            return True
    return False


def group_tar(object data, str url, object split_name, object own=None):
    """The complete tar members at the start of ``data`` (framed as
    :func:`scan_tar` frames them) grouped into WebDataset samples:
    ``{"__key__": key, "__url__": url, extension: value}`` for consecutive
    regular members that share a key (``split_name(name)`` gives ``(key,
    extension)`` or None for names to skip; names without a newline are split
    here by the same rule). A value is a memoryview of ``data`` (``own``
    None), ``bytes`` (``own`` is ``bytes``: copied straight from the buffer,
    a pass's values at once, without the GIL where they are many bytes), or
    ``own(view)``. The first sample may continue one the previous buffer
    ended in, the last one may go on in the next. Returns a
    :class:`TarSamples`."""
    cdef Py_buffer view
    cdef fio_tar_member *found = <fio_tar_member *>malloc(
        _FRAMING_BATCH * sizeof(fio_tar_member))
    # One pass's values still to be copied (a member each at most), where
    # values are copied: views (an index's scan) need none.
    cdef _pending_copy *copies = NULL
    cdef size_t copy_count = 0, copy_bytes = 0
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index, members = 0
    cdef size_t name_length, base_length, key_length = 0, open_length = 0
    cdef int at_end = 0
    cdef bint stopped = False
    cdef fio_frame_error error
    cdef const unsigned char *start
    cdef const unsigned char *name
    cdef const unsigned char *base
    cdef const unsigned char *slash
    cdef const unsigned char *dot
    cdef const unsigned char *open_key = NULL
    cdef fio_tar_member *member
    cdef uint64_t header_offset, first_sample = 0, last_end = 0
    cdef dict sample = None
    cdef list samples = []
    cdef array.array starts = array.clone(_OFFSETS, 0, False)
    cdef array.array ends = array.clone(_OFFSETS, 0, False)
    cdef array.array first_offsets = array.clone(_OFFSETS, 0, False)
    cdef TarSamples result = TarSamples.__new__(TarSamples)
    cdef object joined, open_joined = None, key_bytes, extension, full_name
    if own is bytes:
        copies = <_pending_copy *>malloc(_FRAMING_BATCH * sizeof(_pending_copy))
    if found == NULL or (own is bytes and copies == NULL):
        free(found)
        free(copies)
        raise MemoryError()
    error.kind = 0
    result.repeat = None
    memory = memoryview(data)
    PyObject_GetBuffer(memory, &view, PyBUF_SIMPLE)
    try:
        start = <const unsigned char *>view.buf
        while not stopped:
            # With the GIL held: the scan reads the members' 512-byte headers,
            # not their data (microseconds a buffer of 110 KB samples), and a
            # GIL given up meanwhile to the reader's or HTTP threads came back
            # after up to the switch interval (a sample loop over a 20 ms link
            # waited 0.25 s an epoch for it, its CPU time was 0.27 s).
            count = fio_tar_scan(start + total, <size_t>view.len - total, found,
                                 _FRAMING_BATCH, &consumed, &needed, &at_end, &error)
            for index in range(count):
                member = &found[index]
                members += 1
                if member.typeflag != 0 and member.typeflag != 48 and member.typeflag != 55:
                    continue  # only regular files ("0", NUL, "7") are sample members
                joined = None
                name = start + total + member.name_offset
                name_length = member.name_length
                if member.prefix_length:  # a ustar path in two fields
                    joined = (start[total + member.prefix_offset:
                                    total + member.prefix_offset + member.prefix_length]
                              + b"/" + name[:name_length])
                    name = <const unsigned char *>PyBytes_AS_STRING(joined)
                    name_length += member.prefix_length + 1
                if memchr(name, 10, name_length) != NULL:
                    # A newline changes what webdataset's regex matches: its own rule decides.
                    full_name = PyUnicode_DecodeUTF8(<const char *>name, name_length,
                                                     "surrogateescape")
                    parts = split_name(full_name)
                    if parts is None:
                        continue
                    key_bytes = parts[0].encode("utf-8", "surrogateescape")
                    joined = key_bytes
                    extension = parts[1]
                    name = <const unsigned char *>PyBytes_AS_STRING(key_bytes)
                    key_length = len(key_bytes)
                else:
                    slash = fio_memrchr(name, 47, name_length)
                    base = name if slash == NULL else slash + 1
                    base_length = name_length - <size_t>(base - name)
                    dot = <const unsigned char *>memchr(base, 46, base_length)
                    if dot == NULL or dot == base:
                        continue  # webdataset skips names without an extension
                    key_length = <size_t>(dot - name)
                    extension = PyUnicode_DecodeUTF8(
                        <const char *>dot + 1, name_length - key_length - 1, "surrogateescape")
                    if _has_upper(dot + 1, name_length - key_length - 1):
                        extension = extension.translate(_ASCII_LOWER)  # as webdataset lowers it
                header_offset = total + member.header_offset
                if (sample is None or key_length != open_length
                        or memcmp(name, open_key, key_length) != 0):
                    if sample is not None:
                        samples.append(sample)
                        starts.append(first_sample)
                        ends.append(last_end)
                    sample = {"__key__": PyUnicode_DecodeUTF8(<const char *>name, key_length,
                                                              "surrogateescape"),
                              "__url__": url}
                    first_sample = header_offset
                    open_key, open_length, open_joined = name, key_length, joined
                elif PyDict_Contains(sample, extension):
                    # The rule splits a name at a dot: the name is key "." extension.
                    result.repeat = (header_offset, sample["__key__"] + "." + extension)
                    stopped = True
                    break
                if not samples:
                    first_offsets.append(header_offset)
                PyDict_SetItem(sample, extension,
                               _member_value(memory, own, start, total + member.data_offset,
                                             member.size, copies, &copy_count, &copy_bytes))
                last_end = total + member.data_offset + (member.size + 511) // 512 * 512
            _copy_pending(copies, &copy_count, &copy_bytes)
            if stopped:
                break
            if error.kind:
                error.offset += total
            total += consumed
            if error.kind or at_end or count < _FRAMING_BATCH:
                break
    finally:
        # After an exception too, while the buffer is held: no value is left
        # unfilled behind it.
        _copy_pending(copies, &copy_count, &copy_bytes)
        PyBuffer_Release(&view)
        free(found)
        free(copies)
    if sample is not None:
        samples.append(sample)
        starts.append(first_sample)
        ends.append(last_end)
    result.samples = samples
    result.starts = starts
    result.ends = ends
    result.first_offsets = first_offsets
    result.members = members
    result.consumed = total
    result.needed = needed
    result.at_end = at_end
    if error.kind:
        result.error = _frame_error(_TAR_ERRORS[error.kind], error.offset, members)
    return result


_CRC_KERNELS = {"auto": 0, "portable": 1, "sse42": 2, "fold": 3}


def crc32c_kernels():
    """The CRC-32C kernels this CPU runs (``auto`` picks the fastest)."""
    return [name for name, kernel in _CRC_KERNELS.items() if fio_crc32c_supported(kernel)]


def crc32c(object data, unsigned int value=0, str kernel="auto"):
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value`` (the CRC of the
    bytes before it): ``crc32c(b, crc32c(a)) == crc32c(a + b)``. ``kernel``
    forces one of ``crc32c_kernels()``: ``portable`` is the table-driven code
    CPUs without CRC instructions run, ``sse42`` the crc32 instruction, ``fold``
    carry-less multiplication over 512-bit lanes."""
    cdef Py_buffer view
    cdef uint32_t result
    cdef int chosen = _CRC_KERNELS.get(kernel, -1)
    if chosen < 0 or not fio_crc32c_supported(chosen):
        raise ValueError(f"CRC-32C kernel {kernel!r} is not one of {crc32c_kernels()}")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            result = fio_crc32c_kernel(chosen, value, view.buf, <size_t>view.len)
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


def scan_tfrecords(object data, bint verify=True, bint data_checks=True):
    """Find the complete TFRecord records at the start of ``data``.

    Returns a :class:`TFRecordScan`. Records before a checksum mismatch are
    found, and ``error`` describes it (kind ``"length_crc"`` or
    ``"data_crc"``); a record cut off at the end is left for the next scan.
    Without ``data_checks`` only the lengths' checksums are checked (the
    data's are left to :func:`check_tfrecords`). Runs without the GIL.
    """
    cdef Py_buffer view
    cdef fio_record *found = <fio_record *>malloc(_FRAMING_BATCH * sizeof(fio_record))
    cdef uint64_t *parts = <uint64_t *>malloc(_FRAMING_BATCH * sizeof(uint64_t))
    cdef array.array offsets = array.clone(_OFFSETS, 0, False)
    cdef array.array lengths = array.clone(_OFFSETS, 0, False)
    cdef size_t total = 0, consumed = 0, needed = 0, count = 0, index
    cdef fio_frame_error error
    cdef const unsigned char *start
    cdef int checks = 0
    cdef TFRecordScan scan = TFRecordScan.__new__(TFRecordScan)
    if found == NULL or parts == NULL:
        free(found)
        free(parts)
        raise MemoryError()
    error.kind = 0
    if verify:
        checks = FIO_TFRECORD_VERIFY if data_checks else FIO_TFRECORD_LENGTHS
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        start = <const unsigned char *>view.buf
        while True:
            with nogil:
                count = fio_tfrecord_scan(start + total, <size_t>view.len - total, checks,
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


def check_tfrecords(object data, array.array offsets, array.array lengths, Py_ssize_t start,
                    Py_ssize_t most_records, uint64_t most_bytes):
    """The data checksums of records from ``start`` on (data offsets and
    lengths in ``data``, as :func:`scan_tfrecords` found them): at most
    ``most_records`` of them, and no more once they hold ``most_bytes``
    (but one at least). Returns ``(stop, bad)``: the end of the records
    checked, and the first whose checksum does not match (``stop`` where
    all do). Checked without the GIL."""
    cdef Py_buffer view
    cdef size_t found, end, stop, total = len(offsets)
    cdef uint64_t held = 0
    if offsets.typecode != "Q" or lengths.typecode != "Q" or len(lengths) != len(offsets):
        raise TypeError("offsets and lengths are arrays of typecode 'Q' and one length")
    if not 0 <= start < <Py_ssize_t>total or most_records < 1:
        raise IndexError(f"record {start} of {total}, at most {most_records}")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        stop = <size_t>start
        while stop < total and stop - <size_t>start < <size_t>most_records and (
                held < most_bytes or stop == <size_t>start):
            end = offsets.data.as_ulonglongs[stop] + lengths.data.as_ulonglongs[stop] + 4
            if end > <size_t>view.len:
                raise IndexError(f"record {stop} lies past the data's end")
            held += lengths.data.as_ulonglongs[stop]
            stop += 1
        with nogil:
            found = fio_tfrecord_check(<const unsigned char *>view.buf,
                                       <const uint64_t *>offsets.data.as_ulonglongs + start,
                                       <const uint64_t *>lengths.data.as_ulonglongs + start,
                                       stop - <size_t>start)
    finally:
        PyBuffer_Release(&view)
    return <Py_ssize_t>stop, start + <Py_ssize_t>found


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
