/*
 * Export through the Arrow C data interface: columns of Arrow's binary layout
 * (int32 offsets, one contiguous data buffer and a validity bitmap) handed over
 * as one record batch. The batch owns the columns' buffers (from column_pool.h)
 * and its release callbacks give them back. Nothing here touches Python.
 */
#ifndef FASTIO_ARROW_EXPORT_H
#define FASTIO_ARROW_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "column_pool.h"

/* The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html),
 * ABI-stable: defined as the specification says, guarded as it says. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif

enum fio_column_kind { FIO_COLUMN_BINARY, FIO_COLUMN_STRING, FIO_COLUMN_DICTIONARY, FIO_COLUMN_LIST };

/* The items of a FIO_COLUMN_LIST column. */
enum fio_item_kind { FIO_ITEM_BINARY, FIO_ITEM_INT64, FIO_ITEM_DOUBLE };

/* A column ready to export. Its buffers are the export's once fio_export_columns
 * runs (or freed by it). A FIO_COLUMN_DICTIONARY column is dictionary-encoded:
 * `offsets` holds each row's int32 index (owned) into the `dictionary_count`
 * strings of `data` that `dictionary_offsets` delimit (neither owned). A
 * FIO_COLUMN_LIST column's `offsets` delimit each row's run of its
 * `item_count` items (int32, rows + 1): binary strings that `item_offsets`
 * delimit in `data`, or int64s or doubles in `data`. */
typedef struct fio_column_out {
    const char *name;
    int kind;
    int64_t null_count;
    void *validity, *offsets, *data;
    size_t data_length;
    const int32_t *dictionary_offsets;
    size_t dictionary_count;
    int item_kind;
    int64_t item_count;
    void *item_offsets;
} fio_column_out;

/* Frees the buffers of `count` columns (not a FIO_COLUMN_DICTIONARY's strings). */
void fio_columns_free(fio_column_out *columns, size_t count);

/* A record batch (a struct array, as the Arrow PyCapsule interface has it) of
 * `columns`. On failure everything is freed, the columns' buffers too. */
int fio_export_columns(int64_t rows, fio_column_out *columns, size_t count,
                       struct ArrowSchema *schema, struct ArrowArray *array);

/* Releases what an export made, unless a consumer has taken it (release NULL). */
void fio_export_release(struct ArrowSchema *schema, struct ArrowArray *array);

#endif
