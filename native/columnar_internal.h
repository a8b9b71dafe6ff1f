/* Shared by the two collectors: records (columnar.c) and WebDataset samples (wds_columns.c). */
#ifndef FASTIO_COLUMNAR_INTERNAL_H
#define FASTIO_COLUMNAR_INTERNAL_H

#include <errno.h>
#include <stdlib.h>

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

#endif
