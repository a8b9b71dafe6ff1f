/* tf.train.Example records as feature columns, as columnar.h declares them. */
#define _GNU_SOURCE
#include "columnar_internal.h"

#include <string.h>

/* A feature column: its name (a copy: a batch built over several reads lets
 * each read's buffers go once its rows are in), its kind, and what its rows
 * hold in all, for sizing the buffers. */
typedef struct example_slot {
    uint8_t *name;
    size_t length;
    int kind;         /* enum fio_feature_kind */
    size_t last_row;  /* the row that gave it last, plus one */
    uint64_t values;  /* items in all */
    uint64_t bytes;   /* at most this many bytes of binary items */
    size_t present;   /* rows that give it */
    uint64_t filled;  /* items written (second pass) */
    uint64_t written; /* bytes written (second pass) */
    uint64_t data_room, items_room; /* bytes of a built batch's buffers */
    fio_column_out column;
} example_slot;

typedef struct examples {
    example_slot *slots;
    size_t slot_count, slot_capacity;
    fio_names names; /* of the slots */
    fio_feature *features; /* of every row, in order */
    uint32_t *feature_slots;
    size_t feature_count, feature_capacity, slot_index_capacity;
    size_t *row_ends; /* features of rows 0..row end before row_ends[row] */
    size_t row_capacity;
    uint64_t most_values; /* in one feature */
} examples;

static void examples_free(examples *ex)
{
    for (size_t slot = 0; slot < ex->slot_count; slot++) {
        fio_columns_free(&ex->slots[slot].column, 1);
        free(ex->slots[slot].name);
    }
    free(ex->slots);
    fio_names_free(&ex->names);
    free(ex->features);
    free(ex->feature_slots);
    free(ex->row_ends);
}

/* The slot of a feature name, made on first sight. Returns 0, 1 for a name
 * that is not UTF-8, 2 for one with a NUL (it cannot name a column here), or
 * -ENOMEM. */
static int slot_of(examples *ex, const uint8_t *name, size_t length, uint32_t *slot)
{
    uint64_t hash = fio_fnv1a(name, length);
    int64_t known = fio_names_find(&ex->names, name, length, hash);
    if (known >= 0) {
        *slot = (uint32_t)known;
        return 0;
    }
    if (!fio_utf8_valid(name, length))
        return 1;
    if (memchr(name, 0, length))
        return 2;
    uint8_t *own = malloc(length ? length : 1);
    if (!own)
        return -ENOMEM;
    memcpy(own, name, length);
    if (fio_grow((void **)&ex->slots, &ex->slot_capacity, ex->slot_count + 1,
                 sizeof(example_slot)) ||
        fio_names_add(&ex->names, own, length, hash, (uint32_t)ex->slot_count)) {
        free(own);
        return -ENOMEM;
    }
    example_slot *fresh = &ex->slots[ex->slot_count];
    memset(fresh, 0, sizeof *fresh);
    fresh->name = own;
    fresh->length = length;
    *slot = (uint32_t)ex->slot_count++;
    return 0;
}

/* First pass: every row's features, checked, and each column's sizes. Stops
 * at the first record that is not an example (*bad). Returns 0, -ENOMEM or
 * FIO_EXAMPLES_UNTYPED. */
