# Record framing (framing.h): records found in place, and what a scan says about them.
from cpython cimport array
from libc.stdint cimport int64_t, uint32_t, uint64_t


cdef extern from "framing.h" nogil:
    ctypedef struct fio_record:
        uint64_t offset
        uint64_t length

    ctypedef struct fio_frame_error:
        int kind
        uint64_t offset

    uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len)
    int fio_crc32c_supported(int kernel)
    uint32_t fio_crc32c_kernel(int kernel, uint32_t crc, const void *data, size_t len)
    size_t fio_tfrecord_scan(const unsigned char *buf, size_t len, int verify, fio_record *out,
                             size_t max_out, size_t *consumed, size_t *needed,
                             fio_frame_error *error)
    size_t fio_tfrecord_check(const unsigned char *buf, const uint64_t *offsets,
                              const uint64_t *lengths, size_t count)
    enum:
        FIO_TFRECORD_LENGTHS
        FIO_TFRECORD_VERIFY
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


cdef class FrameError:
    cdef readonly str kind
    cdef readonly uint64_t offset
    cdef readonly size_t index


cdef class Scan:
    cdef readonly size_t consumed
    cdef readonly size_t needed
    cdef readonly bint at_end
    cdef readonly FrameError error


cdef class TFRecordScan(Scan):
    cdef readonly array.array offsets
    cdef readonly array.array lengths


cdef class LineScan(Scan):
    cdef readonly array.array ends


cdef class TarMember:
    cdef readonly str name
    cdef readonly uint64_t data_offset
    cdef readonly uint64_t size
    cdef readonly str typeflag
    cdef readonly uint64_t header_offset


cdef class TarScan(Scan):
    cdef readonly list members


cdef class TarSamples(Scan):
    cdef readonly list samples
    cdef readonly array.array starts
    cdef readonly array.array ends
    cdef readonly array.array first_offsets
    cdef readonly size_t members
    cdef readonly object repeat
