/* A packet-level delay line: relays IP packets between two TUN devices, each
 * in its own network namespace, and holds every packet a fixed time before
 * passing it on. Two of these hops (one per direction) make a round-trip time
 * that TCP sees on every segment and every ACK, as on a WAN; a delay added by
 * the server per request would let TCP's window grow as on a LAN.
 *
 *     delay_line NETNS_A DEVICE_A NETNS_B DEVICE_B DELAY_US [RT_PRIORITY]
 *
 * NETNS is a name under /run/netns, or "-" for this process's namespace. The
 * devices are created here and vanish with the process (they are not
 * persistent), so no exit path leaves one behind. The caller gives them
 * addresses after "ready" is printed; stdin closing, SIGTERM or SIGINT stop
 * the relay, which then prints its statistics as one JSON line.
 *
 * The devices carry a virtio-net header and accept TSO/GSO, as a VM's NIC
 * does: the kernel hands over segments of up to 64 KiB that it cuts into
 * 1500-byte packets only if something on the path needs it. TCP still counts
 * its window in 1448-byte segments, so its dynamics are those of a 1500-byte
 * MTU path, while this relay moves 40x fewer packets: one thread keeps up
 * with several Gbit/s.
 *
 * A constant delay keeps packets in arrival order, so each direction is a
 * FIFO of byte-packed entries in one ring (no per-packet allocation), served
 * by its own thread; the next wake-up is the head's due time, slept to with
 * nanosecond precision. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define RING_BYTES (64u << 20) /* per direction: 10 ms at 50 Gbit/s */
#define MAX_PACKET (65536 + 64) /* a GSO segment of 64 KiB and its virtio-net header */
#define ENTRY_HEADER 16u
#define WRAPPED UINT32_MAX     /* an entry length meaning "the rest is unused, go to 0" */
#define READ_BATCH 64          /* packets read before releasing those due */
#define LATE_NS 1000000ull     /* a packet released this late counts as late */
#define SLIGHTLY_LATE_NS 100000ull
#define VERY_LATE_NS 10000000ull

struct entry {
    uint64_t due_ns;
    uint32_t length;
    uint32_t unused;
};

struct direction {
    const char *name;
    int from, to, stop;
    uint64_t delay_ns;
    uint8_t *ring;
    size_t head, tail, used;
    uint64_t packets, bytes, dropped_full, dropped_write, queued_max;
    uint64_t slightly_late, late, very_late, late_max_ns;
};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static size_t entry_bytes(size_t length) {
    return (ENTRY_HEADER + length + 15u) & ~(size_t)15u;
}

