/*
 * The footer of a local Arrow IPC file, the headers of its record batches and
 * its schema message, read in one pass without Python: what laying the file
 * out needs (its record batches' places and rows), about 10 us a file where
 * the page cache holds them. A file it cannot read so (colder, damaged,
 * laid out unusually) is left to the reading through fastio's reader, which
 * reports what is wrong with it.
 */
#ifndef FASTIO_ARROW_SCAN_H
#define FASTIO_ARROW_SCAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct fio_arrow_block {
    int64_t offset; /* of the message, in the file */
    int32_t meta;   /* bytes of its metadata (prefix, flatbuffer and padding) */
    int64_t body;   /* bytes of its body, after them */
    int64_t rows;   /* rows of a record batch (its header's length) */
} fio_arrow_block;

typedef struct fio_arrow_file {
    uint64_t size;
    uint8_t *tail; /* the file's last tail_length bytes, from tail_start: its footer on */
    uint64_t tail_start, tail_length;
    uint8_t *head; /* the file's first head_length bytes: to its schema message's end */
    uint64_t head_length;
    fio_arrow_block *blocks; /* the record batches', then the dictionaries' */
    size_t batches, dictionaries;
} fio_arrow_file;

/* Reads `path`'s footer (its last `first_bytes`, or more where the footer is
 * longer), each record batch's metadata and its first `first_bytes` (or up to
 * `schema_max` where its schema message is longer), where the page cache
 * holds every byte of each read (none waits for the device). Returns 1 with
 * *out filled (free it with fio_arrow_file_free), or 0 with nothing held: a
 * file to read the other way. An Arrow IPC stream (no footer) is walked
 * message by message instead: its head is then its schema message, its tail
 * empty (tail_start is its size), its blocks those of its messages. */
int fio_arrow_scan(const char *path, uint64_t first_bytes, uint64_t schema_max,
                   fio_arrow_file *out);

void fio_arrow_file_free(fio_arrow_file *file);

/* The record batch blocks, then the dictionary blocks, of the footer
 * flatbuffer `footer` (`n` bytes): 0 with *blocks allocated (free it), or -1
 * for a footer that points outside itself (nothing allocated). */
int fio_arrow_footer(const uint8_t *footer, uint64_t n, fio_arrow_block **blocks,
                     size_t *batches, size_t *dictionaries);

/* What a message's metadata says: its prefix (8 bytes: the continuation
 * marker and the length; 4 before format 1.0: the length alone), the length
 * after it, its header's type, its body's length and (a record batch's)
 * rows. */
enum { FIO_ARROW_SCHEMA = 1, FIO_ARROW_DICTIONARY = 2, FIO_ARROW_RECORD_BATCH = 3 };

typedef struct fio_arrow_message_info {
    int64_t prefix, length;
    int type;
    int64_t body, rows;
} fio_arrow_message_info;

/* Parses the message metadata in `data` (`n` bytes from its prefix on): 0 with
 * *info filled, or -1 where it is damaged (no header, outside the bytes, a
 * negative length or row count). */
int fio_arrow_message(const uint8_t *data, uint64_t n, fio_arrow_message_info *info);

/* The rows of the record batch message in `data` (`n` bytes from its
 * continuation marker or length: its header's length), or -1 where the
 * message is damaged (no header, outside the bytes, a negative count). */
int64_t fio_arrow_message_rows(const uint8_t *data, uint64_t n);

#endif
