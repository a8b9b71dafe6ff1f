#define _GNU_SOURCE
#include "netrecv.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

long long fio_monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

unsigned long long fio_counter_load(const unsigned long long *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void fio_counter_add(unsigned long long *counter, unsigned long long amount)
{
    __atomic_fetch_add(counter, amount, __ATOMIC_RELAXED);
}

/* A wakeup waits for this many bytes, at most: at 1 GB/s over 16
 * connections, a poll woke for every packet or two, and each wakeup costs a
 * poll, a receive and two context switches. */
#define FIO_RECV_BATCH (256 * 1024)

/* Sets the socket's receive low-water mark to `lowat` where it is not
 * already (`*current`); a failure leaves it as it was. */
static void set_lowat(int fd, int lowat, int *current)
{
    if (lowat != *current && !setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat))
        *current = lowat;
}

/* The most a wakeup may wait for on `fd`: a quarter of its receive buffer,
 * so that the mark never makes the kernel clamp the window it advertises
 * (which it does for a mark past half the buffer). */
static size_t batch_limit(int fd)
{
    int buffer = 0;
    socklen_t length = sizeof buffer;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, &length) || buffer < 4)
        return 1;
    size_t quarter = (size_t)buffer / 4;
    return quarter < FIO_RECV_BATCH ? quarter : FIO_RECV_BATCH;
}

int fio_recv_exact(int fd, unsigned char *buf, size_t want, size_t *filled, long long deadline_ms,
                   unsigned long long *arrived)
{
    int lowat = 1; /* the mark as the caller's own reads expect it */
    size_t batch = 0;
    int rc = 0;
    while (*filled < want) {
        ssize_t got = recv(fd, buf + *filled, want - *filled, MSG_DONTWAIT);
        if (got > 0) {
            *filled += (size_t)got;
            if (arrived != NULL)
                fio_counter_add(arrived, (unsigned long long)got);
            continue;
        }
        if (got == 0) {
            rc = 1;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = -errno;
            break;
        }
        long long left = deadline_ms - fio_monotonic_ms();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        /* Wake once a batch has arrived, or the rest of the body: the server
         * sends nothing past it until asked, and a close wakes the poll too. */
        if (!batch)
            batch = batch_limit(fd);
        size_t owed = want - *filled;
        set_lowat(fd, (int)(owed < batch ? owed : batch), &lowat);
        struct pollfd ready = {.fd = fd, .events = POLLIN};
        int polled = poll(&ready, 1, left > 1000000 ? 1000000 : (int)left);
        if (polled < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
    }
    set_lowat(fd, 1, &lowat);
    return rc;
}
