# Read buffers: aligned memory that exposes the buffer protocol and counts the
# views alive, carved from huge-page-advised regions; and ranges of files
# mapped from the page cache in their place.
cimport cython
from cpython.buffer cimport (PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_WRITABLE,
                             PyBuffer_Release, PyObject_GetBuffer)
from libc.errno cimport EINVAL
from libc.errno cimport errno as c_errno
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, mmap, munmap
from posix.stdlib cimport posix_memalign

import os

DIRECT_ALIGNMENT = 4096
"""Alignment of offsets, lengths and addresses that O_DIRECT reads use here.
4096 satisfies every logical block size Linux devices report (512 or 4096)."""


cdef class Region:
    """A huge-page-advised memory mapping that :class:`AlignedBuffer` objects are
    carved from; unmapped when the last buffer referring to it is gone."""

    def __cinit__(self, size_t size, bint huge=True, bint populate=True):
        cdef int rc
        with nogil:  # faulting in a region can take milliseconds: other threads go on
            rc = fio_region_map(&self._region, size, huge, populate)
        if rc < 0:
            raise MemoryError(f"cannot map {size} bytes: {os.strerror(-rc)}")

    def __dealloc__(self):
        fio_region_unmap(&self._region)

    def __len__(self):
        return self._region.size


def prefault(object buffer):
    """Fault in the pages of writable ``buffer`` now, without the GIL: what a
    region mapped with ``populate`` does up front, done where the memory is
    about to be written (a thread waiting for the network) rather than where
    it is handed out. An :class:`AlignedBuffer` (or a view of one) remembers
    what was faulted in, and is not walked again: asking the kernel again
    for pages already there took a third of a millisecond per 4 MiB of a
    busy machine's CPU, a remote epoch's buffers being reused hundreds of
    times."""
    cdef Py_buffer view
    cdef AlignedBuffer owner = None
    cdef Py_ssize_t start = 0, end
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        exporter = buffer.obj if isinstance(buffer, memoryview) else buffer
        if isinstance(exporter, AlignedBuffer):
            owner = <AlignedBuffer>exporter
            start = <char *>view.buf - owner._data
            end = start + view.len
            if 0 <= start <= end <= owner._populated:
                return
        with nogil:
            fio_prefault(view.buf, <size_t>view.len)
        if owner is not None and 0 <= start <= owner._populated:
            owner._populated = max(owner._populated, end)
    finally:
        PyBuffer_Release(&view)


HUGE_PAGE = FIO_HUGE_PAGE
"""Size of the transparent huge pages read buffers are carved from."""


def allocate_buffers(Py_ssize_t size, Py_ssize_t count, bint huge=True, bint populate=True):
    """``count`` buffers of ``size`` bytes (a multiple of 4096) carved from one
    huge-page-advised region, so each is physically contiguous where the kernel
    grants huge pages (see native/hugemem.h for why reads care); with
    ``huge=False``, from ordinary pages (quicker to map when memory is full).
    With ``populate`` (the default) the pages are faulted in now; without,
    by the first write into them."""
    if size <= 0 or size % DIRECT_ALIGNMENT or count <= 0:
        raise ValueError(f"need a positive multiple of {DIRECT_ALIGNMENT} bytes and count, "
                         f"not {size} x {count}")
    region = Region(size * count, huge, populate)
    return [AlignedBuffer(size, DIRECT_ALIGNMENT, region, index * size)
            for index in range(count)]


cdef inline void _flat_bytes(Py_buffer *buffer, char *data, Py_ssize_t *size,
                             Py_ssize_t *itemsize, bint readonly, int flags):
    """Describes ``*size`` bytes at ``data`` in ``buffer`` (a flat array of
    unsigned bytes); the caller sets its owner. ``size`` and ``itemsize``
    point into the owner, which the view keeps alive."""
    buffer.buf = data
    buffer.len = size[0]
    buffer.readonly = readonly
    buffer.itemsize = 1
    if flags & PyBUF_FORMAT:
        buffer.format = b"B"
    else:
        buffer.format = NULL
    buffer.ndim = 1
    buffer.shape = size if flags & PyBUF_ND else NULL
    buffer.strides = itemsize if flags & PyBUF_STRIDES else NULL
    buffer.suboffsets = NULL
    buffer.internal = NULL


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
        self._alignment = alignment

    def __dealloc__(self):
        if self._owns_data:
            free(self._data)

    def __len__(self):
        return self._size

    @property
    def address(self):
        return <uintptr_t>self._data

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        _flat_bytes(buffer, self._data, &self._size, &self._itemsize, False, flags)
        buffer.obj = self
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __repr__(self):
        return (f"<AlignedBuffer size={self._size} alignment={self._alignment} "
                f"exports={self.exports}>")


