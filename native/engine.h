/*
 * fastio native I/O engine: positional reads into caller buffers, completed
 * asynchronously and signalled through an eventfd.
 *
 * Two backends share one interface:
 *   - io_uring, driven through the raw syscalls and <linux/io_uring.h>;
 *   - a pread(2) thread pool, used where io_uring is missing or refused.
 *
 * Usage: fio_engine_prep_read() queues reads (it takes a free slot and never
 * blocks), fio_engine_flush() hands everything queued to the kernel or the
 * threads, fio_engine_reap() collects finished reads without blocking. The
 * eventfd becomes readable whenever completions may be waiting; reap clears it.
 *
 * Every read finishes "whole": short reads are continued inside the engine
 * until the buffer is full, the file ends (a read returns 0, or an O_DIRECT read
 * returns a count that is not a multiple of the sector size) or an error occurs.
 * The result is the byte count or a negative errno.
 *
 * One thread at a time may call into an engine (the Python binding holds the
 * GIL or its own owner thread); the engine's own threads never call back.
 */
#ifndef FASTIO_ENGINE_H
#define FASTIO_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#define FIO_ENGINE_AUTO 0
#define FIO_ENGINE_URING 1
#define FIO_ENGINE_THREADS 2

/* Read flags */
#define FIO_READ_DIRECT 1u /* fd was opened with O_DIRECT: a sector-unaligned short count means EOF */

#define FIO_DIRECT_SECTOR 512u

typedef struct fio_engine fio_engine;

typedef struct fio_completion {
    uint64_t tag;   /* what the caller passed to prep_read */
    int64_t result; /* bytes read (>= 0) or -errno */
    uint32_t slot;  /* the slot the read occupied; free again now */
} fio_completion;

/*
 * Creates an engine of `kind` able to hold `capacity` reads in flight.
 * With FIO_ENGINE_AUTO, io_uring is tried first; when it fails, the thread pool
 * is used and *uring_errno receives the errno io_uring failed with (0 if it
 * worked). `max_threads` bounds the thread pool; it grows on demand.
 * Returns 0 or a negative errno.
 */
int fio_engine_open(fio_engine **out, int kind, unsigned capacity, unsigned max_threads,
                    int *uring_errno);

int fio_engine_kind(const fio_engine *engine);
int fio_engine_eventfd(const fio_engine *engine);
unsigned fio_engine_inflight(const fio_engine *engine);
unsigned fio_engine_threads(const fio_engine *engine);

/* Queues a read of `len` bytes at `offset` of `fd` into `buf`.
 * Returns the slot (>= 0) it occupies until completion, or -EAGAIN when every
 * slot is busy, or -EPIPE after shutdown. */
int fio_engine_prep_read(fio_engine *engine, int fd, void *buf, size_t len, uint64_t offset,
                         uint64_t tag, unsigned flags);

/* Starts everything queued. Returns the number started or a negative errno.
 * Safe without the GIL. */
int fio_engine_flush(fio_engine *engine);

/* Moves up to `max` finished reads into `out` without blocking; clears the
 * eventfd first so that a completion arriving later signals again.
 * Returns the count. Safe without the GIL. */
int fio_engine_reap(fio_engine *engine, fio_completion *out, unsigned max);

/* Blocks until a completion may be ready or `timeout_ms` passes (-1: no limit).
 * Returns 1 if ready, 0 on timeout, or a negative errno. Safe without the GIL. */
int fio_engine_wait(fio_engine *engine, int timeout_ms);

/* Refuses new reads and cancels what has not started. Reads already running
 * still complete and must be reaped before fio_engine_destroy. */
void fio_engine_shutdown(fio_engine *engine);

/* Frees everything. Call once nothing is in flight, or in a forked child. */
void fio_engine_destroy(fio_engine *engine);

#endif
