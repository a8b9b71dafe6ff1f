#define _GNU_SOURCE
#include "columnar.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Records framed per fio_tfrecord_scan call (on the stack). */
#define FRAME_STEP 512

static int grow(void **items, size_t *capacity, size_t wanted, size_t item_size)
{
    if (wanted <= *capacity)
        return 0;
    size_t grown = *capacity ? *capacity * 2 : 1024;
    if (grown < wanted)
        grown = wanted;
    void *larger = realloc(*items, grown * item_size);
    if (!larger)
        return -ENOMEM;
    *items = larger;
    *capacity = grown;
    return 0;
}

/* ---- column memory ------------------------------------------------------------------
 * Cache-line aligned, never NULL for an empty buffer, and recycled: a batch's
 * buffers go back to a small pool when pyarrow lets them go, because fresh
 * memory costs a page fault per 4 KiB (clearing it included), which on some
 * virtual machines costs more than filling it. Blocks are powers of two from
 * 64 bytes, with a header (their class) in the cache line before them. */

#define POOL_CLASSES 32
#define POOL_SMALLEST 64
#define POOL_MIN_CLASS 8                  /* 16 KiB: smaller blocks go to malloc as they are */
#define POOL_MAX_BYTES ((size_t)64 << 20) /* kept for reuse, at most */

typedef struct pool_block {
    struct pool_block *next;
} pool_block;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pool_block *pool_free[POOL_CLASSES];
static size_t pool_bytes;

static void pool_lock_all(void)
{
    pthread_mutex_lock(&pool_lock);
}

static void pool_unlock_all(void)
{
    pthread_mutex_unlock(&pool_lock);
}

static void pool_init(void)
{
    /* A fork while another thread holds the lock must not leave it held. */
    pthread_atfork(pool_lock_all, pool_unlock_all, pool_unlock_all);
}

