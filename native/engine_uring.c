/* io_uring backend through the raw syscalls (no liburing). */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* user_data of requests that carry no slot (cancellation at shutdown) */
#define NO_SLOT UINT64_MAX
/* One SQE reads at most this much; longer reads continue like short reads. */
#define MAX_PART ((size_t)1 << 30)
/* How often flush retries when the kernel is briefly out of request memory */
#define SUBMIT_RETRIES 1000

typedef struct uring {
    int ring_fd;
    unsigned sq_entries;
    unsigned *sq_head, *sq_tail, *sq_mask;
    unsigned sq_local_tail; /* tail including SQEs not yet published */
    unsigned unsubmitted;   /* SQEs written but not yet consumed by io_uring_enter */
    struct io_uring_sqe *sqes;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    void *sq_ring;
    size_t sq_ring_len;
    void *cq_ring;
    size_t cq_ring_len;
    size_t sqes_len;
} uring;

static int sys_setup(unsigned entries, struct io_uring_params *params)
{
    long rc = syscall(__NR_io_uring_setup, entries, params);
    return rc < 0 ? -errno : (int)rc;
}

static int sys_enter(int ring_fd, unsigned to_submit, unsigned min_complete, unsigned flags)
{
    long rc = syscall(__NR_io_uring_enter, ring_fd, to_submit, min_complete, flags, NULL, 0);
    return rc < 0 ? -errno : (int)rc;
}

static int sys_register(int ring_fd, unsigned opcode, const void *arg, unsigned nr_args)
{
    long rc = syscall(__NR_io_uring_register, ring_fd, opcode, arg, nr_args);
    return rc < 0 ? -errno : (int)rc;
}

static unsigned round_up_pow2(unsigned value)
{
    unsigned result = 1;
    while (result < value)
        result <<= 1;
    return result;
}

static int supports_read_op(int ring_fd)
{
    const unsigned nr_ops = 256;
    size_t len = sizeof(struct io_uring_probe) + nr_ops * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *probe = calloc(1, len);
    int supported = 0;

    if (!probe)
        return -ENOMEM;
    if (sys_register(ring_fd, IORING_REGISTER_PROBE, probe, nr_ops) == 0)
        supported = probe->last_op >= IORING_OP_READ &&
                    (probe->ops[IORING_OP_READ].flags & IO_URING_OP_SUPPORTED);
    free(probe);
    return supported ? 0 : -EOPNOTSUPP;
}

static void uring_unmap(uring *ring)
{
    if (ring->sqes && ring->sqes != MAP_FAILED)
        munmap(ring->sqes, ring->sqes_len);
    if (ring->cq_ring && ring->cq_ring != MAP_FAILED && ring->cq_ring != ring->sq_ring)
        munmap(ring->cq_ring, ring->cq_ring_len);
    if (ring->sq_ring && ring->sq_ring != MAP_FAILED)
        munmap(ring->sq_ring, ring->sq_ring_len);
    if (ring->ring_fd >= 0)
        close(ring->ring_fd);
    free(ring);
}