static void die(const char *what) {
    fprintf(stderr, "delay_line: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Where the next packet can be read to (MAX_PACKET contiguous bytes), or NULL
 * when the ring is full: the packet is then dropped, as a full router drops. */
static uint8_t *reserve(struct direction *d) {
    const size_t need = ENTRY_HEADER + MAX_PACKET;
    if (d->used == 0)
        d->head = d->tail = 0;
    if (d->used == 0 || d->head > d->tail) { /* free: [head, end) and [0, tail) */
        if (RING_BYTES - d->head >= need)
            return d->ring + d->head;
        if (d->used != 0 && d->tail >= need) {
            ((struct entry *)(d->ring + d->head))->length = WRAPPED;
            d->used += RING_BYTES - d->head;
            d->head = 0;
            return d->ring;
        }
        return NULL;
    }
    if (d->head < d->tail && d->tail - d->head >= need) /* free: [head, tail) */
        return d->ring + d->head;
    return NULL; /* head == tail with bytes used: full */
}

static void commit(struct direction *d, size_t length, uint64_t due_ns) {
    struct entry *e = (struct entry *)(d->ring + d->head);
    e->due_ns = due_ns;
    e->length = (uint32_t)length;
    d->head += entry_bytes(length);
    d->used += entry_bytes(length);
    if (d->head == RING_BYTES)
        d->head = 0;
    if (d->used > d->queued_max)
        d->queued_max = d->used;
}

static struct entry *oldest(struct direction *d) {
    if (d->used == 0)
        return NULL;
    struct entry *e = (struct entry *)(d->ring + d->tail);
    if (e->length == WRAPPED) {
        d->used -= RING_BYTES - d->tail;
        d->tail = 0;
        if (d->used == 0)
            return NULL;
        e = (struct entry *)d->ring;
    }
    return e;
}

static void pop(struct direction *d, struct entry *e) {
    d->tail += entry_bytes(e->length);
    d->used -= entry_bytes(e->length);
    if (d->tail == RING_BYTES)
        d->tail = 0;
}

/* Pass on every packet whose time has come. */
static void release(struct direction *d) {
    struct entry *e;
    while ((e = oldest(d)) != NULL) {
        uint64_t now = now_ns();
        if (e->due_ns > now)
            return;
        uint64_t late = now - e->due_ns;
        if (late > d->late_max_ns)
            d->late_max_ns = late;
        d->slightly_late += late > SLIGHTLY_LATE_NS;
        d->late += late > LATE_NS;
        d->very_late += late > VERY_LATE_NS;
        /* A TUN write hands the packet to the stack at once; a failure (the
         * stack refused it) is a loss on the link, not a reason to stop. */
        if (write(d->to, (uint8_t *)e + ENTRY_HEADER, e->length) < 0)
            d->dropped_write++;
        d->packets++;
        d->bytes += e->length;
        pop(d, e);
    }
}

/* Read what the device has (at most a batch, so the other side is served too). */
static void receive(struct direction *d) {
    static __thread uint8_t discard[MAX_PACKET];
    for (int i = 0; i < READ_BATCH; i++) {
        uint8_t *slot = reserve(d);
        uint8_t *into = slot != NULL ? slot + ENTRY_HEADER : discard;
        ssize_t got = read(d->from, into, MAX_PACKET);
        if (got < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            die("read");
        }
        if (slot == NULL)
            d->dropped_full++;
        else
            commit(d, (size_t)got, now_ns() + d->delay_ns);
    }
}

/* A TUN device named `device` in network namespace `netns` ("-": this one). */
static int open_tun(const char *netns, const char *device) {
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0)
        die("open /proc/self/ns/net");
    if (strcmp(netns, "-") != 0) {
        char path[512];
        snprintf(path, sizeof path, "/run/netns/%s", netns);
        int target = open(path, O_RDONLY | O_CLOEXEC);
        if (target < 0 || setns(target, CLONE_NEWNET) < 0)
            die(path);
        close(target);
    }
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        die("open /dev/net/tun");
    struct ifreq request;
    memset(&request, 0, sizeof request);
    request.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(request.ifr_name, IFNAMSIZ, "%s", device);
    if (ioctl(fd, TUNSETIFF, &request) < 0)
        die(device);
    unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    if (ioctl(fd, TUNSETOFFLOAD, offloads) < 0)
        die("TUNSETOFFLOAD");
    if (setns(home, CLONE_NEWNET) < 0)
        die("setns back");
    close(home);
    return fd;
}

static void print_direction(const struct direction *d, const char *after) {
    printf("\"%s\": {\"packets\": %llu, \"bytes\": %llu, \"dropped_full\": %llu, "
           "\"dropped_write\": %llu, \"late_over_100us\": %llu, \"late_over_1ms\": %llu, "
           "\"late_over_10ms\": %llu, \"late_max_us\": %.1f, "
           "\"queued_max_bytes\": %llu}%s",
           d->name, (unsigned long long)d->packets, (unsigned long long)d->bytes,
           (unsigned long long)d->dropped_full, (unsigned long long)d->dropped_write,
           (unsigned long long)d->slightly_late, (unsigned long long)d->late,
           (unsigned long long)d->very_late, d->late_max_ns / 1000.0,
           (unsigned long long)d->queued_max, after);
}

/* One thread per direction, so a burst of data to write never holds back the
 * ACKs going the other way (each TUN write runs the receiving stack here). */
static void *relay(void *argument) {
    struct direction *d = argument;
    struct pollfd watched[2] = {
        {.fd = d->from, .events = POLLIN},
        {.fd = d->stop, .events = POLLIN},
    };
    for (;;) {
        release(d);
        /* Sleep until the oldest packet is due, or until the device has one to read. */
        struct timespec wait, *timeout = NULL;
        struct entry *e = oldest(d);
        if (e != NULL) {
            uint64_t now = now_ns();
            uint64_t left = e->due_ns > now ? e->due_ns - now : 0;
            wait.tv_sec = (time_t)(left / 1000000000ull);
            wait.tv_nsec = (long)(left % 1000000000ull);
            timeout = &wait;
        }
        int ready = ppoll(watched, 2, timeout, NULL);
        if (ready < 0 && errno != EINTR)
            die("ppoll");
        if (watched[1].revents)
            return NULL;
        if (watched[0].revents & POLLIN)
            receive(d);
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s NETNS_A DEVICE_A NETNS_B DEVICE_B DELAY_US [RT_PRIORITY]\n",
                argv[0]);
        return 2;
    }
    uint64_t delay_ns = strtoull(argv[5], NULL, 10) * 1000ull;
    /* The relay must not outlive the benchmark that started it, however that ends. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    /* The link's timing should not depend on how busy the machine is: other
     * processes (the client, the server, others' tests) share two cores. The
     * threads inherit the policy. */
    if (argc > 6) {
        struct sched_param param = {.sched_priority = atoi(argv[6])};
        if (sched_setscheduler(0, SCHED_FIFO, &param) < 0)
            fprintf(stderr, "delay_line: no real-time priority (%s); timing may jitter\n",
                    strerror(errno));
    }
    prctl(PR_SET_TIMERSLACK, 1UL);
    /* Rings and stacks resident from the start: a page fault or reclaim under
     * others' memory pressure would stall a thread and delay every packet behind it. */
    if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0)
        fprintf(stderr, "delay_line: memory not locked (%s); timing may jitter\n",
                strerror(errno));

    int a = open_tun(argv[1], argv[2]);
    int b = open_tun(argv[3], argv[4]);
    int stop = eventfd(0, EFD_CLOEXEC);
    struct direction sides[2] = {
        {.name = "a_to_b", .from = a, .to = b},
        {.name = "b_to_a", .from = b, .to = a},
    };
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigprocmask(SIG_BLOCK, &stops, NULL); /* before the threads, so they inherit the mask */
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        sides[i].ring = aligned_alloc(64, RING_BYTES);
        if (sides[i].ring == NULL)
            die("ring");
        sides[i].delay_ns = delay_ns;
        sides[i].stop = stop;
        if (pthread_create(&threads[i], NULL, relay, &sides[i]) != 0)
            die("pthread_create");
    }
    int signals = signalfd(-1, &stops, SFD_CLOEXEC);
    printf("ready\n");
    fflush(stdout);
    /* Until a stop signal, or until the caller closes our stdin (or dies). */
    struct pollfd waited[2] = {
        {.fd = signals, .events = POLLIN},
        {.fd = STDIN_FILENO, .events = POLLIN},
    };
    while (poll(waited, 2, -1) < 0 && errno == EINTR)
        ;
    uint64_t one = 1;
    if (write(stop, &one, sizeof one) < 0)
        die("eventfd");
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    printf("{");
    print_direction(&sides[0], ", ");
    print_direction(&sides[1], "}\n");
    return 0;
}
