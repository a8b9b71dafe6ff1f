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

    int FIO_FEATURE_BYTES
    int FIO_FEATURE_FLOAT
    int FIO_FEATURE_INT64

    ctypedef struct fio_feature:
        uint64_t name_offset
        uint64_t list_offset
        uint64_t list_length
        uint64_t count
        uint32_t name_length
        int kind

    int64_t fio_example_features(const unsigned char *record, size_t len, fio_feature *out,
                                 size_t max_out, const char **what)
    void fio_feature_int64s(const unsigned char *record, const fio_feature *feature,
                            int64_t *values)
    void fio_feature_floats(const unsigned char *record, const fio_feature *feature,
                            float *values)
    void fio_feature_bytes(const unsigned char *record, const fio_feature *feature,
                           fio_record *values)


cdef extern from "columnar.h" nogil:
    struct ArrowSchema:
        void (*release)(ArrowSchema *)

    struct ArrowArray:
        int64_t length
        void (*release)(ArrowArray *)

    unsigned int FIO_COLUMN_MAX_BYTES

    void fio_export_release(ArrowSchema *schema, ArrowArray *array)

    ctypedef struct fio_records:
        size_t count
        size_t rows
        uint64_t bytes

    void fio_records_free(fio_records *records)
    int fio_tfrecord_collect(const unsigned char *buf, size_t len, int verify, uint64_t max_bytes,
                             fio_records *out, size_t *rows, size_t *consumed, size_t *needed,
                             int *full, fio_frame_error *error)
    int fio_lines_collect(const unsigned char *buf, size_t len, const unsigned char *prefix,
                          size_t prefix_length, int final, uint64_t max_bytes,
                          fio_records *out, size_t *rows, size_t *consumed, int *full)
    int fio_records_export(fio_records *records, const char *name, ArrowSchema *schema,
                           ArrowArray *array)

    ctypedef struct fio_wds:
        pass

    ctypedef struct fio_wds_result:
        size_t rows
        size_t consumed
        size_t needed
        size_t members
        int at_end
        int full
        fio_frame_error error
        size_t error_members

    fio_wds *fio_wds_new()
    void fio_wds_free(fio_wds *wds)
    size_t fio_wds_columns(const fio_wds *wds)
    void fio_wds_reset_columns(fio_wds *wds)
    size_t fio_wds_rows(const fio_wds *wds)
    int fio_wds_scan(fio_wds *wds, const unsigned char *buf, size_t len, int final,
                     uint64_t max_bytes, fio_wds_result *result)
    int fio_wds_export(fio_wds *wds, const char *url, size_t url_length, ArrowSchema *schema,
                       ArrowArray *array)


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


cdef class ArrowBatch:
    cdef ArrowSchema *_schema
    cdef ArrowArray *_array
    cdef readonly Py_ssize_t num_rows


cdef class Collector:
    cdef list _held  # memoryviews of the buffers that collected records point into

    cdef int _collected(self, int rc, size_t rows, object view) except -1


cdef class RecordColumns(Collector):
    cdef fio_records _records
    cdef bytes _name


cdef class TarColumns(Collector):
    cdef fio_wds *_wds