@cython.no_gc
cdef class MappedRange:
    """Bytes of a file mapped read-only from the page cache: what a read
    would copy into a buffer, without the copy (see :func:`map_resident`).
    Exposes the buffer protocol, read-only; ``exports`` counts views alive
    right now. Unmapped when the last reference is gone."""

    def __cinit__(self):
        self._base = NULL
        self._itemsize = 1

    def __init__(self):
        raise TypeError("a MappedRange is made by map_resident()")

    def __dealloc__(self):
        cdef void *base = self._base
        cdef size_t mapped = self._mapped
        if base != NULL:
            self._base = NULL
            # Unmapping takes its page-table entries out, and the other
            # threads' TLB entries (0.1 ms for 3 MB): the reader's loop and
            # the consumer go on meanwhile.
            with nogil:
                munmap(base, mapped)

    def __len__(self):
        return self._size

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a mapped range of a file is read-only")
        _flat_bytes(buffer, self._data, &self._size, &self._itemsize, True, flags)
        buffer.obj = self
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __repr__(self):
        return f"<MappedRange size={self._size} exports={self.exports}>"


def map_resident(int fd, long long offset, Py_ssize_t length):
    """Bytes ``offset..offset + length`` of the local file ``fd`` as a
    :class:`MappedRange`, where the page cache holds all of them (its length
    is shorter where the file ends first); else None: read them. Mapping
    cached pages enters them in the page tables (no copy, no wait for the
    device), without the GIL. Raises OSError where the file cannot be
    looked at."""
    if offset < 0 or length < 0:
        raise ValueError(f"need offset and length >= 0, not {offset}, {length}")
    cdef void *base = NULL
    cdef uint64_t mapped = 0, available = 0
    cdef int rc
    with nogil:
        rc = fio_map_resident(fd, <uint64_t>offset, <uint64_t>length, &base, &mapped,
                              &available)
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    if rc == 0:
        return None
    return _mapped_range(base, <size_t>mapped, <Py_ssize_t>(mapped - available),
                         <Py_ssize_t>available)


def map_file(int fd, Py_ssize_t length):
    """Bytes ``0..length`` of the local file ``fd`` mapped read-only as a
    :class:`MappedRange` (``length`` past its end: a touch there is SIGBUS),
    shared with the page cache: each page is entered as it is first touched
    (read from the device then, where the cache lacks it), none copied, and
    pages never touched cost nothing. Raises OSError where the file cannot
    be mapped (a filesystem that maps nothing) or ``length`` is not
    positive."""
    if length <= 0:
        raise OSError(EINVAL, f"cannot map {length} bytes")
    cdef void *base
    with nogil:
        base = mmap(NULL, <size_t>length, PROT_READ, MAP_SHARED, fd, 0)
    if base == MAP_FAILED:
        code = c_errno
        raise OSError(code, os.strerror(code))
    return _mapped_range(base, <size_t>length, 0, length)


cdef MappedRange _mapped_range(void *base, size_t mapped, Py_ssize_t lead, Py_ssize_t size):
    """The :class:`MappedRange` of the ``mapped`` bytes at ``base`` (which it
    unmaps), exposing ``size`` of them from ``lead`` on."""
    cdef MappedRange mapping = MappedRange.__new__(MappedRange)
    mapping._base = base
    mapping._mapped = mapped
    mapping._data = <char *>base + lead
    mapping._size = size
    return mapping


# glibc's malloc thresholds (see fastio/shared/_heap.py); elsewhere nothing.
cdef extern from *:
    """
    #if defined(__GLIBC__)
    #include <malloc.h>
    static int fio_mallopt(int param, int value) { return mallopt(param, value); }
    #else
    static int fio_mallopt(int param, int value) { (void)param; (void)value; return 0; }
    #endif
    """
    int fio_mallopt(int param, int value) nogil


def set_malloc_option(int param, int value):
    """glibc's ``mallopt(param, value)``: whether it took the setting (False
    without glibc). What ctypes would call, without loading a library."""
    return fio_mallopt(param, value) == 1
