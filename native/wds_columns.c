/* WebDataset tar samples, one column per extension, as columnar.h declares them. */
#define _GNU_SOURCE
#include "columnar_internal.h"

#include <stdint.h>
#include <string.h>

/* A sample's key: [prefix "/"] name[0:key_length]. */
typedef struct wds_key {
    const uint8_t *prefix;
    const uint8_t *name;
    uint32_t prefix_length;
    uint32_t key_length;
} wds_key;

typedef struct wds_member {
    const uint8_t *data;
    uint64_t size;
    uint32_t slot;
    uint32_t row;
} wds_member;

typedef struct wds_slot {
    char *name; /* NUL-terminated: it names a column */
    size_t length;
    uint64_t serial; /* the sample that used this slot last */
    uint64_t bytes;  /* of the samples collected for the next batch */
    size_t rows;
} wds_slot;

struct fio_wds {
    wds_slot *slots;
    size_t slot_count, slot_capacity;
    fio_names names; /* of the slots */
    wds_member *members;
    size_t member_count, member_capacity;
    wds_key *keys; /* one per row */
    size_t row_count, row_capacity;
    uint64_t key_bytes;
    uint64_t serial;
};

#define PREFETCH_DISTANCE 4096
/* A ustar prefix (155 bytes), "/" and the 100-byte name field. */
#define WDS_USTAR_NAME 256

fio_wds *fio_wds_new(void)
{
    return calloc(1, sizeof(fio_wds));
}

void fio_wds_reset_columns(fio_wds *wds)
{
    for (size_t slot = 0; slot < wds->slot_count; slot++)
        free(wds->slots[slot].name);
    wds->slot_count = 0;
    fio_names_clear(&wds->names);
}

void fio_wds_free(fio_wds *wds)
{
    if (!wds)
        return;
    fio_wds_reset_columns(wds);
    free(wds->slots);
    fio_names_free(&wds->names);
    free(wds->members);
    free(wds->keys);
    free(wds);
}

size_t fio_wds_columns(const fio_wds *wds)
{
    return wds->slot_count;
}

size_t fio_wds_rows(const fio_wds *wds)
{
    return wds->row_count;
}

uint64_t fio_wds_bytes(const fio_wds *wds)
{
    uint64_t total = 0;
    for (size_t index = 0; index < wds->member_count; index++)
        total += wds->members[index].size;
    return total;
}

static int intern_lowered(fio_wds *wds, const uint8_t *extension, size_t length, uint32_t *slot);

/* The slot of an extension, made on first sight, its ASCII letters lowered
 * as webdataset lowers extensions (img.JPG is the "jpg" column). Returns 0,
 * 1 for a name that cannot name a column (not UTF-8, or with a NUL), or
 * -ENOMEM. */
static int intern(fio_wds *wds, const uint8_t *extension, size_t length, uint32_t *slot)
{
    size_t at = 0;
    while (at < length && !(extension[at] >= 'A' && extension[at] <= 'Z'))
        at++;
    if (at == length)
        return intern_lowered(wds, extension, length, slot);
    uint8_t small[64];
    uint8_t *lowered = length <= sizeof small ? small : malloc(length);
    if (!lowered)
        return -ENOMEM;
    for (size_t i = 0; i < length; i++) {
        uint8_t c = extension[i];
        lowered[i] = c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
    }
    int rc = intern_lowered(wds, lowered, length, slot);
    if (lowered != small)
        free(lowered);
    return rc;
}

static int intern_lowered(fio_wds *wds, const uint8_t *extension, size_t length, uint32_t *slot)
{
    uint64_t hash = fio_fnv1a(extension, length);
    int64_t known = fio_names_find(&wds->names, extension, length, hash);
    if (known >= 0) {
        *slot = (uint32_t)known;
        return 0;
    }
    if (!fio_utf8_valid(extension, length) || memchr(extension, 0, length))
        return 1;
    if (fio_grow((void **)&wds->slots, &wds->slot_capacity, wds->slot_count + 1, sizeof(wds_slot)))
        return -ENOMEM;
    char *name = malloc(length + 1);
    if (!name)
        return -ENOMEM;
    memcpy(name, extension, length);
    name[length] = 0;
    if (fio_names_add(&wds->names, (const uint8_t *)name, length, hash,
                      (uint32_t)wds->slot_count)) {
        free(name);
        return -ENOMEM;
    }
    wds_slot *fresh = &wds->slots[wds->slot_count];
    memset(fresh, 0, sizeof *fresh);
    fresh->name = name;
    fresh->length = length;
    *slot = (uint32_t)wds->slot_count++;
    return 0;
}

