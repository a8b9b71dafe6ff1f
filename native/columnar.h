/*
 * Columnar gathering: the records that framing finds, copied once into
 * Arrow's binary layout (int32 offsets, one contiguous data buffer and a
 * validity bitmap per column) and exported through the Arrow C data interface
 * as one record batch, so that Python makes one object per batch instead of
 * one per record.
 *
 * Collectors gather over several buffers: scanning one records where its
 * records are (pointers: the caller keeps the buffer alive and unchanged until
 * the batch is taken); taking the batch allocates the columns at their exact
 * sizes, copies the records in and hands the memory to the exported arrays,
 * whose release callbacks free it. Nothing here touches Python: the binding
 * runs it without the GIL.
 */
#ifndef FASTIO_COLUMNAR_H
#define FASTIO_COLUMNAR_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_export.h" /* the Arrow structs, and fio_export_release for a batch */
#include "framing.h"

/* Arrow's binary and string arrays count bytes with int32 offsets. */
#define FIO_COLUMN_MAX_BYTES 0x7fffffffu

/* Copies `length` bytes to a batch's buffer as fio_copy_value does (large
 * copies with non-temporal stores), the stores ordered before it returns. */
void fio_stream_copy(uint8_t *to, const uint8_t *from, size_t length);

/* ---- one binary column of records (TFRecord records, lines) ---- */

/* Records in the caller's buffers; a record may continue over several pieces
 * (a line cut by a chunk boundary: the carried start, then the rest). */
typedef struct fio_piece {
    const uint8_t *data;
    uint64_t length;
    uint64_t position; /* of a TFRecord's header in its shard */
    int joins;         /* continues the record of the piece before */
} fio_piece;

typedef struct fio_records {
    fio_piece *pieces;
    size_t count, capacity;
    size_t rows;
    uint64_t bytes;
} fio_records;

void fio_records_free(fio_records *records);

/* Adds every complete TFRecord at the start of `buf` (shard offset `base`; as
 * fio_tfrecord_scan frames them) to `out`, up to `max_bytes` of record data in `out` in all:
 * `*full` is set when the scan stopped there rather than at the end of the
 * buffer, an incomplete record or a checksum mismatch. `*rows` counts the
 * records added. Returns 0, or -ENOMEM. */
int fio_tfrecord_collect(const uint8_t *buf, size_t len, uint64_t base, int verify,
                         uint64_t max_bytes, fio_records *out, size_t *rows, size_t *consumed,
                         size_t *needed, int *full, fio_frame_error *error);

/* Adds the lines of `buf` (without their newlines) to `out`; the first one
 * begins with `prefix` (the start of a line cut by earlier buffers). With
 * `final`, what follows the last newline is a line too (when it, or the
 * prefix, is not empty). Stops before a line that would take `out` past
 * `max_bytes` (`*full`). Returns 0 or -ENOMEM. */
int fio_lines_collect(const uint8_t *buf, size_t len, const uint8_t *prefix,
                      size_t prefix_length, int final, uint64_t max_bytes, fio_records *out,
                      size_t *rows, size_t *consumed, int *full);

/* Exports the collected records as a record batch with one binary column
 * `name`, and empties `records`. Returns 0 or -ENOMEM (records kept). */
int fio_records_export(fio_records *records, const char *name, struct ArrowSchema *schema,
                       struct ArrowArray *array);

/* ---- tf.train.Example features ---- */

/* fio_examples_gather's answer for records it cannot type as
 * pyarrow.RecordBatch.from_pylist types their parsed features. */
#define FIO_EXAMPLES_UNTYPED 1

/* Where the first record of `records` from `first` on that is not a
 * tf.train.Example is (`*bad`, with `*what` saying why; records->count for
 * none): one that does not parse, or gives a feature name that is not UTF-8.
 * Returns 0 or -ENOMEM. */
int fio_examples_check(const fio_records *records, size_t first, size_t *bad, const char **what);

