/* Shared by the collectors: records (columnar.c), WebDataset samples
 * (wds_columns.c) and tf.train.Example features (example_columns.c). */
#ifndef FASTIO_COLUMNAR_INTERNAL_H
#define FASTIO_COLUMNAR_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "arrow_export.h"
#include "columnar.h"

/* Makes room for `wanted` items of `item_size` bytes in `*items`, doubling
 * `*capacity` (from 1024). Returns 0, or -ENOMEM with the items kept. */
static inline int fio_grow(void **items, size_t *capacity, size_t wanted, size_t item_size)
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

static inline int fio_utf8_valid(const uint8_t *text, size_t length)
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

static inline uint64_t fio_fnv1a(const uint8_t *bytes, size_t length)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t index = 0; index < length; index++)
        hash = (hash ^ bytes[index]) * 0x100000001b3ull;
    return hash;
}

/* Names (tar extensions, Example features) to their column slots: open
 * addressing on the names' FNV-1a hashes, kept at most half full. An entry
 * points at its name, which must stay put while the entry is there. */
typedef struct fio_name_entry {
    const uint8_t *name;
    size_t length;
    uint64_t hash;
    uint32_t slot; /* plus one; 0: empty */
} fio_name_entry;

typedef struct fio_names {
    fio_name_entry *entries;
    size_t size, count;
} fio_names;

/* The slot `name` (of `hash`, fio_fnv1a's) was added with, or -1. */
static inline int64_t fio_names_find(const fio_names *names, const uint8_t *name, size_t length,
                                     uint64_t hash)
{
    if (!names->size)
        return -1;
    size_t mask = names->size - 1;
    for (size_t index = hash & mask; names->entries[index].slot; index = (index + 1) & mask) {
        const fio_name_entry *entry = &names->entries[index];
        if (entry->hash == hash && entry->length == length && !memcmp(entry->name, name, length))
            return (int64_t)entry->slot - 1;
    }
    return -1;
}

static inline void fio_names_place(fio_name_entry *entries, size_t size, fio_name_entry entry)
{
    size_t mask = size - 1, index = entry.hash & mask;
    while (entries[index].slot)
        index = (index + 1) & mask;
    entries[index] = entry;
}

/* Adds `name`, not there yet, as `slot`. Returns 0 or -ENOMEM (not added). */
static inline int fio_names_add(fio_names *names, const uint8_t *name, size_t length,
                                uint64_t hash, uint32_t slot)
{
    if ((names->count + 1) * 2 > names->size) {
        size_t size = names->size ? names->size * 2 : 64;
        fio_name_entry *entries = calloc(size, sizeof *entries);
        if (!entries)
            return -ENOMEM;
        for (size_t index = 0; index < names->size; index++)
            if (names->entries[index].slot)
                fio_names_place(entries, size, names->entries[index]);
        free(names->entries);
        names->entries = entries;
        names->size = size;
    }
    fio_name_entry entry = {name, length, hash, slot + 1};
    fio_names_place(names->entries, names->size, entry);
    names->count++;
    return 0;
}

static inline void fio_names_clear(fio_names *names)
{
    if (names->entries)
        memset(names->entries, 0, names->size * sizeof *names->entries);
    names->count = 0;
}

static inline void fio_names_free(fio_names *names)
{
    free(names->entries);
    memset(names, 0, sizeof *names);
}

/* Copies a value into a batch's column. A batch is larger than the caches, so
 * large values go with non-temporal stores: the column's lines are written
 * without being read first (a plain copy reads each destination line from
 * memory before it overwrites it), and the source the reader just filled
 * stays cached. Call fio_copy_done before the column is handed over. */
#define FIO_STREAM_MIN 16384

static inline void fio_copy_value(uint8_t *to, const uint8_t *from, size_t length)
{
#if defined(__x86_64__)
    if (length >= FIO_STREAM_MIN) {
        size_t head = (16 - ((uintptr_t)to & 15)) & 15;
        memcpy(to, from, head);
        to += head;
        from += head;
        length -= head;
        for (; length >= 64; to += 64, from += 64, length -= 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)from);
            __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(from + 48));
            _mm_stream_si128((__m128i *)to, a);
            _mm_stream_si128((__m128i *)(to + 16), b);
            _mm_stream_si128((__m128i *)(to + 32), c);
            _mm_stream_si128((__m128i *)(to + 48), d);
        }
    }
#endif
    memcpy(to, from, length);
}

/* Room for `need` bytes in `*buffer` (from fio_buffer_alloc, or NULL), of
 * which `used` are kept: a batch built as its rows come in first takes room
 * for all its rows at the rate of the `rows` added so far, `left` more to
 * come (a sixteenth over, as rows vary in size), then doubles its room. */
static inline int fio_grow_room(void **buffer, uint64_t *room, uint64_t used, uint64_t need,
                                size_t rows, size_t left)
{
    if (*buffer && need <= *room)
        return 0;
    uint64_t want = need;
    if (!*buffer || !*room) {
        want += rows ? need / rows * left : 0;
        want += want >> 4;
    } else if (want < 2 * *room) {
        want = 2 * *room;
    }
    if (want > FIO_COLUMN_MAX_BYTES)
        want = need > FIO_COLUMN_MAX_BYTES ? need : FIO_COLUMN_MAX_BYTES;
    void *grown = fio_buffer_alloc(want);
    if (!grown)
        return -ENOMEM;
    if (*buffer && used)
        memcpy(grown, *buffer, used);
    fio_buffer_free(*buffer);
    *buffer = grown;
    *room = want;
    return 0;
}

/* Sets the validity bits of rows 0..rows - 1 (a zeroed bitmap). */
static inline void fio_mark_rows_valid(uint8_t *validity, size_t rows)
{
    memset(validity, 0xff, rows / 8);
    if (rows % 8)
        validity[rows / 8] = (uint8_t)((1u << (rows % 8)) - 1);
}

/* Orders the non-temporal stores of fio_copy_value before what follows. */
static inline void fio_copy_done(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

#endif