/* webdataset's rule (its regex, in Python: ^((?:.*[/]|)[^./]+)[.]([^/]*)$): the
 * last component of the name needs a dot after at least one other character;
 * the key ends at that dot, the extension is the rest. A newline before the
 * last slash defeats the regex's ".*". Returns 0 for names webdataset skips. */
static int split_name(const uint8_t *buf, const fio_tar_member *member, wds_key *key,
                      const uint8_t **extension, size_t *extension_length)
{
    const uint8_t *name = buf + member->name_offset, *prefix = buf + member->prefix_offset;
    size_t length = member->name_length;
    const uint8_t *slash = memrchr(name, '/', length);
    const uint8_t *base = slash ? slash + 1 : name;
    size_t base_length = length - (size_t)(base - name);
    const uint8_t *dot = memchr(base, '.', base_length);
    if (!dot || dot == base)
        return 0;
    if (slash && memchr(name, '\n', (size_t)(slash - name)))
        return 0;
    if (member->prefix_length && memchr(prefix, '\n', member->prefix_length))
        return 0;
    key->prefix = prefix;
    key->prefix_length = member->prefix_length;
    key->name = name;
    key->key_length = (uint32_t)(dot - name);
    *extension = dot + 1;
    *extension_length = base_length - (size_t)(dot + 1 - base);
    return 1;
}

static size_t key_bytes(const wds_key *key)
{
    return (key->prefix_length ? key->prefix_length + 1u : 0u) + key->key_length;
}

static size_t key_copy(const wds_key *key, uint8_t *out)
{
    size_t at = 0;
    if (key->prefix_length) {
        memcpy(out, key->prefix, key->prefix_length);
        at = key->prefix_length;
        out[at++] = '/';
    }
    memcpy(out + at, key->name, key->key_length);
    return at + key->key_length;
}

static int key_equal(const wds_key *a, const wds_key *b)
{
    if (key_bytes(a) != key_bytes(b))
        return 0;
    if (!a->prefix_length && !b->prefix_length)
        return !memcmp(a->name, b->name, a->key_length);
    /* One is a ustar name, so both are at most WDS_USTAR_NAME bytes. */
    uint8_t left[WDS_USTAR_NAME], right[WDS_USTAR_NAME];
    size_t length = key_copy(a, left);
    key_copy(b, right);
    return !memcmp(left, right, length);
}

static int key_valid(const wds_key *key)
{
    return fio_utf8_valid(key->prefix, key->prefix_length) &&
           fio_utf8_valid(key->name, key->key_length);
}

/* Ends the open sample: a row, unless it would take a column past max_bytes
 * (then `full`, and its members are dropped). */
static int close_sample(fio_wds *wds, const wds_key *key, size_t first_member,
                        uint64_t max_bytes, fio_wds_result *result)
{
    uint64_t length = key_bytes(key);
    int fits = length <= max_bytes - wds->key_bytes;
    for (size_t index = first_member; fits && index < wds->member_count; index++) {
        const wds_member *member = &wds->members[index];
        fits = member->size <= max_bytes - wds->slots[member->slot].bytes;
    }
    if (!fits) {
        wds->member_count = first_member;
        result->full = 1;
        return 1;
    }
    for (size_t index = first_member; index < wds->member_count; index++) {
        wds_slot *slot = &wds->slots[wds->members[index].slot];
        slot->bytes += wds->members[index].size;
        slot->rows++;
    }
    wds->keys[wds->row_count++] = *key;
    wds->key_bytes += length;
    result->rows++;
    return 0;
}

