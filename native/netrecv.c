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

int fio_recv_exact(int fd, unsigned char *buf, size_t want, size_t *filled, long long deadline_ms,
                   unsigned long long *arrived)
{
    while (*filled < want) {
        ssize_t got = recv(fd, buf + *filled, want - *filled, MSG_DONTWAIT);
        if (got > 0) {
            *filled += (size_t)got;
            if (arrived != NULL)
                fio_counter_add(arrived, (unsigned long long)got);
            continue;
        }
        if (got == 0)
            return 1;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        long long left = deadline_ms - fio_monotonic_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd ready = {.fd = fd, .events = POLLIN};
        int polled = poll(&ready, 1, left > 1000000 ? 1000000 : (int)left);
        if (polled < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}
