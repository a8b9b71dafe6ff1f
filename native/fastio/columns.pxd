# Columnar gathering (columnar.h): records copied once into Arrow record batches.
from libc.stdint cimport int32_t, uint64_t


cdef extern from "columnar.h" nogil:
    struct ArrowSchema:
        void (*release)(ArrowSchema *)

    struct ArrowArray:
        void (*release)(ArrowArray *)

    unsigned int FIO_COLUMN_MAX_BYTES

    void fio_stream_copy(unsigned char *to, const unsigned char *source, size_t length)

    void fio_export_release(ArrowSchema *schema, ArrowArray *array)

    ctypedef struct fio_piece:
        const unsigned char *data
        uint64_t length
        uint64_t position
        int joins

    ctypedef struct fio_records:
        fio_piece *pieces
        size_t count
        size_t rows
        uint64_t bytes

    void fio_records_free(fio_records *records)
    int fio_tfrecord_collect(const unsigned char *buf, size_t len, uint64_t base, int verify,
                             uint64_t max_bytes, fio_records *out, size_t *rows,
                             size_t *consumed, size_t *needed, int *full,
                             fio_frame_error *error)
    int fio_lines_collect(const unsigned char *buf, size_t len, const unsigned char *prefix,
                          size_t prefix_length, int final, uint64_t max_bytes,
                          fio_records *out, size_t *rows, size_t *consumed, int *full)
    int fio_records_export(fio_records *records, const char *name, ArrowSchema *schema,
                           ArrowArray *array)

    int FIO_EXAMPLES_UNTYPED
    int fio_examples_check(const fio_records *records, size_t first, size_t *bad,
                           const char **what)

    ctypedef struct fio_records_span:
        const fio_records *records
        size_t first
        size_t rows

    int fio_examples_gather(const fio_records_span *spans, size_t span_count,
                            ArrowSchema *schema, ArrowArray *array)
    fio_records *fio_records_detach(fio_records *records)

    ctypedef struct fio_examples_builder:
        pass

    fio_examples_builder *fio_examples_builder_new(size_t rows)
    void fio_examples_builder_free(fio_examples_builder *builder)
    int fio_examples_builder_add(fio_examples_builder *builder, const fio_records_span *spans,
                                 size_t count)
    int fio_examples_builder_export(fio_examples_builder *builder, ArrowSchema *schema,
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
    uint64_t fio_wds_bytes(const fio_wds *wds)
    int fio_wds_scan(fio_wds *wds, const unsigned char *buf, size_t len, int final,
                     uint64_t max_bytes, fio_wds_result *result)
    int fio_wds_export(fio_wds *wds, const char *url, size_t url_length, ArrowSchema *schema,
                       ArrowArray *array)
    fio_wds *fio_wds_detach(fio_wds *wds)

    ctypedef struct fio_wds_span:
        const fio_wds *wds
        size_t first_row
        size_t rows
        size_t url

    int fio_wds_gather(const fio_wds_span *spans, size_t span_count, const char *urls,
                       const int32_t *url_offsets, size_t url_count, ArrowSchema *schema,
                       ArrowArray *array)

    ctypedef struct fio_wds_builder:
        pass

    fio_wds_builder *fio_wds_builder_new(size_t rows)
    void fio_wds_builder_free(fio_wds_builder *builder)
    size_t fio_wds_builder_rows(const fio_wds_builder *builder)
    int fio_wds_builder_add(fio_wds_builder *builder, const fio_wds_span *spans, size_t count)
    int fio_wds_builder_export(fio_wds_builder *builder, const char *urls,
                               const int32_t *url_offsets, size_t url_count,
                               ArrowSchema *schema, ArrowArray *array)


cdef class Collected(Scan):
    cdef readonly size_t rows
    cdef readonly size_t records
    cdef readonly bint full


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


cdef class TarRows:
    cdef fio_wds *_wds
    cdef list _held
    cdef readonly Py_ssize_t num_rows


cdef class TarBatch:
    cdef fio_wds_builder *_builder
    cdef list _urls
    cdef dict _url_index


cdef class ExampleBatch:
    cdef fio_examples_builder *_builder
    cdef readonly Py_ssize_t num_rows


cdef class ExampleRows:
    cdef fio_records *_records
    cdef list _held
    cdef readonly Py_ssize_t num_rows