static int survey(examples *ex, const fio_piece *const *list, size_t count, size_t base,
                  int check_only, size_t *rows, int *bad, const char **what)
{
    int untyped = 0;
    if (fio_grow((void **)&ex->row_ends, &ex->row_capacity, count + 1, sizeof(size_t)) ||
        fio_grow((void **)&ex->features, &ex->feature_capacity, 4 * count, sizeof(fio_feature)))
        return -ENOMEM;
    for (size_t row = 0; row < count; row++) {
        const fio_piece *record = list[row];
        size_t room = ex->feature_capacity - ex->feature_count;
        int64_t found = fio_example_features(record->data, record->length,
                                             ex->features + ex->feature_count, room, what);
        if (found > (int64_t)room) {
            if (fio_grow((void **)&ex->features, &ex->feature_capacity,
                         ex->feature_count + (size_t)found, sizeof(fio_feature)))
                return -ENOMEM;
            found = fio_example_features(record->data, record->length,
                                         ex->features + ex->feature_count, (size_t)found, what);
        }
        if (found < 0) {
            *bad = 1;
            *rows = row;
            return 0;
        }
        if (fio_grow((void **)&ex->feature_slots, &ex->slot_index_capacity,
                     ex->feature_count + (size_t)found, sizeof(uint32_t)))
            return -ENOMEM;
        for (size_t index = ex->feature_count; index < ex->feature_count + (size_t)found; index++) {
            const fio_feature *feature = &ex->features[index];
            uint32_t slot;
            int rc = slot_of(ex, record->data + feature->name_offset, feature->name_length, &slot);
            if (rc == 1) {
                *what = "a feature name is not UTF-8";
                *bad = 1;
                *rows = row;
                return 0;
            }
            if (rc < 0)
                return rc;
            if (rc || untyped) { /* a name with a NUL: typed as from_pylist types it */
                if (!check_only)
                    return FIO_EXAMPLES_UNTYPED;
                untyped = 1;
                continue;
            }
            example_slot *column = &ex->slots[slot];
            /* A name twice in a record, a Feature without a value list, or
             * one name of two kinds: typed as from_pylist types them. */
            if (column->last_row == base + row + 1 || feature->kind == FIO_FEATURE_NONE ||
                (column->kind && column->kind != feature->kind)) {
                if (!check_only)
                    return FIO_EXAMPLES_UNTYPED;
                untyped = 1;
                continue;
            }
            column->kind = feature->kind;
            column->last_row = base + row + 1;
            column->present++;
            column->values += feature->count;
            column->bytes += feature->list_length;
            if (feature->count > ex->most_values)
                ex->most_values = feature->count;
            if ((column->values > FIO_COLUMN_MAX_BYTES || column->bytes > FIO_COLUMN_MAX_BYTES) &&
                !check_only)
                return FIO_EXAMPLES_UNTYPED; /* past int32 offsets */
            ex->feature_slots[index] = slot;
        }
        ex->feature_count += (size_t)found;
        ex->row_ends[row] = ex->feature_count;
    }
    *rows = count;
    return 0;
}

/* The Arrow item type of a feature kind's list column. */
static int item_kind_of(int feature_kind)
{
    return feature_kind == FIO_FEATURE_BYTES   ? FIO_ITEM_BINARY
           : feature_kind == FIO_FEATURE_INT64 ? FIO_ITEM_INT64
                                               : FIO_ITEM_DOUBLE;
}

static int allocate(examples *ex, size_t rows)
{
    for (size_t slot = 0; slot < ex->slot_count; slot++) {
        example_slot *column = &ex->slots[slot];
        fio_column_out *out = &column->column;
        out->name = NULL; /* set at export: the names need their NULs */
        out->kind = FIO_COLUMN_LIST;
        out->null_count = (int64_t)(rows - column->present);
        out->item_count = (int64_t)column->values;
        out->offsets = fio_buffer_alloc((rows + 1) * sizeof(int32_t));
        if (out->null_count)
            out->validity = fio_buffer_zeroed((rows + 7) / 8);
        out->item_kind = item_kind_of(column->kind);
        switch (column->kind) {
        case FIO_FEATURE_BYTES:
            out->item_offsets = fio_buffer_alloc((column->values + 1) * sizeof(int32_t));
            out->data = fio_buffer_alloc(column->bytes);
            if (out->item_offsets)
                ((int32_t *)out->item_offsets)[0] = 0;
            break;
        case FIO_FEATURE_INT64:
            out->data = fio_buffer_alloc(column->values * sizeof(int64_t));
            break;
        default:
            out->data = fio_buffer_alloc(column->values * sizeof(double));
            break;
        }
        if (!out->offsets || (out->null_count && !out->validity) || !out->data ||
            (column->kind == FIO_FEATURE_BYTES && !out->item_offsets))
            return -ENOMEM;
        ((int32_t *)out->offsets)[0] = 0;
    }
    return 0;
}

