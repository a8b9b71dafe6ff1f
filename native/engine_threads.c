/* pread(2) thread pool backend: for kernels or sandboxes without io_uring. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_PART ((size_t)1 << 30)
/* Workers only run the pread loop; a small stack keeps hundreds of them cheap. */
#define WORKER_STACK (256 * 1024)

typedef struct pool {
    pthread_mutex_t lock;
    pthread_cond_t work;
    uint32_t *queue; /* slots waiting for a worker, FIFO ring of `capacity` */
    unsigned queue_head, queue_count;
    fio_completion *done; /* finished reads, FIFO ring of `capacity` */
    unsigned done_head, done_count;
    unsigned idle;
    unsigned max_threads;
    pthread_t *threads;
    int stopping;
    fio_engine *engine;
} pool;

static int64_t read_whole(fio_slot *slot)
{
    for (;;) {
        size_t part = slot->len - slot->done;
        if (part > MAX_PART)
            part = MAX_PART;
        ssize_t n = pread(slot->fd, slot->buf + slot->done, part, slot->offset + slot->done);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        int64_t res = n < 0 ? -errno : n;
        if (fio_slot_advance(slot, res))
            return fio_slot_result(slot, res);
    }
}

/* Caller holds the lock. */
static void push_done(pool *p, uint32_t index, int64_t result)
{
    unsigned capacity = p->engine->capacity;
    fio_completion *c = &p->done[(p->done_head + p->done_count) % capacity];
    c->tag = p->engine->slots[index].tag;
    c->result = result;
    c->slot = index;
    if (p->done_count++ == 0)
        fio_engine_signal(p->engine); /* the reaper drains everything after a wake-up */
}

static void *worker_main(void *arg)
{
    pool *p = arg;
    fio_engine *engine = p->engine;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->queue_count == 0 && !p->stopping) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->lock);
            p->idle--;
        }
        if (p->queue_count == 0)
            break;
        uint32_t index = p->queue[p->queue_head];
        p->queue_head = (p->queue_head + 1) % engine->capacity;
        p->queue_count--;
        pthread_mutex_unlock(&p->lock);
        int64_t result = read_whole(&engine->slots[index]);
        pthread_mutex_lock(&p->lock);
        push_done(p, index, result);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Caller holds the lock. Workers start with every signal blocked, so Python's
 * handlers keep running on the main thread. */
static int spawn_workers(pool *p, unsigned count)
{
    fio_engine *engine = p->engine;
    pthread_attr_t attr;
    sigset_t all, old;
    int err = 0;

    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, WORKER_STACK);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (count-- > 0 && engine->threads < p->max_threads) {
        err = pthread_create(&p->threads[engine->threads], &attr, worker_main, p);
        if (err)
            break;
        engine->threads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    /* Running with fewer threads than wanted is fine as long as one exists. */
    return engine->threads ? 0 : -err;
}

static int threads_prep(fio_engine *engine, uint32_t index)
{
    pool *p = engine->backend;
    pthread_mutex_lock(&p->lock);
    p->queue[(p->queue_head + p->queue_count) % engine->capacity] = index;
    p->queue_count++;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static int threads_flush(fio_engine *engine)
{
    pool *p = engine->backend;
    int err = 0;
    unsigned waiting;

    pthread_mutex_lock(&p->lock);
    waiting = p->queue_count;
    /* One thread per read in flight: threads that are finishing a read are
     * neither idle nor free yet, so counting idle ones would overshoot. */
    if (waiting && engine->inflight > engine->threads)
        err = spawn_workers(p, engine->inflight - engine->threads);
    if (waiting)
        pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    return err ? err : (int)waiting;
}

static int threads_reap(fio_engine *engine, fio_completion *out, unsigned max)
{
    pool *p = engine->backend;
    unsigned count = 0;

    pthread_mutex_lock(&p->lock);
    while (p->done_count && count < max) {
        out[count++] = p->done[p->done_head];
        p->done_head = (p->done_head + 1) % engine->capacity;
        p->done_count--;
    }
    pthread_mutex_unlock(&p->lock);
    return (int)count;
}

static int threads_ready(fio_engine *engine)
{
    pool *p = engine->backend;
    int ready;
    pthread_mutex_lock(&p->lock);
    ready = p->done_count > 0;
    pthread_mutex_unlock(&p->lock);
    return ready;
}

static void threads_shutdown(fio_engine *engine)
{
    pool *p = engine->backend;

    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    while (p->queue_count) {
        uint32_t index = p->queue[p->queue_head];
        p->queue_head = (p->queue_head + 1) % engine->capacity;
        p->queue_count--;
        push_done(p, index, -ECANCELED);
    }
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
}

static void threads_destroy(fio_engine *engine)
{
    pool *p = engine->backend;

    /* In a forked child the workers do not exist and the lock may be held by
     * one of them forever: leave both alone and only free memory. */
    if (getpid() == engine->owner_pid) {
        pthread_mutex_lock(&p->lock);
        p->stopping = 1;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < engine->threads; i++)
            pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->lock);
    }
    engine->threads = 0;
    free(p->threads);
    free(p->queue);
    free(p->done);
    free(p);
}

static const fio_backend_ops threads_ops = {
    .prep = threads_prep,
    .flush = threads_flush,
    .reap = threads_reap,
    .ready = threads_ready,
    .shutdown = threads_shutdown,
    .destroy = threads_destroy,
};

int fio_threads_open(fio_engine *engine, unsigned max_threads)
{
    pool *p = calloc(1, sizeof(*p));

    if (!p)
        return -ENOMEM;
    p->engine = engine;
    p->max_threads = max_threads < engine->capacity ? max_threads : engine->capacity;
    p->queue = calloc(engine->capacity, sizeof(*p->queue));
    p->done = calloc(engine->capacity, sizeof(*p->done));
    p->threads = calloc(p->max_threads, sizeof(*p->threads));
    if (!p->queue || !p->done || !p->threads) {
        free(p->queue);
        free(p->done);
        free(p->threads);
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    engine->backend = p;
    engine->ops = &threads_ops;
    engine->kind = FIO_ENGINE_THREADS;
    return 0;
}
