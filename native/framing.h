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
 * SSE4.2 instruction where the CPU has it. */
uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len);

/* The table-driven CRC-32C that CPUs without CRC instructions use; exposed so
 * tests check it on machines that would never run it otherwise. */
uint32_t fio_crc32c_portable(uint32_t crc, const void *data, size_t len);

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

/* TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, the
 * data, uint32 masked CRC-32C of the data (little-endian). Finds up to
 * `max_out` complete records from the start of `buf`. Stops early at a record
 * that is not complete yet, or at a checksum mismatch (when `verify`), which it
 * describes in `error`. `*consumed` is where the next scan should start;
 * `*needed` is how many bytes from there the next record needs in all (as far
 * as its header tells; 0 when the scan did not stop at an incomplete record). */
size_t fio_tfrecord_scan(const uint8_t *buf, size_t len, int verify, fio_record *out,
                         size_t max_out, size_t *consumed, size_t *needed,
                         fio_frame_error *error);

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

#endif