/* Rows first..first + rows of a collection of records. */
typedef struct fio_records_span {
    const fio_records *records;
    size_t first, rows;
} fio_records_span;

/* Exports the rows of `spans` (whole TFRecords, as fio_tfrecord_collect
 * gathers them, each checked by fio_examples_check), in order, parsed as
 * tf.train.Example, as a record batch: one column per feature name, in the
 * order of first sight, list<binary>, list<int64> or list<double> (float32s
 * widened, as Python floats are), null where a record lacks the feature; each
 * value copied once. Returns 0, -ENOMEM, or FIO_EXAMPLES_UNTYPED (nothing
 * exported) for a feature of two kinds, one without a value list, a name
 * given twice in one record or with a NUL in it, or a column past int32
 * offsets. */
int fio_examples_gather(const fio_records_span *spans, size_t span_count,
                        struct ArrowSchema *schema, struct ArrowArray *array);

/* A batch of tf.train.Example records built as their reads come in: each span
 * added is parsed into the batch's columns at once, while the buffers it lies
 * in are still in the CPU's caches; the columns grow as needed. Columns as
 * fio_examples_gather's (in the order their features were first met). The
 * builder keeps nothing of a span once it is added: its buffers may go. */
typedef struct fio_examples_builder fio_examples_builder;

/* A builder for batches of up to `rows` rows, or NULL without memory. */
fio_examples_builder *fio_examples_builder_new(size_t rows);
void fio_examples_builder_free(fio_examples_builder *builder);

/* Parses the records of `spans` (each checked by fio_examples_check) after
 * the rows added so far. Returns 0; -E2BIG where they would pass the
 * builder's rows, FIO_EXAMPLES_UNTYPED where the batch with them could not be
 * typed here (see fio_examples_gather), or -ENOMEM while parsing them: then
 * nothing is added, and the rows before can still be exported. -ENOMEM while
 * copying them is for good (until the next export). */
int fio_examples_builder_add(fio_examples_builder *builder, const fio_records_span *spans,
                             size_t count);

/* Exports the rows added as one record batch and empties the builder.
 * Returns 0, -ENOMEM, or FIO_EXAMPLES_UNTYPED after an add that failed for
 * good (the builder emptied all the same). */
int fio_examples_builder_export(fio_examples_builder *builder, struct ArrowSchema *schema,
                                struct ArrowArray *array);

/* Moves the records of `records` into a new collection (NULL without memory,
 * `records` unchanged) and empties `records`. fio_records_free, then free(),
 * the new one. */
fio_records *fio_records_detach(fio_records *records);

/* ---- WebDataset tar ---- */

/* Groups consecutive tar members into samples by key as webdataset does (the
 * member name up to the first dot of its last component; the rest is the
 * extension), keeping only regular files whose names have an extension. Each
 * extension is interned into a column slot that lasts across batches until
 * fio_wds_reset_columns. */
typedef struct fio_wds fio_wds;

enum fio_wds_error_kind {
    /* 1..3 are the tar header errors of enum fio_tar_error_kind */
    FIO_WDS_REPEATED_EXTENSION = 4, /* a sample has two members with one extension */
    FIO_WDS_TRUNCATED = 5,          /* (final) the data ends inside a member */
    FIO_WDS_BAD_NAME = 6,           /* a key or extension is not UTF-8 */
};

typedef struct fio_wds_result {
    size_t rows;     /* complete samples added */
    size_t consumed; /* where the first sample not added starts */
    size_t needed;   /* bytes from `consumed` on the open sample needs, as far as known */
    size_t members;  /* tar members before `consumed` (the index of records) */
    int at_end;      /* the end-of-archive marker ends the samples */
    int full;        /* stopped before a sample that would take a column past max_bytes */
    fio_frame_error error; /* kind: enum fio_tar_error_kind or fio_wds_error_kind */
    size_t error_members;  /* tar members before the one in error */
} fio_wds_result;