static void *buffer_alloc(size_t size)
{
    size_t class = 0;
    while (class < POOL_CLASSES - 1 && ((size_t)POOL_SMALLEST << class) < size)
        class++;
    if (((size_t)POOL_SMALLEST << class) < size)
        return NULL;
    uint8_t *block = NULL;
    if (class >= POOL_MIN_CLASS) {
        pthread_once(&pool_once, pool_init);
        pthread_mutex_lock(&pool_lock);
        if (pool_free[class]) {
            block = (uint8_t *)pool_free[class];
            pool_free[class] = pool_free[class]->next;
            pool_bytes -= (size_t)POOL_SMALLEST << class;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    if (!block && posix_memalign((void **)&block, 64, 64 + ((size_t)POOL_SMALLEST << class)))
        return NULL;
    block[0] = (uint8_t)class;
    return block + 64;
}

static void buffer_free(const void *memory)
{
    if (!memory)
        return;
    uint8_t *block = (uint8_t *)memory - 64;
    size_t class = block[0], size = (size_t)POOL_SMALLEST << class;
    if (class >= POOL_MIN_CLASS) {
        pthread_mutex_lock(&pool_lock);
        if (pool_bytes + size <= POOL_MAX_BYTES) {
            ((pool_block *)block)->next = pool_free[class];
            pool_free[class] = (pool_block *)block;
            pool_bytes += size;
            block = NULL;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    free(block);
}

static void *buffer_zeroed(size_t size)
{
    void *memory = buffer_alloc(size);
    if (memory)
        memset(memory, 0, size);
    return memory;
}

/* ---- export through the Arrow C data interface ----------------------------------------
 * Every node (schema or array, parent or child) owns what it points to and
 * frees it in its own release callback, so that a consumer may move a child
 * out and release the parent, as the specification allows. */

typedef struct schema_private {
    char *name;
    struct ArrowSchema *child_block;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
} schema_private;

typedef struct array_private {
    const void *buffers[3];
    struct ArrowArray *child_block;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
} array_private;

static void release_schema(struct ArrowSchema *schema)
{
    schema_private *own = schema->private_data;
    for (int64_t index = 0; index < schema->n_children; index++)
        if (schema->children[index]->release)
            schema->children[index]->release(schema->children[index]);
    if (schema->dictionary && schema->dictionary->release)
        schema->dictionary->release(schema->dictionary);
    free(own->name);
    free(own->child_block);
    free(own->children);
    free(own->dictionary);
    free(own);
    schema->release = NULL;
}

static void release_array(struct ArrowArray *array)
{
    array_private *own = array->private_data;
    for (int64_t index = 0; index < array->n_children; index++)
        if (array->children[index]->release)
            array->children[index]->release(array->children[index]);
    if (array->dictionary && array->dictionary->release)
        array->dictionary->release(array->dictionary);
    for (int index = 0; index < 3; index++)
        buffer_free(own->buffers[index]);
    free(own->child_block);
    free(own->children);
    free(own->dictionary);
    free(own);
    array->release = NULL;
}

static int schema_node(struct ArrowSchema *schema, const char *format, const char *name,
                       size_t name_length, int64_t flags, size_t children)
{
    schema_private *own = calloc(1, sizeof *own);
    memset(schema, 0, sizeof *schema);
    if (!own)
        return -ENOMEM;
    schema->format = format;
    schema->flags = flags;
    schema->release = release_schema;
    schema->private_data = own;
    own->name = malloc(name_length + 1);
    if (children) {
        own->child_block = calloc(children, sizeof *own->child_block);
        own->children = calloc(children, sizeof *own->children);
    }
    if (!own->name || (children && (!own->child_block || !own->children))) {
        release_schema(schema);
        return -ENOMEM;
    }
    memcpy(own->name, name, name_length);
    own->name[name_length] = 0;
    schema->name = own->name;
    for (size_t index = 0; index < children; index++)
        own->children[index] = &own->child_block[index];
    schema->children = own->children;
    schema->n_children = (int64_t)children;
    return 0;
}

/* Takes the buffers: the array's release frees them, or this does at once on failure. */
static int array_node(struct ArrowArray *array, int64_t length, int64_t null_count,
                      int64_t n_buffers, void *validity, void *second, void *third,
                      size_t children)
{
    array_private *own = calloc(1, sizeof *own);
    memset(array, 0, sizeof *array);
    if (!own) {
        buffer_free(validity);
        buffer_free(second);
        buffer_free(third);
        return -ENOMEM;
    }
    own->buffers[0] = validity;
    own->buffers[1] = second;
    own->buffers[2] = third;
    array->length = length;
    array->null_count = null_count;
    array->n_buffers = n_buffers;
    array->buffers = own->buffers;
    array->release = release_array;
    array->private_data = own;
    if (children) {
        own->child_block = calloc(children, sizeof *own->child_block);
        own->children = calloc(children, sizeof *own->children);
        if (!own->child_block || !own->children) {
            release_array(array);
            return -ENOMEM;
        }
        for (size_t index = 0; index < children; index++)
            own->children[index] = &own->child_block[index];
        array->children = own->children;
        array->n_children = (int64_t)children;
    }
    return 0;
}

enum column_kind { COLUMN_BINARY, COLUMN_STRING, COLUMN_CONSTANT };

/* A column ready to export. Its buffers are the export's once export_columns
 * runs (or freed by it); a COLUMN_CONSTANT column is `rows` times the string
 * in `data` (not owned), dictionary-encoded. */
typedef struct column_out {
    const char *name;
    int kind;
    int64_t null_count;
    void *validity, *offsets, *data;
    size_t data_length;
} column_out;

static void free_columns(column_out *columns, size_t count)
{
    for (size_t index = 0; index < count; index++) {
        if (columns[index].kind == COLUMN_CONSTANT)
            continue;
        buffer_free(columns[index].validity);
        buffer_free(columns[index].offsets);
        buffer_free(columns[index].data);
        columns[index].validity = columns[index].offsets = columns[index].data = NULL;
    }
}

static int export_column(struct ArrowSchema *schema, struct ArrowArray *array, int64_t rows,
                         column_out *column)
{
    static const char *formats[] = {"z", "u", "i"};
    int rc = schema_node(schema, formats[column->kind], column->name, strlen(column->name),
                         ARROW_FLAG_NULLABLE, 0);
    if (rc)
        return rc;
    if (column->kind != COLUMN_CONSTANT) {
        rc = array_node(array, rows, column->null_count, 3, column->validity, column->offsets,
                        column->data, 0);
        column->validity = column->offsets = column->data = NULL;
        return rc;
    }
    /* Indices all 0 into a dictionary of the one string. */
    schema_private *own = schema->private_data;
    own->dictionary = malloc(sizeof *own->dictionary);
    if (!own->dictionary || schema_node(own->dictionary, "u", "", 0, 0, 0))
        return -ENOMEM; /* the caller releases `schema`, which frees the dictionary */
    schema->dictionary = own->dictionary;
    if (array_node(array, rows, 0, 2, NULL, buffer_zeroed((size_t)rows * 4), NULL, 0))
        return -ENOMEM;
    int32_t *offsets = buffer_alloc(2 * sizeof(int32_t));
    uint8_t *text = buffer_alloc(column->data_length);
    array_private *indices = array->private_data;
    indices->dictionary = malloc(sizeof *indices->dictionary);
    if (!indices->buffers[1] || !indices->dictionary || !offsets || !text) {
        buffer_free(offsets);
        buffer_free(text);
        return -ENOMEM;
    }
    offsets[0] = 0;
    offsets[1] = (int32_t)column->data_length;
    memcpy(text, column->data, column->data_length);
    array->dictionary = indices->dictionary;
    return array_node(array->dictionary, 1, 0, 3, NULL, offsets, text, 0);
}

/* A record batch (a struct array, as the Arrow PyCapsule interface has it) of
 * `columns`. On failure everything is freed, the columns' buffers too. */
static int export_columns(int64_t rows, column_out *columns, size_t count,
                          struct ArrowSchema *schema, struct ArrowArray *array)
{
    int rc = schema_node(schema, "+s", "", 0, 0, count);
    if (!rc)
        rc = array_node(array, rows, 0, 1, NULL, NULL, NULL, count);
    for (size_t index = 0; !rc && index < count; index++)
        rc = export_column(schema->children[index], array->children[index], rows,
                           &columns[index]);
    if (rc) {
        free_columns(columns, count);
        fio_export_release(schema, array);
    }
    return rc;
}

void fio_export_release(struct ArrowSchema *schema, struct ArrowArray *array)
{
    if (schema && schema->release)
        schema->release(schema);
    if (array && array->release)
        array->release(array);
}

/* ---- one binary column of records ---------------------------------------------------- */

void fio_records_free(fio_records *records)
{
    free(records->pieces);
    memset(records, 0, sizeof *records);
}

static int add_piece(fio_records *records, const uint8_t *data, uint64_t length, int joins)
{
    if (grow((void **)&records->pieces, &records->capacity, records->count + 1,
             sizeof(fio_piece)))
        return -ENOMEM;
    fio_piece *piece = &records->pieces[records->count++];
    piece->data = data;
    piece->length = length;
    piece->joins = joins;
    records->bytes += length;
    records->rows += !joins;
    return 0;
}

int fio_tfrecord_collect(const uint8_t *buf, size_t len, int verify, uint64_t max_bytes,
                         fio_records *out, size_t *rows, size_t *consumed, size_t *needed,
                         int *full, fio_frame_error *error)
{
    fio_record found[FRAME_STEP];
    size_t pos = 0, step_consumed = 0;

    *rows = 0;
    *full = 0;
    *needed = 0;
    if (max_bytes > FIO_COLUMN_MAX_BYTES)
        max_bytes = FIO_COLUMN_MAX_BYTES;
    for (;;) {
        size_t count = fio_tfrecord_scan(buf + pos, len - pos, verify, found, FRAME_STEP,
                                         &step_consumed, needed, error);
        if (grow((void **)&out->pieces, &out->capacity, out->count + count, sizeof(fio_piece)))
            return -ENOMEM;
        for (size_t index = 0; index < count; index++) {
            if (found[index].length > max_bytes - out->bytes) {
                /* The rest waits for the next batch (an error after it too:
                 * the next scan finds that again). */
                *consumed = pos + found[index].offset - 12;
                *needed = 0;
                *full = 1;
                error->kind = FIO_FRAME_OK;
                return 0;
            }
            add_piece(out, buf + pos + found[index].offset, found[index].length, 0);
            (*rows)++;
        }
        if (error->kind)
            error->offset += pos;
        pos += step_consumed;
        if (error->kind || count < FRAME_STEP)
            break;
    }
    *consumed = pos;
    return 0;
}

int fio_lines_collect(const uint8_t *buf, size_t len, const uint8_t *prefix,
                      size_t prefix_length, int final, uint64_t max_bytes, fio_records *out,
                      size_t *rows, size_t *consumed, int *full)
{
    size_t pos = 0, carried = prefix_length; /* the first line begins with the prefix */

    *rows = 0;
    *full = 0;
    if (max_bytes > FIO_COLUMN_MAX_BYTES)
        max_bytes = FIO_COLUMN_MAX_BYTES;
    for (;;) {
        const uint8_t *newline = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        if (!newline && (!final || (pos == len && !carried)))
            break;
        size_t end = newline ? (size_t)(newline - buf) : len;
        if (end - pos + carried > max_bytes - out->bytes) {
            *full = 1;
            break;
        }
        if ((carried && add_piece(out, prefix, carried, 0)) ||
            add_piece(out, buf + pos, end - pos, carried > 0))
            return -ENOMEM;
        (*rows)++;
        carried = 0;
        pos = newline ? end + 1 : len;
        if (!newline)
            break;
    }
    *consumed = pos;
    return 0;
}

int fio_records_export(fio_records *records, const char *name, struct ArrowSchema *schema,
                       struct ArrowArray *array)
{
    column_out column = {.name = name, .kind = COLUMN_BINARY};
    int32_t *offsets = buffer_alloc((records->rows + 1) * sizeof(int32_t));
    uint8_t *data = buffer_alloc(records->bytes);
    if (!offsets || !data) {
        buffer_free(offsets);
        buffer_free(data);
        return -ENOMEM;
    }
    size_t row = 0, at = 0;
    offsets[0] = 0;
    for (size_t index = 0; index < records->count; index++) {
        const fio_piece *piece = &records->pieces[index];
        if (index && !piece->joins)
            offsets[++row] = (int32_t)at;
        memcpy(data + at, piece->data, piece->length);
        at += piece->length;
    }
    if (records->count)
        offsets[++row] = (int32_t)at;
    column.offsets = offsets;
    column.data = data;
    int rc = export_columns((int64_t)records->rows, &column, 1, schema, array);
    if (!rc)
        records->count = records->rows = records->bytes = 0;
    return rc;
}

/* ---- WebDataset tar ------------------------------------------------------------------ */

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
    uint64_t hash;
    uint64_t serial; /* the sample that used this slot last */
    uint64_t bytes;  /* of the samples collected for the next batch */
    size_t rows;
    uint64_t gathered; /* fio_wds_export's cursors */
    size_t filled;
} wds_slot;

struct fio_wds {
    wds_slot *slots;
    size_t slot_count, slot_capacity;
    uint32_t *table; /* open addressing over the slots: index + 1, or 0 for empty */
    size_t table_size;
    wds_member *members;
    size_t member_count, member_capacity;
    wds_key *keys; /* one per row */
    size_t row_count, row_capacity;
    uint64_t key_bytes;
    uint64_t serial;
};

#define WDS_TABLE_START 64
#define PREFETCH_DISTANCE 4096
/* A ustar prefix (155 bytes), "/" and the 100-byte name field. */
#define WDS_USTAR_NAME 256

fio_wds *fio_wds_new(void)
{
    fio_wds *wds = calloc(1, sizeof *wds);
    if (!wds)
        return NULL;
    wds->table = calloc(WDS_TABLE_START, sizeof *wds->table);
    if (!wds->table) {
        free(wds);
        return NULL;
    }
    wds->table_size = WDS_TABLE_START;
    return wds;
}

void fio_wds_reset_columns(fio_wds *wds)
{
    for (size_t slot = 0; slot < wds->slot_count; slot++)
        free(wds->slots[slot].name);
    wds->slot_count = 0;
    memset(wds->table, 0, wds->table_size * sizeof *wds->table);
}

void fio_wds_free(fio_wds *wds)
{
    if (!wds)
        return;
    fio_wds_reset_columns(wds);
    free(wds->slots);
    free(wds->table);
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

static int utf8_valid(const uint8_t *text, size_t length)
{
    size_t index = 0;
    while (index < length) {
        uint8_t lead = text[index];
        size_t extra;
        uint32_t point;
        if (lead < 0x80) {
            index++;
            continue;
        }
        if (lead >= 0xc2 && lead <= 0xdf) {
            extra = 1;
            point = lead & 0x1f;
        } else if (lead >= 0xe0 && lead <= 0xef) {
            extra = 2;
            point = lead & 0x0f;
        } else if (lead >= 0xf0 && lead <= 0xf4) {
            extra = 3;
            point = lead & 0x07;
        } else {
            return 0;
        }
        if (length - index <= extra)
            return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((text[index + k] & 0xc0) != 0x80)
                return 0;
            point = (point << 6) | (text[index + k] & 0x3f);
        }
        if (extra == 2 && (point < 0x800 || (point >= 0xd800 && point <= 0xdfff)))
            return 0; /* overlong, or a surrogate */
        if (extra == 3 && (point < 0x10000 || point > 0x10ffff))
            return 0;
        index += extra + 1;
    }
    return 1;
}

static uint64_t fnv1a(const uint8_t *bytes, size_t length)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t index = 0; index < length; index++)
        hash = (hash ^ bytes[index]) * 0x100000001b3ull;
    return hash;
}

static void table_insert(uint32_t *table, size_t size, uint64_t hash, uint32_t entry)
{
    size_t mask = size - 1, index = hash & mask;
    while (table[index])
        index = (index + 1) & mask;
    table[index] = entry;
}

/* The slot of an extension, made on first sight. Returns 0, 1 for a name that
 * cannot name a column (not UTF-8, or with a NUL), or -ENOMEM. */
static int intern(fio_wds *wds, const uint8_t *extension, size_t length, uint32_t *slot)
{
    uint64_t hash = fnv1a(extension, length);
    size_t mask = wds->table_size - 1;
    for (size_t index = hash & mask; wds->table[index]; index = (index + 1) & mask) {
        wds_slot *known = &wds->slots[wds->table[index] - 1];
        if (known->hash == hash && known->length == length &&
            !memcmp(known->name, extension, length)) {
            *slot = wds->table[index] - 1;
            return 0;
        }
    }
    if (!utf8_valid(extension, length) || memchr(extension, 0, length))
        return 1;
    if (grow((void **)&wds->slots, &wds->slot_capacity, wds->slot_count + 1, sizeof(wds_slot)))
        return -ENOMEM;
    if ((wds->slot_count + 1) * 2 > wds->table_size) {
        size_t size = wds->table_size * 2;
        uint32_t *table = calloc(size, sizeof *table);
        if (!table)
            return -ENOMEM;
        for (size_t known = 0; known < wds->slot_count; known++)
            table_insert(table, size, wds->slots[known].hash, (uint32_t)known + 1);
        free(wds->table);
        wds->table = table;
        wds->table_size = size;
    }
    char *name = malloc(length + 1);
    if (!name)
        return -ENOMEM;
    memcpy(name, extension, length);
    name[length] = 0;
    wds_slot *fresh = &wds->slots[wds->slot_count];
    memset(fresh, 0, sizeof *fresh);
    fresh->name = name;
    fresh->length = length;
    fresh->hash = hash;
    *slot = (uint32_t)wds->slot_count++;
    table_insert(wds->table, wds->table_size, hash, *slot + 1);
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
    return utf8_valid(key->prefix, key->prefix_length) &&
           utf8_valid(key->name, key->key_length);
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
    if (grow((void **)&wds->keys, &wds->row_capacity, wds->row_count + most, sizeof(wds_key)) ||
        grow((void **)&wds->members, &wds->member_capacity, wds->member_count + most,
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
         * memory, 1 KB samples). */
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

static int by_name(const void *left, const void *right, void *context)
{
    const wds_slot *slots = context;
    return strcmp(slots[*(const size_t *)left].name, slots[*(const size_t *)right].name);
}

int fio_wds_export(fio_wds *wds, const char *url, size_t url_length, struct ArrowSchema *schema,
                   struct ArrowArray *array)
{
    size_t rows = wds->row_count, slots = wds->slot_count, count = slots + 2;
    column_out *columns = calloc(count, sizeof *columns);
    size_t *order = calloc(2 * slots + 1, sizeof *order); /* slots by name, then back */
    size_t *column_of = order + slots;
    int rc = -ENOMEM;
    if (!columns || !order)
        goto fail;
    columns[0] = (column_out){.name = "__key__", .kind = COLUMN_STRING};
    columns[0].offsets = buffer_alloc((rows + 1) * sizeof(int32_t));
    columns[0].data = buffer_alloc(wds->key_bytes);
    columns[1] = (column_out){.name = "__url__", .kind = COLUMN_CONSTANT};
    columns[1].data = (void *)url;
    columns[1].data_length = url_length;
    if (!columns[0].offsets || !columns[0].data)
        goto fail;
    for (size_t slot = 0; slot < slots; slot++)
        order[slot] = slot;
    qsort_r(order, slots, sizeof *order, by_name, wds->slots);
    for (size_t index = 0; index < slots; index++) {
        wds_slot *slot = &wds->slots[order[index]];
        column_of[order[index]] = index + 2;
        column_out *column = &columns[index + 2];
        column->name = slot->name;
        column->kind = COLUMN_BINARY;
        column->null_count = (int64_t)(rows - slot->rows);
        column->offsets = buffer_alloc((rows + 1) * sizeof(int32_t));
        column->data = buffer_alloc(slot->bytes);
        if (slot->rows < rows)
            column->validity = buffer_zeroed((rows + 7) / 8);
        if (!column->offsets || !column->data || (slot->rows < rows && !column->validity))
            goto fail;
        slot->gathered = 0;
        slot->filled = 0;
        ((int32_t *)column->offsets)[0] = 0;
    }

    int32_t *key_offsets = columns[0].offsets;
    size_t at = 0;
    key_offsets[0] = 0;
    for (size_t row = 0; row < rows; row++) {
        at += key_copy(&wds->keys[row], (uint8_t *)columns[0].data + at);
        key_offsets[row + 1] = (int32_t)at;
    }
    for (size_t index = 0; index < wds->member_count; index++) {
        const wds_member *member = &wds->members[index];
        wds_slot *slot = &wds->slots[member->slot];
        column_out *column = &columns[column_of[member->slot]];
        int32_t *offsets = column->offsets;
        /* Rows without this extension before this one: empty, null. */
        for (; slot->filled < member->row; slot->filled++)
            offsets[slot->filled + 1] = (int32_t)slot->gathered;
        memcpy((uint8_t *)column->data + slot->gathered, member->data, member->size);
        slot->gathered += member->size;
        offsets[member->row + 1] = (int32_t)slot->gathered;
        if (column->validity)
            ((uint8_t *)column->validity)[member->row / 8] |= (uint8_t)(1u << (member->row % 8));
        slot->filled = member->row + 1;
    }
    for (size_t slot = 0; slot < slots; slot++) {
        int32_t *offsets = columns[column_of[slot]].offsets;
        for (; wds->slots[slot].filled < rows; wds->slots[slot].filled++)
            offsets[wds->slots[slot].filled + 1] = (int32_t)wds->slots[slot].gathered;
    }
    rc = export_columns((int64_t)rows, columns, count, schema, array);
    if (!rc) {
        wds->row_count = wds->member_count = 0;
        wds->key_bytes = 0;
        for (size_t slot = 0; slot < slots; slot++) {
            wds->slots[slot].bytes = 0;
            wds->slots[slot].rows = 0;
        }
    }
    free(columns);
    free(order);
    return rc;
fail:
    if (columns)
        free_columns(columns, count);
    free(columns);
    free(order);
    return rc;
}