/* Second pass: each row's values copied into its columns, as rows from `base` on. */
static int fill(examples *ex, const fio_piece *const *list, size_t rows, size_t base)
{
    size_t scratch = ex->most_values > 1 ? (size_t)ex->most_values : 1;
    fio_record *strings = malloc(scratch * sizeof *strings);
    float *floats = malloc(scratch * sizeof *floats);
    if (!strings || !floats) {
        free(strings);
        free(floats);
        return -ENOMEM;
    }
    size_t feature = 0;
    for (size_t row = 0; row < rows; row++) {
        const uint8_t *record = list[row]->data;
        for (; feature < ex->row_ends[row]; feature++) {
            const fio_feature *found = &ex->features[feature];
            example_slot *column = &ex->slots[ex->feature_slots[feature]];
            fio_column_out *out = &column->column;
            size_t at = base + row;
            if (out->validity)
                ((uint8_t *)out->validity)[at / 8] |= (uint8_t)(1u << (at % 8));
            if (column->kind == FIO_FEATURE_BYTES) {
                int32_t *ends = (int32_t *)out->item_offsets + column->filled + 1;
                uint8_t *data = out->data;
                fio_feature_bytes(record, found, strings);
                for (uint64_t item = 0; item < found->count; item++) {
                    fio_copy_value(data + column->written, record + strings[item].offset,
                                   strings[item].length);
                    column->written += strings[item].length;
                    ends[item] = (int32_t)column->written;
                }
            } else if (column->kind == FIO_FEATURE_INT64) {
                fio_feature_int64s(record, found, (int64_t *)out->data + column->filled);
            } else {
                double *values = (double *)out->data + column->filled;
                fio_feature_floats(record, found, floats);
                for (uint64_t item = 0; item < found->count; item++)
                    values[item] = floats[item]; /* as Python floats: doubles */
            }
            column->filled += found->count;
        }
        for (size_t slot = 0; slot < ex->slot_count; slot++) {
            example_slot *column = &ex->slots[slot];
            ((int32_t *)column->column.offsets)[base + row + 1] = (int32_t)column->filled;
        }
    }
    fio_copy_done();
    free(strings);
    free(floats);
    return 0;
}

/* Exports the columns of `ex`'s slots, `rows` rows, as a record batch; the
 * buffers are the export's after the call, whatever it returns. */
static int export_slots(examples *ex, size_t rows, struct ArrowSchema *schema,
                        struct ArrowArray *array)
{
    size_t count = ex->slot_count ? ex->slot_count : 1;
    char **names = calloc(count, sizeof *names);
    fio_column_out *columns = calloc(count, sizeof *columns);
    int rc = names && columns ? 0 : -ENOMEM;
    for (size_t slot = 0; !rc && slot < ex->slot_count; slot++) {
        example_slot *column = &ex->slots[slot];
        names[slot] = strndup((const char *)column->name, column->length);
        if (!names[slot]) {
            rc = -ENOMEM;
            break;
        }
        columns[slot] = column->column;
        columns[slot].name = names[slot];
        columns[slot].null_count = (int64_t)(rows - column->present);
        columns[slot].item_count = (int64_t)column->values;
        memset(&column->column, 0, sizeof column->column); /* the export's now */
    }
    if (!rc)
        rc = fio_export_columns((int64_t)rows, columns, ex->slot_count, schema, array);
    else if (columns)
        fio_columns_free(columns, ex->slot_count);
    if (names)
        for (size_t slot = 0; slot < ex->slot_count; slot++)
            free(names[slot]);
    free(names);
    free(columns);
    return rc;
}

/* Exports the `count` records of `list` as a record batch (see
 * fio_examples_gather), as far as the first that is not an example: `*rows`
 * exported, `*bad` set where one stopped it. */
static int export_list(const fio_piece *const *list, size_t count, struct ArrowSchema *schema,
                       struct ArrowArray *array, size_t *rows, int *bad, const char **what)
{
    examples ex;
    memset(&ex, 0, sizeof ex);
    *rows = 0;
    *bad = 0;
    int rc = survey(&ex, list, count, 0, 0, rows, bad, what);
    if (!rc && *rows)
        rc = allocate(&ex, *rows);
    if (!rc && *rows)
        rc = fill(&ex, list, *rows, 0);
    if (!rc && *rows)
        rc = export_slots(&ex, *rows, schema, array);
    examples_free(&ex);
    if (rc)
        *rows = 0;
    return rc;
}

