# Declarations for fastio._native: the C engine's interface and the binding's types.
from libc.stdint cimport int64_t, uint32_t, uint64_t


cdef extern from "engine.h" nogil:
    ctypedef struct fio_engine:
        pass

    ctypedef struct fio_completion:
        uint64_t tag
        int64_t result
        uint32_t slot

    int FIO_ENGINE_AUTO
    int FIO_ENGINE_URING
    int FIO_ENGINE_THREADS
    unsigned FIO_READ_DIRECT
    unsigned FIO_DIRECT_SECTOR

    int fio_engine_open(fio_engine **out, int kind, unsigned capacity,
                        unsigned max_threads, int *uring_errno)
    int fio_engine_kind(const fio_engine *engine)
    int fio_engine_eventfd(const fio_engine *engine)
    unsigned fio_engine_capacity(const fio_engine *engine)
    unsigned fio_engine_inflight(const fio_engine *engine)
    unsigned fio_engine_threads(const fio_engine *engine)
    int fio_engine_prep_read(fio_engine *engine, int fd, void *buf, size_t len,
                             uint64_t offset, uint64_t tag, unsigned flags)
    int fio_engine_flush(fio_engine *engine)
    int fio_engine_reap(fio_engine *engine, fio_completion *out, unsigned max)
    int fio_engine_wait(fio_engine *engine, int timeout_ms)
    void fio_engine_shutdown(fio_engine *engine)
    void fio_engine_destroy(fio_engine *engine)


cdef extern from "hugemem.h" nogil:
    size_t FIO_HUGE_PAGE

    ctypedef struct fio_region:
        void *mapping
        size_t mapped_len
        char *data
        size_t size

    int fio_region_map(fio_region *region, size_t size)
    void fio_region_unmap(fio_region *region)


cdef extern from "framing.h" nogil:
    ctypedef struct fio_record:
        uint64_t offset
        uint64_t length

    ctypedef struct fio_frame_error:
        int kind
        uint64_t offset

    uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len)
    uint32_t fio_crc32c_portable(uint32_t crc, const void *data, size_t len)
    size_t fio_tfrecord_scan(const unsigned char *buf, size_t len, int verify, fio_record *out,
                             size_t max_out, size_t *consumed, size_t *needed,
                             fio_frame_error *error)
    size_t fio_split_lines(const unsigned char *buf, size_t len, uint64_t *ends, size_t max_out,
                           size_t *consumed)

    ctypedef struct fio_tar_member:
        uint64_t header_offset
        uint64_t data_offset
        uint64_t size
        uint64_t name_offset
        uint64_t prefix_offset
        uint32_t name_length
        uint32_t prefix_length
        char typeflag

    size_t fio_tar_scan(const unsigned char *buf, size_t len, fio_tar_member *out,
                        size_t max_out, size_t *consumed, size_t *needed, int *at_end,
                        fio_frame_error *error)


cdef class Engine:
    cdef fio_engine *_engine
    cdef Py_buffer *_views
    cdef fio_completion *_completions
    cdef readonly str kind
    cdef readonly unsigned capacity
    cdef readonly int fallback_errno
    cdef readonly int owner_pid
    cdef bint _closed

    cdef fio_engine *_live(self) except NULL
    cdef int _reap_into(self, list results) except -1


cdef class Region:
    cdef fio_region _region


cdef class AlignedBuffer:
    cdef char *_data
    cdef Py_ssize_t _size
    cdef Py_ssize_t _itemsize
    cdef Region _owner  # the region the bytes are carved from, kept alive with them
    cdef bint _owns_data  # allocated by us (posix_memalign): free it
    cdef readonly Py_ssize_t alignment
    cdef readonly Py_ssize_t exports