static void stop(fio_wds_result *result, int kind, size_t offset, size_t members)
{
    result->error.kind = kind;
    result->error.offset = offset;
    result->error_members = members;
}

int fio_wds_scan(fio_wds *wds, const uint8_t *buf, size_t len, int final, uint64_t max_bytes,
                 fio_wds_result *result)
{
    size_t pos = 0, seen = 0, open_first = 0, prefetched = 0;
    int open = 0;
    wds_key open_key;

    memset(result, 0, sizeof *result);
    memset(&open_key, 0, sizeof open_key);
    if (max_bytes > FIO_COLUMN_MAX_BYTES)
        max_bytes = FIO_COLUMN_MAX_BYTES;
    /* Every member takes at least one block: this many more rows and members at most. */
    size_t most = len / 512 + 1;
    if (fio_grow((void **)&wds->keys, &wds->row_capacity, wds->row_count + most, sizeof(wds_key)) ||
        fio_grow((void **)&wds->members, &wds->member_capacity, wds->member_count + most,
             sizeof(wds_member)))
        return -ENOMEM;
    for (;;) {
        fio_tar_member member;
        fio_frame_error error;
        size_t span = 0;
        if (pos == len && final) {
            if (!open || !close_sample(wds, &open_key, open_first, max_bytes, result)) {
                open = 0;
                result->consumed = len;
                result->members = seen;
            }
            break;
        }
        int step = fio_tar_next(buf + pos, len - pos, &member, &span, &error);
        if (step == FIO_TAR_ERROR) {
            stop(result, error.kind, pos + error.offset, seen);
            break;
        }
        if (step == FIO_TAR_END) {
            if (open && close_sample(wds, &open_key, open_first, max_bytes, result))
                break;
            open = 0;
            result->consumed = pos;
            result->members = seen;
            result->at_end = 1;
            break;
        }
        if (step == FIO_TAR_CUT_HEADER) {
            if (final)
                stop(result, FIO_WDS_TRUNCATED, pos, seen);
            else
                result->needed = pos + span - result->consumed;
            break;
        }
        /* A member whose header is all there (its data may still be cut). */
        wds_key key;
        const uint8_t *extension = NULL;
        size_t extension_length = 0;
        int regular = member.typeflag == '0' || member.typeflag == '\0' || member.typeflag == '7';
        member.data_offset += pos;
        member.name_offset += pos;
        member.prefix_offset += pos;
        int keyed = regular && split_name(buf, &member, &key, &extension, &extension_length);
        if (keyed && open && !key_equal(&open_key, &key)) {
            if (close_sample(wds, &open_key, open_first, max_bytes, result))
                break;
            open = 0;
            result->consumed = pos;
            result->members = seen;
        }
        if (step == FIO_TAR_CUT_DATA) {
            if (final)
                stop(result, FIO_WDS_TRUNCATED, pos, seen);
            else
                result->needed = pos + span - result->consumed;
            break;
        }
        if (keyed) {
            uint32_t slot;
            if (!open) {
                if (!key_valid(&key)) {
                    stop(result, FIO_WDS_BAD_NAME, pos, seen);
                    break;
                }
                open = 1;
                open_key = key;
                open_first = wds->member_count;
                wds->serial++;
            }
            int rc = intern(wds, extension, extension_length, &slot);
            if (rc < 0)
                return rc;
            if (rc > 0 || wds->slots[slot].serial == wds->serial) {
                stop(result, rc > 0 ? FIO_WDS_BAD_NAME : FIO_WDS_REPEATED_EXTENSION, pos, seen);
                break;
            }
            wds->slots[slot].serial = wds->serial;
            wds_member *kept = &wds->members[wds->member_count++];
            kept->data = buf + member.data_offset;
            kept->size = member.size;
            kept->slot = slot;
            kept->row = (uint32_t)wds->row_count;
        }
        seen++;
        pos += span;
        /* The scan reads headers only, which the hardware does not see as one
         * stream; the gather reads the data between them later. Prefetching
         * the buffer ahead as one stream serves both (twice the samples/s from
         * memory, 1 KB samples). Not the data of a member longer than that
         * stream's reach, which the scan steps over: the gather's copy reads it
         * as a stream of its own, and a prefetch a line (1,700 of them for a
         * 110 KB member) cost the scan more than its headers. */
        if (prefetched < pos)
            prefetched = pos;
        for (size_t limit = pos + PREFETCH_DISTANCE < len ? pos + PREFETCH_DISTANCE : len;
             prefetched < limit; prefetched += 64)
            __builtin_prefetch(buf + prefetched);
        if (!open) {
            result->consumed = pos;
            result->members = seen;
        }
    }
    if (open)
        wds->member_count = open_first; /* the open sample is the next scan's */
    return 0;
}

