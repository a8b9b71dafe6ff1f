/* Internal layout shared by the engine front (engine.c) and its two backends. */
#ifndef FASTIO_ENGINE_INTERNAL_H
#define FASTIO_ENGINE_INTERNAL_H

#include "engine.h"

#include <sys/types.h>

typedef struct fio_slot {
    int fd;
    unsigned flags;
    char *buf;
    size_t len;
    uint64_t offset;
    size_t done; /* bytes already read by earlier parts of a continued read */
    uint64_t tag;
} fio_slot;

typedef struct fio_backend_ops {
    int (*prep)(fio_engine *engine, uint32_t slot);
    int (*flush)(fio_engine *engine);
    int (*reap)(fio_engine *engine, fio_completion *out, unsigned max);
    int (*ready)(fio_engine *engine); /* non-zero if a reap would return something */
    void (*shutdown)(fio_engine *engine);
    void (*destroy)(fio_engine *engine); /* frees backend state only */
} fio_backend_ops;

struct fio_engine {
    int kind;
    int eventfd;
    pid_t owner_pid; /* a forked child must not join or signal the parent's threads */
    int shut_down;
    unsigned capacity;
    unsigned inflight;
    unsigned threads; /* worker threads running (thread pool backend) */
    fio_slot *slots;
    uint32_t *free_slots; /* stack of free slot indices */
    unsigned free_count;
    const fio_backend_ops *ops;
    void *backend;
};

/* A continued read: the backend reports one part of `res` bytes for `slot`.
 * Returns 1 if the read is finished (slot->done is final or res < 0),
 * 0 if the backend must issue the next part (slot->done advanced). */
static inline int fio_slot_advance(fio_slot *slot, int64_t res)
{
    if (res <= 0)
        return 1;
    slot->done += (size_t)res;
    if (slot->done >= slot->len)
        return 1;
    if ((slot->flags & FIO_READ_DIRECT) && (slot->done % FIO_DIRECT_SECTOR) != 0)
        return 1; /* O_DIRECT returns an unaligned count only at end of file */
    return 0;
}

/* Final result of a finished read given its last part's result: an error
 * wins over bytes that arrived before it, so the caller sees the errno. */
static inline int64_t fio_slot_result(const fio_slot *slot, int64_t last_res)
{
    return last_res < 0 ? last_res : (int64_t)slot->done;
}

int fio_uring_open(fio_engine *engine);
int fio_threads_open(fio_engine *engine, unsigned max_threads);
void fio_engine_signal(fio_engine *engine);

#endif
