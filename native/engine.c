/* Engine front: slot table, eventfd, backend choice. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void engine_free(fio_engine *engine)
{
    if (engine->eventfd >= 0)
        close(engine->eventfd);
    free(engine->slots);
    free(engine->free_slots);
    free(engine);
}

static int engine_alloc(fio_engine **out, unsigned capacity)
{
    fio_engine *engine = calloc(1, sizeof(*engine));
    if (!engine)
        return -ENOMEM;
    engine->eventfd = -1;
    engine->owner_pid = getpid();
    engine->capacity = capacity;
    engine->slots = calloc(capacity, sizeof(*engine->slots));
    engine->free_slots = calloc(capacity, sizeof(*engine->free_slots));
    if (!engine->slots || !engine->free_slots) {
        engine_free(engine);
        return -ENOMEM;
    }
    /* Hand out low slot numbers first: they stay warm in cache. */
    for (unsigned i = 0; i < capacity; i++)
        engine->free_slots[i] = capacity - 1 - i;
    engine->free_count = capacity;
    engine->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (engine->eventfd < 0) {
        int err = -errno;
        engine_free(engine);
        return err;
    }
    *out = engine;
    return 0;
}

int fio_engine_open(fio_engine **out, int kind, unsigned capacity, unsigned max_threads,
                    int *uring_errno)
{
    fio_engine *engine = NULL;
    int err;

    *out = NULL;
    if (uring_errno)
        *uring_errno = 0;
    if (capacity == 0 || capacity > 65536)
        return -EINVAL;
    if (kind != FIO_ENGINE_AUTO && kind != FIO_ENGINE_URING && kind != FIO_ENGINE_THREADS)
        return -EINVAL;
    err = engine_alloc(&engine, capacity);
    if (err)
        return err;

    if (kind == FIO_ENGINE_AUTO || kind == FIO_ENGINE_URING) {
        err = fio_uring_open(engine);
        if (err == 0) {
            *out = engine;
            return 0;
        }
        if (uring_errno)
            *uring_errno = -err;
        if (kind == FIO_ENGINE_URING) {
            engine_free(engine);
            return err;
        }
    }
    err = fio_threads_open(engine, max_threads ? max_threads : 1);
    if (err) {
        engine_free(engine);
        return err;
    }
    *out = engine;
    return 0;
}

int fio_engine_kind(const fio_engine *engine) { return engine->kind; }
int fio_engine_eventfd(const fio_engine *engine) { return engine->eventfd; }
unsigned fio_engine_inflight(const fio_engine *engine) { return engine->inflight; }
unsigned fio_engine_threads(const fio_engine *engine) { return engine->threads; }

void fio_engine_signal(fio_engine *engine)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is already non-zero: the reader is woken anyway. */
    ssize_t ignored = write(engine->eventfd, &one, sizeof(one));
    (void)ignored;
}

int fio_engine_prep_read(fio_engine *engine, int fd, void *buf, size_t len, uint64_t offset,
                         uint64_t tag, unsigned flags)
{
    uint32_t index;
    fio_slot *slot;
    int err;

    if (engine->shut_down)
        return -EPIPE;
    if (engine->free_count == 0)
        return -EAGAIN;
    index = engine->free_slots[--engine->free_count];
    slot = &engine->slots[index];
    slot->fd = fd;
    slot->flags = flags;
    slot->buf = buf;
    slot->len = len;
    slot->offset = offset;
    slot->done = 0;
    slot->tag = tag;
    err = engine->ops->prep(engine, index);
    if (err) {
        engine->free_slots[engine->free_count++] = index;
        return err;
    }
    engine->inflight++;
    return (int)index;
}

int fio_engine_flush(fio_engine *engine) { return engine->ops->flush(engine); }

static void drain_eventfd(fio_engine *engine)
{
    uint64_t count;
    ssize_t ignored = read(engine->eventfd, &count, sizeof(count));
    (void)ignored;
}

int fio_engine_reap(fio_engine *engine, fio_completion *out, unsigned max)
{
    int n;

    drain_eventfd(engine);
    n = engine->ops->reap(engine, out, max);
    for (int i = 0; i < n; i++) {
        engine->free_slots[engine->free_count++] = out[i].slot;
        engine->inflight--;
    }
    return n;
}

int fio_engine_wait(fio_engine *engine, int timeout_ms)
{
    struct pollfd pfd = {.fd = engine->eventfd, .events = POLLIN};
    int rc;

    if (engine->ops->ready(engine))
        return 1;
    do {
        rc = poll(&pfd, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return -errno;
    return rc > 0 || engine->ops->ready(engine);
}

void fio_engine_shutdown(fio_engine *engine)
{
    if (engine->shut_down)
        return;
    engine->shut_down = 1;
    engine->ops->shutdown(engine);
}

void fio_engine_destroy(fio_engine *engine)
{
    if (!engine)
        return;
    engine->ops->destroy(engine);
    engine_free(engine);
}