int fio_wds_export(fio_wds *wds, const char *url, size_t url_length, struct ArrowSchema *schema,
                   struct ArrowArray *array)
{
    if (url_length > FIO_COLUMN_MAX_BYTES)
        return -E2BIG;
    fio_wds_span all = {.wds = wds, .first_row = 0, .rows = wds->row_count, .url = 0};
    int32_t url_offsets[2] = {0, (int32_t)url_length};
    int rc = fio_wds_gather(&all, 1, url, url_offsets, 1, schema, array);
    if (!rc) {
        wds->row_count = wds->member_count = 0;
        wds->key_bytes = 0;
        for (size_t slot = 0; slot < wds->slot_count; slot++) {
            wds->slots[slot].bytes = 0;
            wds->slots[slot].rows = 0;
        }
    }
    return rc;
}

fio_wds *fio_wds_detach(fio_wds *wds)
{
    fio_wds *part = calloc(1, sizeof *part);
    if (!part)
        return NULL;
    part->slots = calloc(wds->slot_count ? wds->slot_count : 1, sizeof *part->slots);
    if (!part->slots) {
        free(part);
        return NULL;
    }
    for (size_t slot = 0; slot < wds->slot_count; slot++) {
        wds_slot *from = &wds->slots[slot], *to = &part->slots[slot];
        to->name = strdup(from->name);
        if (!to->name) {
            part->slot_count = slot;
            fio_wds_free(part);
            return NULL;
        }
        to->length = from->length;
        to->bytes = from->bytes;
        to->rows = from->rows;
        from->bytes = 0;
        from->rows = 0;
    }
    part->slot_count = part->slot_capacity = wds->slot_count;
    part->members = wds->members;
    part->member_count = wds->member_count;
    part->member_capacity = wds->member_capacity;
    part->keys = wds->keys;
    part->row_count = wds->row_count;
    part->row_capacity = wds->row_capacity;
    part->key_bytes = wds->key_bytes;
    wds->members = NULL;
    wds->keys = NULL;
    wds->member_count = wds->member_capacity = 0;
    wds->row_count = wds->row_capacity = 0;
    wds->key_bytes = 0;
    return part;
}

static int by_text(const void *left, const void *right)
{
    return strcmp(*(char *const *)left, *(char *const *)right);
}