fio_wds *fio_wds_new(void);
void fio_wds_free(fio_wds *wds);
size_t fio_wds_columns(const fio_wds *wds);
void fio_wds_reset_columns(fio_wds *wds);
size_t fio_wds_rows(const fio_wds *wds);
/* The bytes of the members of the samples collected. */
uint64_t fio_wds_bytes(const fio_wds *wds);

/* Adds the complete samples at the start of `buf`, which starts on a member's
 * header. A sample is complete once its members are and the header of the
 * next member with another key follows, or the end-of-archive marker, or
 * (with `final`: nothing follows `buf`) the end of `buf`. Stops at a damaged
 * header, a repeated extension or (`final`) a cut member, in `result->error`,
 * after the samples before it. Returns 0 or -ENOMEM. */
int fio_wds_scan(fio_wds *wds, const uint8_t *buf, size_t len, int final, uint64_t max_bytes,
                 fio_wds_result *result);

/* Exports the samples added since the last export as a record batch: columns
 * __key__ (string), __url__ (the `url_length` bytes of `url`, dictionary-encoded) and one binary column
 * per extension slot, sorted by name (null where a sample lacks it). Returns 0
 * or -ENOMEM (samples kept). fio_wds_gather of all the samples. */
int fio_wds_export(fio_wds *wds, const char *url, size_t url_length, struct ArrowSchema *schema,
                   struct ArrowArray *array);

/* Moves the samples added since the last export into a new fio_wds (with its
 * own copy of the slots' names) and empties `wds`, whose slots stay: the
 * samples are copied later, by fio_wds_gather, together with those of other
 * collections. NULL without memory (`wds` unchanged). */
fio_wds *fio_wds_detach(fio_wds *wds);

/* Rows first_row..first_row + rows of a detached collection, from the shard
 * that string `url` of fio_wds_gather's dictionary names. */
typedef struct fio_wds_span {
    const fio_wds *wds;
    size_t first_row, rows;
    size_t url;
} fio_wds_span;

/* Exports the rows of `spans`, in order, as one record batch (each sample's
 * bytes copied once): columns as fio_wds_export's, the extensions of all
 * spans sorted by name; __url__ indexes the `url_count` strings of `urls` that
 * `url_offsets` (url_count + 1) delimit. Returns 0, -ENOMEM, or -E2BIG where
 * a column would pass FIO_COLUMN_MAX_BYTES (nothing exported). */
int fio_wds_gather(const fio_wds_span *spans, size_t span_count, const char *urls,
                   const int32_t *url_offsets, size_t url_count, struct ArrowSchema *schema,
                   struct ArrowArray *array);

/* A batch of WebDataset samples built as their reads come in: each span added
 * is copied into the batch's columns at once, while the buffers it lies in
 * are still in the CPU's caches, and those buffers can be reused before the
 * batch is complete. The columns grow as needed (a column's first room is
 * estimated from the rows added so far); an extension first met in a later
 * span is null in the rows before it. */
typedef struct fio_wds_builder fio_wds_builder;

/* A builder for batches of up to `rows` rows, or NULL without memory. */
fio_wds_builder *fio_wds_builder_new(size_t rows);
void fio_wds_builder_free(fio_wds_builder *builder);
size_t fio_wds_builder_rows(const fio_wds_builder *builder);

/* Copies the rows of `spans` (whose url fields index the dictionary the
 * export is given) after the rows added so far. Returns 0; -ENOMEM; or
 * -E2BIG where the rows would pass the builder's row count or a column
 * FIO_COLUMN_MAX_BYTES: then nothing is added. */
int fio_wds_builder_add(fio_wds_builder *builder, const fio_wds_span *spans, size_t count);

/* Exports the rows added as one record batch, columns as fio_wds_gather's,
 * and empties the builder. Returns 0 or -ENOMEM (the builder emptied all the same). */
int fio_wds_builder_export(fio_wds_builder *builder, const char *urls,
                           const int32_t *url_offsets, size_t url_count,
                           struct ArrowSchema *schema, struct ArrowArray *array);

#endif
