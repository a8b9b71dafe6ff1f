/*
 * Record framing: find records in bytes the reader filled, in place.
 *
 * Scanners return offsets into the caller's buffer (records are views, never
 * copies) and how many bytes they consumed: a record cut off at the end of the
 * buffer is left for the next call, after the caller appends the next chunk.
 * Nothing here allocates, blocks or touches Python: the binding runs it
 * without the GIL.
 */
#ifndef FASTIO_FRAMING_H
#define FASTIO_FRAMING_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli). `crc` is the value of the bytes before `data` (0 for
 * none), so fio_crc32c(fio_crc32c(0, a), b) == fio_crc32c(0, a + b). Uses the
 * fastest kernel the CPU has (enum fio_crc_kernel). */
uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len);

/* The kernels, each selectable so tests check every one the CPU can run, not
 * only the one it would pick. */
enum fio_crc_kernel {
    FIO_CRC_AUTO = 0,
    FIO_CRC_PORTABLE = 1, /* table-driven: CPUs without CRC instructions */
    FIO_CRC_SSE42 = 2,    /* the crc32 instruction, three streams */
    FIO_CRC_FOLD = 3,     /* carry-less multiplication over 512-bit lanes (VPCLMULQDQ) */
};

/* Whether this CPU runs `kernel`. */
int fio_crc32c_supported(int kernel);

/* fio_crc32c by the given kernel, which must be supported. */
uint32_t fio_crc32c_kernel(int kernel, uint32_t crc, const void *data, size_t len);

typedef struct fio_record {
    uint64_t offset; /* of the record's data within the buffer */
    uint64_t length;
} fio_record;

enum fio_frame_error_kind {
    FIO_FRAME_OK = 0,
    FIO_FRAME_LENGTH_CRC = 1, /* the length field's checksum does not match */
    FIO_FRAME_DATA_CRC = 2,   /* the data's checksum does not match */
};

typedef struct fio_frame_error {
    int kind;        /* enum fio_frame_error_kind */
    uint64_t offset; /* of the record's header within the buffer */
} fio_frame_error;

/* What fio_tfrecord_scan checks: the length's checksum, the data's, or both. */
enum fio_tfrecord_checks {
    FIO_TFRECORD_LENGTHS = 1,
    FIO_TFRECORD_DATA = 2,
    FIO_TFRECORD_VERIFY = 3,
};

/* TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, the
 * data, uint32 masked CRC-32C of the data (little-endian). Finds up to
 * `max_out` complete records from the start of `buf`. Stops early at a record
 * that is not complete yet, or at a checksum mismatch of the kinds `verify`
 * (enum fio_tfrecord_checks) asks for, which it describes in `error`.
 * `*consumed` is where the next scan should start;
 * `*needed` is how many bytes from there the next record needs in all (as far
 * as its header tells; 0 when the scan did not stop at an incomplete record). */
size_t fio_tfrecord_scan(const uint8_t *buf, size_t len, int verify, fio_record *out,
                         size_t max_out, size_t *consumed, size_t *needed,
                         fio_frame_error *error);

/* The first of `count` records (data offsets and lengths in `buf`, as
 * fio_tfrecord_scan found them) whose data checksum does not match; `count`
 * where all do. Checking a few records at a time right before their data is
 * copied out reads the data from memory once for both. */
size_t fio_tfrecord_check(const uint8_t *buf, const uint64_t *offsets, const uint64_t *lengths,
                          size_t count);

/* Line framing: the end offsets (the positions of '\n') of up to `max_out`
 * complete lines at the start of `buf`; `*consumed` is just past the last one. */
size_t fio_split_lines(const uint8_t *buf, size_t len, uint64_t *ends, size_t max_out,
                       size_t *consumed);

/* ---- tar (ustar, GNU long names, pax) ---- */

