# The engine (engine.h): positional reads completed asynchronously.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


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
    unsigned fio_engine_inflight(const fio_engine *engine)
    unsigned fio_engine_threads(const fio_engine *engine)
    int fio_engine_prep_read(fio_engine *engine, int fd, void *buf, size_t len,
                             uint64_t offset, uint64_t tag, unsigned flags)
    int fio_engine_flush(fio_engine *engine)
    int fio_engine_reap(fio_engine *engine, fio_completion *out, unsigned max)
    int fio_engine_wait(fio_engine *engine, int timeout_ms)
    void fio_engine_shutdown(fio_engine *engine)
    void fio_engine_destroy(fio_engine *engine)


cdef extern from "residency.h" nogil:
    int FIO_RESIDENT_MAPPED
    int fio_resident_pages(int fd, uint64_t offset, uint64_t length, unsigned probes,
                           uint64_t window, int flags, uint64_t *resident, uint64_t *probed)
    void fio_read_resident(const char *const *paths, const uint64_t *offsets,
                           const uint64_t *lengths, char *const *dests, size_t count,
                           double least, uint64_t *got)


cdef extern from "arrow_scan.h" nogil:
    ctypedef struct fio_arrow_block:
        int64_t offset
        int32_t meta
        int64_t body
        int64_t rows
    ctypedef struct fio_arrow_file:
        uint64_t size
        uint8_t *tail
        uint64_t tail_start, tail_length
        uint8_t *head
        uint64_t head_length
        fio_arrow_block *blocks
        size_t batches, dictionaries
    int fio_arrow_scan(const char *path, uint64_t first_bytes, uint64_t schema_max,
                       fio_arrow_file *out)
    void fio_arrow_file_free(fio_arrow_file *file)
    int fio_arrow_footer(const uint8_t *footer, uint64_t n, fio_arrow_block **blocks,
                         size_t *batches, size_t *dictionaries)
    int64_t fio_arrow_message_rows(const uint8_t *data, uint64_t n)
    ctypedef struct fio_arrow_message_info:
        int64_t prefix, length
        int type
        int64_t body, rows
    int fio_arrow_message(const uint8_t *data, uint64_t n, fio_arrow_message_info *info)


cdef class Engine:
    cdef fio_engine *_engine
    cdef Py_buffer *_views
    cdef fio_completion *_completions
    cdef readonly str kind
    cdef readonly unsigned capacity
    cdef readonly int fallback_errno
    cdef int _owner_pid
    cdef bint _closed

    cdef fio_engine *_live(self) except NULL
    cdef int _reap_into(self, list results) except -1


cdef extern from "stamps.h" nogil:
    void fio_stat_stamps(const char *const *paths, size_t count, uint64_t round_trip_ns,
                         int64_t *stamps, int *errors)
    ctypedef struct fio_stamps_job:
        pass
    fio_stamps_job *fio_stamps_new(const char *const *paths, size_t count, int64_t *stamps,
                                   int *errors)
    void fio_stamps_run(fio_stamps_job *job, uint64_t round_trip_ns, size_t local_threads)
    void fio_stamps_help(fio_stamps_job *job)
    void fio_stamps_free(fio_stamps_job *job)