static int uring_map(uring *ring, const struct io_uring_params *params)
{
    const int prot = PROT_READ | PROT_WRITE;
    const int flags = MAP_SHARED | MAP_POPULATE;
    char *sq, *cq;

    ring->sq_ring_len = params->sq_off.array + params->sq_entries * sizeof(unsigned);
    ring->cq_ring_len = params->cq_off.cqes + params->cq_entries * sizeof(struct io_uring_cqe);
    if (params->features & IORING_FEAT_SINGLE_MMAP) {
        if (ring->cq_ring_len > ring->sq_ring_len)
            ring->sq_ring_len = ring->cq_ring_len;
        ring->cq_ring_len = ring->sq_ring_len;
    }
    ring->sq_ring = mmap(NULL, ring->sq_ring_len, prot, flags, ring->ring_fd, IORING_OFF_SQ_RING);
    if (ring->sq_ring == MAP_FAILED)
        return -errno;
    if (params->features & IORING_FEAT_SINGLE_MMAP) {
        ring->cq_ring = ring->sq_ring;
    } else {
        ring->cq_ring =
            mmap(NULL, ring->cq_ring_len, prot, flags, ring->ring_fd, IORING_OFF_CQ_RING);
        if (ring->cq_ring == MAP_FAILED)
            return -errno;
    }
    ring->sqes_len = params->sq_entries * sizeof(struct io_uring_sqe);
    ring->sqes = mmap(NULL, ring->sqes_len, prot, flags, ring->ring_fd, IORING_OFF_SQES);
    if (ring->sqes == MAP_FAILED)
        return -errno;

    sq = ring->sq_ring;
    cq = ring->cq_ring;
    ring->sq_head = (unsigned *)(sq + params->sq_off.head);
    ring->sq_tail = (unsigned *)(sq + params->sq_off.tail);
    ring->sq_mask = (unsigned *)(sq + params->sq_off.ring_mask);
    ring->cq_head = (unsigned *)(cq + params->cq_off.head);
    ring->cq_tail = (unsigned *)(cq + params->cq_off.tail);
    ring->cq_mask = (unsigned *)(cq + params->cq_off.ring_mask);
    ring->cqes = (struct io_uring_cqe *)(cq + params->cq_off.cqes);
    ring->sq_entries = params->sq_entries;
    ring->sq_local_tail = *ring->sq_tail;
    /* SQE i always sits at index i of the indirection array. */
    unsigned *array = (unsigned *)(sq + params->sq_off.array);
    for (unsigned i = 0; i < params->sq_entries; i++)
        array[i] = i;
    return 0;
}

static struct io_uring_sqe *next_sqe(uring *ring)
{
    unsigned head = __atomic_load_n(ring->sq_head, __ATOMIC_ACQUIRE);
    struct io_uring_sqe *sqe;

    if (ring->sq_local_tail - head >= ring->sq_entries)
        return NULL;
    sqe = &ring->sqes[ring->sq_local_tail & *ring->sq_mask];
    memset(sqe, 0, sizeof(*sqe));
    ring->sq_local_tail++;
    ring->unsubmitted++;
    return sqe;
}

/* Queues the next part of the read in `index` (all of it, or what remains). */
static int queue_part(fio_engine *engine, uint32_t index)
{
    fio_slot *slot = &engine->slots[index];
    struct io_uring_sqe *sqe = next_sqe(engine->backend);
    size_t part = slot->len - slot->done;

    if (!sqe)
        return -EAGAIN;
    if (part > MAX_PART)
        part = MAX_PART;
    sqe->opcode = IORING_OP_READ;
    sqe->fd = slot->fd;
    sqe->addr = (uint64_t)(uintptr_t)(slot->buf + slot->done);
    sqe->len = (uint32_t)part;
    sqe->off = slot->offset + slot->done;
    sqe->user_data = index;
    return 0;
}

static int uring_prep(fio_engine *engine, uint32_t index) { return queue_part(engine, index); }

static int uring_flush(fio_engine *engine)
{
    uring *ring = engine->backend;
    int submitted = 0;
    int retries = 0;

    __atomic_store_n(ring->sq_tail, ring->sq_local_tail, __ATOMIC_RELEASE);
    while (ring->unsubmitted) {
        int rc = sys_enter(ring->ring_fd, ring->unsubmitted, 0, 0);
        if (rc == -EINTR)
            continue;
        if (rc == -EAGAIN || rc == -EBUSY || rc == 0) {
            /* Out of request memory, or completions must be reaped first:
             * both pass quickly while reads are completing. */
            if (++retries > SUBMIT_RETRIES)
                return submitted ? submitted : -EAGAIN;
            sched_yield();
            continue;
        }
        if (rc < 0)
            return rc;
        ring->unsubmitted -= (unsigned)rc;
        submitted += rc;
    }
    return submitted;
}

