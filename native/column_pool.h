/*
 * Memory for the buffers of exported columns: cache-line aligned, never NULL
 * for an empty buffer, and recycled: a batch's buffers go back to a small pool
 * when pyarrow lets them go, because fresh memory costs a page fault per 4 KiB
 * (clearing it included), which on some virtual machines costs more than
 * filling it. Safe to call from any thread, without the GIL.
 */
#ifndef FASTIO_COLUMN_POOL_H
#define FASTIO_COLUMN_POOL_H

#include <stddef.h>

/* `size` bytes, or NULL when out of memory. */
void *fio_buffer_alloc(size_t size);

/* `size` bytes, all zero, or NULL when out of memory. */
void *fio_buffer_zeroed(size_t size);

/* Returns a buffer from fio_buffer_alloc or fio_buffer_zeroed; NULL is ignored. */
void fio_buffer_free(const void *memory);

#endif