typedef struct fio_tar_member {
    uint64_t header_offset; /* first block of the member, its long-name/pax blocks included */
    uint64_t data_offset;
    uint64_t size;
    /* The member's name is prefix + "/" + name when prefix_length > 0 (ustar),
     * else name alone; both are byte ranges of the buffer (header fields, a GNU
     * long-name block or a pax "path" record). */
    uint64_t name_offset;
    uint64_t prefix_offset;
    uint32_t name_length;
    uint32_t prefix_length;
    char typeflag; /* '0' regular file (also '\0', '7'), '5' directory, ... */
} fio_tar_member;

enum fio_tar_error_kind {
    FIO_TAR_OK = 0,
    FIO_TAR_CHECKSUM = 1, /* a header block's checksum does not match */
    FIO_TAR_BAD_NUMBER = 2, /* a size field is not a number */
    FIO_TAR_BAD_PAX = 3,    /* a pax extended header is malformed */
};

enum fio_tar_step {
    FIO_TAR_MEMBER = 0,     /* a complete member: its header blocks and padded data */
    FIO_TAR_CUT_HEADER = 1, /* the header blocks are not all there yet */
    FIO_TAR_CUT_DATA = 2,   /* the header is there (member filled in), not all its data */
    FIO_TAR_END = 3,        /* the end-of-archive marker (a zero block) */
    FIO_TAR_ERROR = 4,      /* a damaged header block, described in `error` */
};

/* One member at the start of `buf` (which starts on a header block): returns
 * an enum fio_tar_step. For a member, even one whose data is cut, `member` is
 * filled in with offsets from `buf` (header_offset 0); `*span` is the bytes
 * the member takes (its long-name and pax blocks, header and padded data), as
 * far as the blocks present tell when it is cut. fio_tar_scan is a loop of it. */
int fio_tar_next(const uint8_t *buf, size_t len, fio_tar_member *member, size_t *span,
                 fio_frame_error *error);

/* Finds up to `max_out` complete members (header and padded data present) at
 * the start of `buf`, which must start on a header block. Stops at an
 * incomplete member, at the end-of-archive marker (two zero blocks; `*at_end`
 * set) or at an error (`error`). `*consumed` is where the next scan starts;
 * `*needed` is how many bytes from there the next member needs, as far as the
 * header blocks present tell (it can grow as long-name and pax blocks arrive;
 * 0 when the scan did not stop at an incomplete member).
 * Pax global headers are skipped; a pax extended header's path and size apply
 * to the member that follows it. */
size_t fio_tar_scan(const uint8_t *buf, size_t len, fio_tar_member *out, size_t max_out,
                    size_t *consumed, size_t *needed, int *at_end, fio_frame_error *error);

/* ---- tf.train.Example (protobuf wire format) ---- */

enum fio_feature_kind {
    FIO_FEATURE_NONE = 0, /* a Feature with no value list */
    FIO_FEATURE_BYTES = 1,
    FIO_FEATURE_FLOAT = 2,
    FIO_FEATURE_INT64 = 3,
};

typedef struct fio_feature {
    uint64_t name_offset; /* of the map entry's key within the record */
    uint64_t list_offset; /* of its BytesList, FloatList or Int64List message */
    uint64_t list_length;
    uint64_t count; /* values in the list */
    uint32_t name_length;
    int kind; /* enum fio_feature_kind: the first value list of the Feature */
} fio_feature;

/* The features of a serialized tf.train.Example (Features map<string, Feature>)
 * in the order the record lists them; a name given twice is there twice (the
 * later one wins in a map). Every field walked is checked, so that reading the
 * values afterwards cannot fail. Returns how many features there are (those
 * past `max_out` are counted, not stored), or -1 for a malformed record, with
 * `*what` saying why. */
int64_t fio_example_features(const uint8_t *record, size_t len, fio_feature *out,
                             size_t max_out, const char **what);

/* A feature's values: int64s (varints, packed or not, as two's complement),
 * float32s (packed or not), or the byte strings' offsets within `record`. */
void fio_feature_int64s(const uint8_t *record, const fio_feature *feature, int64_t *values);
void fio_feature_floats(const uint8_t *record, const fio_feature *feature, float *values);
void fio_feature_bytes(const uint8_t *record, const fio_feature *feature, fio_record *values);

#endif