static int uring_ready(fio_engine *engine)
{
    uring *ring = engine->backend;
    return __atomic_load_n(ring->cq_tail, __ATOMIC_ACQUIRE) != *ring->cq_head;
}

static int uring_reap(fio_engine *engine, fio_completion *out, unsigned max)
{
    uring *ring = engine->backend;
    unsigned head = *ring->cq_head;
    unsigned tail = __atomic_load_n(ring->cq_tail, __ATOMIC_ACQUIRE);
    unsigned count = 0;
    int continued = 0;

    while (count < max) {
        if (head == tail) {
            tail = __atomic_load_n(ring->cq_tail, __ATOMIC_ACQUIRE);
            if (head == tail)
                break;
        }
        struct io_uring_cqe *cqe = &ring->cqes[head & *ring->cq_mask];
        uint64_t index = cqe->user_data;
        int64_t res = cqe->res;
        head++;
        if (index == NO_SLOT)
            continue;
        fio_slot *slot = &engine->slots[index];
        /* A retryable failure or a short read: issue the rest of the read. Each
         * slot has at most one SQE queued, so the SQ always has room. */
        if (res == -EAGAIN || res == -EINTR || !fio_slot_advance(slot, res)) {
            queue_part(engine, (uint32_t)index);
            continued = 1;
            continue;
        }
        out[count].tag = slot->tag;
        out[count].result = fio_slot_result(slot, res);
        out[count].slot = (uint32_t)index;
        count++;
    }
    __atomic_store_n(ring->cq_head, head, __ATOMIC_RELEASE);
    if (continued)
        uring_flush(engine);
    return (int)count;
}

static void uring_shutdown(fio_engine *engine)
{
#ifdef IORING_ASYNC_CANCEL_ANY
    uring *ring = engine->backend;
    struct io_uring_sqe *sqe = next_sqe(ring);

    /* Reads of regular files rarely accept cancellation; the rest complete soon. */
    if (sqe) {
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->fd = -1;
        sqe->cancel_flags = IORING_ASYNC_CANCEL_ANY;
        sqe->user_data = NO_SLOT;
    }
#endif
    uring_flush(engine);
}

static void uring_destroy(fio_engine *engine) { uring_unmap(engine->backend); }

static const fio_backend_ops uring_ops = {
    .prep = uring_prep,
    .flush = uring_flush,
    .reap = uring_reap,
    .ready = uring_ready,
    .shutdown = uring_shutdown,
    .destroy = uring_destroy,
};

int fio_uring_open(fio_engine *engine)
{
    struct io_uring_params params;
    uring *ring = calloc(1, sizeof(*ring));
    int err;

    if (!ring)
        return -ENOMEM;
    /* One spare entry for the cancellation request at shutdown. */
    unsigned entries = round_up_pow2(engine->capacity + 1);
    memset(&params, 0, sizeof(params));
#ifdef IORING_SETUP_COOP_TASKRUN
    /* Completions are posted when this thread next enters the kernel instead of
     * interrupting it (an IPI) for each one: they arrive in batches, the reads
     * that replace them go out in batches, and the block layer can merge
     * neighbouring requests. fio sets up its rings the same way. */
    params.flags = IORING_SETUP_COOP_TASKRUN;
    ring->ring_fd = sys_setup(entries, &params);
    if (ring->ring_fd == -EINVAL) /* kernels before 5.19 */
#endif
    {
        memset(&params, 0, sizeof(params));
        ring->ring_fd = sys_setup(entries, &params);
    }
    if (ring->ring_fd < 0) {
        err = ring->ring_fd;
        free(ring);
        return err;
    }
    err = supports_read_op(ring->ring_fd);
    if (!err)
        err = uring_map(ring, &params);
    if (!err)
        err = sys_register(ring->ring_fd, IORING_REGISTER_EVENTFD, &engine->eventfd, 1);
    if (err < 0) {
        uring_unmap(ring);
        return err;
    }
    engine->backend = ring;
    engine->ops = &uring_ops;
    engine->kind = FIO_ENGINE_URING;
    return 0;
}
