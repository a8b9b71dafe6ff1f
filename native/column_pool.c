#define _GNU_SOURCE
#include "column_pool.h"
#include "hugemem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Blocks are powers of two from 64 bytes, with a header (their class) in the
 * cache line before them. */

#define POOL_CLASSES 32
#define POOL_SMALLEST 64
#define POOL_MIN_CLASS 8                  /* 16 KiB: smaller blocks go to malloc as they are */
#define POOL_MAX_BYTES ((size_t)64 << 20) /* kept for reuse, at most (or two larger blocks) */
#define POOL_PREFAULT_BYTES ((size_t)1 << 20)

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

void *fio_buffer_alloc(size_t size)
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
    if (!block) {
        if (posix_memalign((void **)&block, 64, 64 + ((size_t)POOL_SMALLEST << class)))
            return NULL;
        /* Fresh memory is about to be written whole: its pages populated by
         * one call rather than a fault per 4 KiB as the copy meets them (an
         * epoch of 256-sample batches of 110 KB in a fresh process: 62k page
         * faults in all, 46k with this). */
        if (size >= POOL_PREFAULT_BYTES)
            fio_prefault(block, 64 + size);
    }
    block[0] = (uint8_t)class;
    return block + 64;
}

void fio_buffer_free(const void *memory)
{
    if (!memory)
        return;
    uint8_t *block = (uint8_t *)memory - 64;
    size_t class = block[0], size = (size_t)POOL_SMALLEST << class;
    if (class >= POOL_MIN_CLASS) {
        pthread_mutex_lock(&pool_lock);
        /* A block past half the cap is kept while the pool holds no more than
         * one other: batches that large (1024 samples of 110 KB) would
         * otherwise fault in every page of every batch. */
        if (pool_bytes + size <= POOL_MAX_BYTES || pool_bytes + size <= 2 * size) {
            ((pool_block *)block)->next = pool_free[class];
            pool_free[class] = (pool_block *)block;
            pool_bytes += size;
            block = NULL;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    free(block);
}

void *fio_buffer_zeroed(size_t size)
{
    void *memory = fio_buffer_alloc(size);
    if (memory)
        memset(memory, 0, size);
    return memory;
}