/* The first member of `wds` in row `row` or after it (members are in row order). */
static size_t first_member_from(const fio_wds *wds, size_t row)
{
    size_t lo = 0, hi = wds->member_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wds->members[mid].row < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int fio_wds_gather(const fio_wds_span *spans, size_t span_count, const char *urls,
                   const int32_t *url_offsets, size_t url_count, struct ArrowSchema *schema,
                   struct ArrowArray *array)
{
    size_t rows = 0, names = 0, total_slots = 0;
    uint64_t key_total = 0;
    for (size_t span = 0; span < span_count; span++) {
        rows += spans[span].rows;
        total_slots += spans[span].wds->slot_count;
    }
    if (rows > FIO_COLUMN_MAX_BYTES)
        return -E2BIG;
    char **sorted = calloc(total_slots + 1, sizeof *sorted);
    size_t *column_of = calloc(total_slots + 1, sizeof *column_of); /* per span's slot */
    fio_column_out *columns = NULL;
    uint64_t *filled = NULL, *gathered = NULL, *present = NULL, *bytes = NULL;
    size_t count = 0;
    int rc = -ENOMEM;
    if (!sorted || !column_of)
        goto fail;
    for (size_t span = 0; span < span_count; span++)
        for (size_t slot = 0; slot < spans[span].wds->slot_count; slot++)
            sorted[names++] = spans[span].wds->slots[slot].name;
    qsort(sorted, names, sizeof *sorted, by_text);
    size_t unique = 0;
    for (size_t index = 0; index < names; index++)
        if (!unique || strcmp(sorted[unique - 1], sorted[index]))
            sorted[unique++] = sorted[index];
    count = unique + 2;
    columns = calloc(count, sizeof *columns);
    filled = calloc(4 * count, sizeof *filled);
    if (!columns || !filled)
        goto fail;
    gathered = filled + count;
    present = gathered + count;
    bytes = present + count;
    /* Each span's slots to their columns; the bytes and rows of each column. */
    for (size_t span = 0, at = 0; span < span_count; span++) {
        const fio_wds *wds = spans[span].wds;
        size_t first = spans[span].first_row, end = first + spans[span].rows;
        for (size_t slot = 0; slot < wds->slot_count; slot++, at++) {
            char **found = bsearch(&wds->slots[slot].name, sorted, unique, sizeof *sorted,
                                   by_text);
            column_of[at] = (size_t)(found - sorted) + 2;
        }
        for (size_t row = first; row < end; row++)
            key_total += key_bytes(&wds->keys[row]);
        size_t base = at - wds->slot_count;
        for (size_t index = first_member_from(wds, first);
             index < wds->member_count && wds->members[index].row < end; index++) {
            size_t column = column_of[base + wds->members[index].slot];
            bytes[column] += wds->members[index].size;
            present[column]++;
        }
    }
    if (key_total > FIO_COLUMN_MAX_BYTES)
        rc = -E2BIG;
    for (size_t column = 2; column < count; column++)
        if (bytes[column] > FIO_COLUMN_MAX_BYTES)
            rc = -E2BIG;
    if (rc == -E2BIG)
        goto fail;
    columns[0] = (fio_column_out){.name = "__key__", .kind = FIO_COLUMN_STRING};
    columns[0].offsets = fio_buffer_alloc((rows + 1) * sizeof(int32_t));
    columns[0].data = fio_buffer_alloc(key_total);
    columns[1] = (fio_column_out){.name = "__url__", .kind = FIO_COLUMN_DICTIONARY};
    columns[1].data = (void *)urls;
    columns[1].data_length = (size_t)url_offsets[url_count];
    columns[1].dictionary_offsets = url_offsets;
    columns[1].dictionary_count = url_count;
    columns[1].offsets = fio_buffer_alloc(rows * sizeof(int32_t) + 1);
    if (!columns[0].offsets || !columns[0].data || !columns[1].offsets)
        goto fail;
    for (size_t column = 2; column < count; column++) {
        fio_column_out *out = &columns[column];
        out->name = sorted[column - 2];
        out->kind = FIO_COLUMN_BINARY;
        out->null_count = (int64_t)(rows - present[column]);
        out->offsets = fio_buffer_alloc((rows + 1) * sizeof(int32_t));
        out->data = fio_buffer_alloc(bytes[column]);
        if (present[column] < rows)
            out->validity = fio_buffer_zeroed((rows + 7) / 8);
        if (!out->offsets || !out->data || (present[column] < rows && !out->validity))
            goto fail;
        ((int32_t *)out->offsets)[0] = 0;
    }
    int32_t *key_offsets = columns[0].offsets, *url_rows = columns[1].offsets;
    size_t at_key = 0, out_row = 0;
    key_offsets[0] = 0;
    for (size_t span = 0, base = 0; span < span_count; span++) {
        const fio_wds *wds = spans[span].wds;
        size_t first = spans[span].first_row, end = first + spans[span].rows;
        for (size_t row = first; row < end; row++, out_row++) {
            at_key += key_copy(&wds->keys[row], (uint8_t *)columns[0].data + at_key);
            key_offsets[out_row + 1] = (int32_t)at_key;
            url_rows[out_row] = (int32_t)spans[span].url;
        }
        size_t row_base = out_row - spans[span].rows;
        for (size_t index = first_member_from(wds, first);
             index < wds->member_count && wds->members[index].row < end; index++) {
            const wds_member *member = &wds->members[index];
            size_t column = column_of[base + member->slot];
            fio_column_out *out = &columns[column];
            int32_t *offsets = out->offsets;
            size_t row = row_base + member->row - first;
            /* Rows without this extension before this one: empty, null. */
            for (; filled[column] < row; filled[column]++)
                offsets[filled[column] + 1] = (int32_t)gathered[column];
            fio_copy_value((uint8_t *)out->data + gathered[column], member->data, member->size);
            gathered[column] += member->size;
            offsets[row + 1] = (int32_t)gathered[column];
            if (out->validity)
                ((uint8_t *)out->validity)[row / 8] |= (uint8_t)(1u << (row % 8));
            filled[column] = row + 1;
        }
        base += wds->slot_count;
    }
    fio_copy_done();
    for (size_t column = 2; column < count; column++)
        for (; filled[column] < rows; filled[column]++)
            ((int32_t *)columns[column].offsets)[filled[column] + 1] = (int32_t)gathered[column];
    rc = fio_export_columns((int64_t)rows, columns, count, schema, array);
    free(columns);
    free(sorted);
    free(column_of);
    free(filled);
    return rc;
fail:
    if (columns)
        fio_columns_free(columns, count);
    free(columns);
    free(sorted);
    free(column_of);
    free(filled);
    return rc;
}

/* ---- a batch built as its spans come in ---- */

typedef struct builder_column {
    char *name;
    int32_t *offsets; /* room for the builder's rows + 1 */
    uint8_t *data;
    uint64_t used, room;
    uint8_t *validity; /* NULL while every row so far has a value */
    size_t present, filled; /* rows with a value; rows whose offsets are written */
} builder_column;

struct fio_wds_builder {
    size_t capacity, rows;
    builder_column *columns;
    size_t column_count, column_room;
    int32_t *key_offsets;
    uint8_t *key_data;
    uint64_t key_used, key_room;
    int32_t *url_rows;
};

fio_wds_builder *fio_wds_builder_new(size_t rows)
{
    if (rows > FIO_COLUMN_MAX_BYTES)
        return NULL;
    fio_wds_builder *builder = calloc(1, sizeof *builder);
    if (builder)
        builder->capacity = rows;
    return builder;
}

static void builder_clear(fio_wds_builder *builder)
{
    for (size_t column = 0; column < builder->column_count; column++) {
        builder_column *at = &builder->columns[column];
        free(at->name);
        fio_buffer_free(at->offsets);
        fio_buffer_free(at->data);
        fio_buffer_free(at->validity);
    }
    builder->column_count = 0;
    fio_buffer_free(builder->key_offsets);
    fio_buffer_free(builder->key_data);
    fio_buffer_free(builder->url_rows);
    builder->key_offsets = builder->url_rows = NULL;
    builder->key_data = NULL;
    builder->key_used = builder->key_room = 0;
    builder->rows = 0;
}

void fio_wds_builder_free(fio_wds_builder *builder)
{
    if (!builder)
        return;
    builder_clear(builder);
    free(builder->columns);
    free(builder);
}

size_t fio_wds_builder_rows(const fio_wds_builder *builder)
{
    return builder->rows;
}

/* The column named `name`, made (all null so far) if there is none; -1 without memory. */
static ptrdiff_t builder_column_of(fio_wds_builder *builder, const char *name)
{
    for (size_t column = 0; column < builder->column_count; column++)
        if (!strcmp(builder->columns[column].name, name))
            return (ptrdiff_t)column;
    if (builder->column_count == builder->column_room) {
        size_t room = builder->column_room ? 2 * builder->column_room : 8;
        builder_column *grown = realloc(builder->columns, room * sizeof *grown);
        if (!grown)
            return -1;
        builder->columns = grown;
        builder->column_room = room;
    }
    builder_column *made = &builder->columns[builder->column_count];
    memset(made, 0, sizeof *made);
    made->name = strdup(name);
    made->offsets = fio_buffer_alloc((builder->capacity + 1) * sizeof(int32_t));
    if (!made->name || !made->offsets) {
        free(made->name);
        fio_buffer_free(made->offsets);
        return -1;
    }
    memset(made->offsets, 0, (builder->rows + 1) * sizeof(int32_t));
    made->filled = builder->rows; /* null, all of them */
    return (ptrdiff_t)builder->column_count++;
}

int fio_wds_builder_add(fio_wds_builder *builder, const fio_wds_span *spans, size_t count)
{
    size_t rows = 0, slots = 0, had = builder->column_count;
    for (size_t span = 0; span < count; span++) {
        rows += spans[span].rows;
        slots += spans[span].wds->slot_count;
    }
    if (rows > builder->capacity - builder->rows)
        return -E2BIG;
    if (!rows)
        return 0;
    size_t *column_of = calloc(slots + 1, sizeof *column_of);
    uint64_t *more = NULL;
    int rc = -ENOMEM;
    if (!column_of)
        goto fail;
    for (size_t span = 0, at = 0; span < count; span++)
        for (size_t slot = 0; slot < spans[span].wds->slot_count; slot++, at++) {
            ptrdiff_t column = builder_column_of(builder, spans[span].wds->slots[slot].name);
            if (column < 0)
                goto fail;
            column_of[at] = (size_t)column;
        }
    /* Per column: the bytes these rows add, then the rows that have it. */
    more = calloc(2 * builder->column_count + 1, sizeof *more);
    if (!more)
        goto fail;
    uint64_t *present = more + builder->column_count, key_more = 0;
    for (size_t span = 0, base = 0; span < count; span++) {
        const fio_wds *wds = spans[span].wds;
        size_t first = spans[span].first_row, end = first + spans[span].rows;
        for (size_t row = first; row < end; row++)
            key_more += key_bytes(&wds->keys[row]);
        for (size_t index = first_member_from(wds, first);
             index < wds->member_count && wds->members[index].row < end; index++) {
            size_t column = column_of[base + wds->members[index].slot];
            more[column] += wds->members[index].size;
            present[column]++;
        }
        base += wds->slot_count;
    }
    rc = -E2BIG;
    if (builder->key_used + key_more > FIO_COLUMN_MAX_BYTES)
        goto fail;
    for (size_t column = 0; column < builder->column_count; column++)
        if (builder->columns[column].used + more[column] > FIO_COLUMN_MAX_BYTES)
            goto fail;
    rc = -ENOMEM;
    size_t left = builder->capacity - builder->rows - rows;
    if (!builder->key_offsets) {
        builder->key_offsets = fio_buffer_alloc((builder->capacity + 1) * sizeof(int32_t));
        builder->url_rows = fio_buffer_alloc(builder->capacity * sizeof(int32_t) + 1);
        if (!builder->key_offsets || !builder->url_rows)
            goto fail;
        builder->key_offsets[0] = 0;
    }
    void *room = builder->key_data;
    int grown = fio_grow_room(&room, &builder->key_room, builder->key_used,
                              builder->key_used + key_more, rows, left);
    builder->key_data = room;
    if (grown)
        goto fail;
    for (size_t column = 0; column < builder->column_count; column++) {
        builder_column *at = &builder->columns[column];
        room = at->data;
        grown = fio_grow_room(&room, &at->room, at->used, at->used + more[column], rows, left);
        at->data = room;
        if (grown)
            goto fail;
        if (!at->validity && at->present + present[column] < builder->rows + rows) {
            at->validity = fio_buffer_zeroed((builder->capacity + 7) / 8);
            if (!at->validity)
                goto fail;
            fio_mark_rows_valid(at->validity, at->present); /* no null so far: the rows before */
        }
    }
    /* Room is made: from here on nothing fails. */
    size_t out_row = builder->rows;
    for (size_t span = 0, base = 0; span < count; span++) {
        const fio_wds *wds = spans[span].wds;
        size_t first = spans[span].first_row, end = first + spans[span].rows;
        size_t row_base = out_row;
        for (size_t row = first; row < end; row++, out_row++) {
            builder->key_used += key_copy(&wds->keys[row], builder->key_data + builder->key_used);
            builder->key_offsets[out_row + 1] = (int32_t)builder->key_used;
            builder->url_rows[out_row] = (int32_t)spans[span].url;
        }
        for (size_t index = first_member_from(wds, first);
             index < wds->member_count && wds->members[index].row < end; index++) {
            const wds_member *member = &wds->members[index];
            builder_column *at = &builder->columns[column_of[base + member->slot]];
            size_t row = row_base + member->row - first;
            /* Rows without this extension before this one: empty, null. */
            for (; at->filled < row; at->filled++)
                at->offsets[at->filled + 1] = (int32_t)at->used;
            fio_copy_value(at->data + at->used, member->data, member->size);
            at->used += member->size;
            at->offsets[row + 1] = (int32_t)at->used;
            if (at->validity)
                at->validity[row / 8] |= (uint8_t)(1u << (row % 8));
            at->present++;
            at->filled = row + 1;
        }
        base += wds->slot_count;
    }
    builder->rows = out_row;
    for (size_t column = 0; column < builder->column_count; column++) {
        builder_column *at = &builder->columns[column];
        for (; at->filled < builder->rows; at->filled++)
            at->offsets[at->filled + 1] = (int32_t)at->used;
    }
    free(column_of);
    free(more);
    fio_copy_done();
    return 0;
fail:
    /* Columns made for these spans go again: nothing was added. */
    while (builder->column_count > had) {
        builder_column *made = &builder->columns[--builder->column_count];
        free(made->name);
        fio_buffer_free(made->offsets);
        fio_buffer_free(made->data);
        fio_buffer_free(made->validity);
    }
    free(column_of);
    free(more);
    return rc;
}

static int by_column_name(const void *left, const void *right)
{
    return strcmp(((const builder_column *)left)->name, ((const builder_column *)right)->name);
}

int fio_wds_builder_export(fio_wds_builder *builder, const char *urls,
                           const int32_t *url_offsets, size_t url_count,
                           struct ArrowSchema *schema, struct ArrowArray *array)
{
    size_t count = builder->column_count + 2, rows = builder->rows;
    fio_column_out *columns = calloc(count, sizeof *columns);
    int rc = -ENOMEM;
    if (!columns)
        goto done;
    if (!builder->key_offsets) { /* no rows */
        builder->key_offsets = fio_buffer_zeroed(sizeof(int32_t));
        builder->url_rows = fio_buffer_alloc(1);
    }
    if (!builder->key_data)
        builder->key_data = fio_buffer_alloc(0);
    for (size_t column = 0; column < builder->column_count; column++)
        if (!builder->columns[column].data)
            builder->columns[column].data = fio_buffer_alloc(0);
    qsort(builder->columns, builder->column_count, sizeof *builder->columns, by_column_name);
    columns[0] = (fio_column_out){.name = "__key__", .kind = FIO_COLUMN_STRING,
                                  .offsets = builder->key_offsets, .data = builder->key_data};
    columns[1] = (fio_column_out){.name = "__url__", .kind = FIO_COLUMN_DICTIONARY,
                                  .offsets = builder->url_rows, .data = (void *)urls,
                                  .data_length = (size_t)url_offsets[url_count],
                                  .dictionary_offsets = url_offsets,
                                  .dictionary_count = url_count};
    int missing = !builder->key_offsets || !builder->url_rows || !builder->key_data;
    builder->key_offsets = builder->url_rows = NULL;
    builder->key_data = NULL;
    for (size_t column = 0; column < builder->column_count; column++) {
        builder_column *at = &builder->columns[column];
        columns[column + 2] = (fio_column_out){
            .name = at->name, .kind = FIO_COLUMN_BINARY,
            .null_count = (int64_t)(rows - at->present),
            .offsets = at->offsets, .data = at->data, .validity = at->validity};
        missing |= !at->data;
        at->offsets = NULL;
        at->data = at->validity = NULL;
    }
    if (missing) {
        fio_columns_free(columns, count);
        goto done;
    }
    /* The export owns the buffers from here, on failure too. */
    rc = fio_export_columns((int64_t)rows, columns, count, schema, array);
done:
    free(columns);
    builder_clear(builder);
    return rc;
}