static const fio_piece **pieces_of(const fio_records_span *spans, size_t span_count,
                                   size_t *count)
{
    *count = 0;
    for (size_t span = 0; span < span_count; span++)
        *count += spans[span].rows;
    const fio_piece **list = malloc((*count ? *count : 1) * sizeof *list);
    if (!list)
        return NULL;
    size_t at = 0;
    for (size_t span = 0; span < span_count; span++)
        for (size_t row = 0; row < spans[span].rows; row++)
            list[at++] = &spans[span].records->pieces[spans[span].first + row];
    return list;
}

int fio_examples_check(const fio_records *records, size_t first, size_t *bad, const char **what)
{
    if (first > records->count)
        first = records->count;
    fio_records_span whole = {records, first, records->count - first};
    size_t count, rows = 0;
    int found = 0;
    const fio_piece **list = pieces_of(&whole, 1, &count);
    if (!list)
        return -ENOMEM;
    examples ex;
    memset(&ex, 0, sizeof ex);
    int rc = survey(&ex, list, count, 0, 1, &rows, &found, what);
    examples_free(&ex);
    free(list);
    *bad = first + rows;
    return rc;
}

int fio_examples_gather(const fio_records_span *spans, size_t span_count,
                        struct ArrowSchema *schema, struct ArrowArray *array)
{
    size_t count, rows = 0;
    int bad = 0;
    const char *what = NULL;
    const fio_piece **list = pieces_of(spans, span_count, &count);
    if (!list)
        return -ENOMEM;
    if (!count) { /* no rows: a batch without columns */
        free(list);
        return fio_export_columns(0, NULL, 0, schema, array);
    }
    int rc = export_list(list, count, schema, array, &rows, &bad, &what);
    free(list);
    if (!rc && rows < count) {
        fio_export_release(schema, array);
        return FIO_EXAMPLES_UNTYPED; /* checked before: cannot happen */
    }
    return rc;
}

/* ---- a batch built as its spans come in ---- */

struct fio_examples_builder {
    examples ex;
    size_t capacity, rows;
    int untyped; /* a span could not be typed here: nothing more is added */
};

fio_examples_builder *fio_examples_builder_new(size_t rows)
{
    if (rows > FIO_COLUMN_MAX_BYTES)
        return NULL;
    fio_examples_builder *builder = calloc(1, sizeof *builder);
    if (builder)
        builder->capacity = rows;
    return builder;
}

static void examples_builder_clear(fio_examples_builder *builder)
{
    examples_free(&builder->ex);
    memset(&builder->ex, 0, sizeof builder->ex);
    builder->rows = 0;
    builder->untyped = 0;
}

void fio_examples_builder_free(fio_examples_builder *builder)
{
    if (!builder)
        return;
    examples_builder_clear(builder);
    free(builder);
}

/* Each slot's buffers with room for the `count` rows being added (slots from
 * `fresh` on were first met in them: null in the rows before). */
