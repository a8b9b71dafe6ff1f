# Read buffers: aligned memory, carved from huge-page-advised regions (hugemem.h),
# and ranges of files mapped from the page cache (residency.h).

from libc.stdint cimport uint64_t

cdef extern from "hugemem.h" nogil:
    size_t FIO_HUGE_PAGE

    ctypedef struct fio_region:
        char *data
        size_t size

    int fio_region_map(fio_region *region, size_t size, int huge, int populate)
    void fio_region_unmap(fio_region *region)
    void fio_prefault(void *data, size_t len)


cdef class Region:
    cdef fio_region _region


cdef class AlignedBuffer:
    cdef char *_data
    cdef Py_ssize_t _size
    cdef Py_ssize_t _itemsize
    cdef Region _owner  # the region the bytes are carved from, kept alive with them
    cdef bint _owns_data  # allocated by us (posix_memalign): free it
    cdef Py_ssize_t _alignment
    cdef Py_ssize_t _populated  # bytes from the start known to be faulted in
    cdef readonly Py_ssize_t exports

cdef extern from "residency.h" nogil:
    int fio_map_resident(int fd, uint64_t offset, uint64_t length, void **base,
                         uint64_t *mapped, uint64_t *available)


cdef class MappedRange:
    cdef void *_base  # the mapping, from the page holding the range's first byte
    cdef size_t _mapped
    cdef char *_data
    cdef Py_ssize_t _size
    cdef Py_ssize_t _itemsize
    cdef readonly Py_ssize_t exports
