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

/* Orders the non-temporal stores of fio_copy_value before what follows. */
static inline void fio_copy_done(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

#endif