static int builder_make_room(fio_examples_builder *builder, size_t count, size_t fresh)
{
    examples *ex = &builder->ex;
    size_t rows = builder->rows + count, left = builder->capacity - rows;
    for (size_t slot = 0; slot < ex->slot_count; slot++) {
        example_slot *column = &ex->slots[slot];
        fio_column_out *out = &column->column;
        if (!out->offsets) {
            out->kind = FIO_COLUMN_LIST;
            out->item_kind = item_kind_of(column->kind);
            out->offsets = fio_buffer_alloc((builder->capacity + 1) * sizeof(int32_t));
            if (!out->offsets)
                return -ENOMEM;
            memset(out->offsets, 0, (builder->rows + 1) * sizeof(int32_t));
        }
        if (!out->validity && column->present < rows) {
            out->validity = fio_buffer_zeroed((builder->capacity + 7) / 8);
            if (!out->validity)
                return -ENOMEM;
            if (slot < fresh) /* no null so far: every row before had it */
                fio_mark_rows_valid(out->validity, builder->rows);
        }
        int rc;
        if (column->kind == FIO_FEATURE_BYTES) {
            int had_items = out->item_offsets != NULL;
            rc = fio_grow_room(&out->item_offsets, &column->items_room, (column->filled + 1) * 4,
                               (column->values + 1) * 4, rows, left);
            if (!rc && !had_items)
                ((int32_t *)out->item_offsets)[0] = 0;
            if (!rc)
                rc = fio_grow_room(&out->data, &column->data_room, column->written,
                                   column->bytes, rows, left);
        } else {
            rc = fio_grow_room(&out->data, &column->data_room, column->filled * 8,
                               column->values * 8, rows, left);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* What the first pass adds to a slot's sums, kept to take an add back. */
typedef struct slot_sums {
    int kind;
    size_t last_row, present;
    uint64_t values, bytes;
} slot_sums;

static slot_sums *sums_of(const examples *ex)
{
    slot_sums *sums = malloc((ex->slot_count ? ex->slot_count : 1) * sizeof *sums);
    for (size_t slot = 0; sums && slot < ex->slot_count; slot++) {
        const example_slot *column = &ex->slots[slot];
        sums[slot] = (slot_sums){column->kind, column->last_row, column->present,
                                 column->values, column->bytes};
    }
    return sums;
}

/* The slots as `sums` (of the first `slots` of them) had them: the slots made
 * since dropped, with their names. */
static void restore_sums(examples *ex, const slot_sums *sums, size_t slots, uint64_t most_values)
{
    for (size_t slot = slots; slot < ex->slot_count; slot++) {
        fio_columns_free(&ex->slots[slot].column, 1);
        free(ex->slots[slot].name);
    }
    ex->slot_count = slots;
    ex->most_values = most_values;
    fio_names_clear(&ex->names);
    for (size_t slot = 0; slot < slots; slot++) {
        example_slot *column = &ex->slots[slot];
        column->kind = sums[slot].kind;
        column->last_row = sums[slot].last_row;
        column->present = sums[slot].present;
        column->values = sums[slot].values;
        column->bytes = sums[slot].bytes;
        /* Fewer names than the table held: it does not grow, so this cannot fail. */
        (void)fio_names_add(&ex->names, column->name, column->length,
                            fio_fnv1a(column->name, column->length), (uint32_t)slot);
    }
}

int fio_examples_builder_add(fio_examples_builder *builder, const fio_records_span *spans,
                             size_t count)
{
    if (builder->untyped)
        return FIO_EXAMPLES_UNTYPED;
    size_t rows = 0, surveyed = 0;
    for (size_t span = 0; span < count; span++)
        rows += spans[span].rows;
    if (rows > builder->capacity - builder->rows)
        return -E2BIG;
    if (!rows)
        return 0;
    examples *ex = &builder->ex;
    const fio_piece **list = pieces_of(spans, count, &rows);
    slot_sums *sums = list ? sums_of(ex) : NULL;
    if (!sums) {
        free(list);
        return -ENOMEM;
    }
    size_t fresh = ex->slot_count;
    uint64_t most_values = ex->most_values;
    int bad = 0;
    const char *what = NULL;
    ex->feature_count = 0; /* the features of these rows only */
    int rc = survey(ex, list, rows, builder->rows, 0, &surveyed, &bad, &what);
    if (!rc && surveyed < rows)
        rc = FIO_EXAMPLES_UNTYPED; /* checked before: cannot happen */
    if (rc) {
        /* Nothing added: the rows before stay as they were, to be exported. */
        restore_sums(ex, sums, fresh, most_values);
        free(sums);
        free(list);
        return rc;
    }
    free(sums);
    rc = builder_make_room(builder, rows, fresh);
    if (!rc)
        rc = fill(ex, list, rows, builder->rows);
    free(list);
    if (rc) {
        /* The slots' sums now count rows that are not in the columns. */
        builder->untyped = 1;
        return rc;
    }
    builder->rows += rows;
    return 0;
}

int fio_examples_builder_export(fio_examples_builder *builder, struct ArrowSchema *schema,
                                struct ArrowArray *array)
{
    int rc = builder->untyped ? FIO_EXAMPLES_UNTYPED
                              : export_slots(&builder->ex, builder->rows, schema, array);
    examples_builder_clear(builder);
    return rc;
}
