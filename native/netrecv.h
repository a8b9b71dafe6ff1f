/*
 * Receiving a known number of bytes from a connected socket into the caller's
 * buffer, without the GIL: one call per HTTP body rather than one Python
 * round trip (and GIL hand-over) per packet that arrives.
 */
#ifndef FASTIO_NETRECV_H
#define FASTIO_NETRECV_H

#include <stddef.h>

/* Receives into buf[*filled:want] from the socket `fd` (blocking or not)
 * until it is full, the peer closes the connection, or no byte arrives
 * before `deadline_ms` of CLOCK_MONOTONIC passes. Advances *filled by what
 * arrived, and adds it to *arrived (atomically; NULL: not counted) as it
 * arrives, so another thread can see a long body's progress. Returns 0 when
 * full, 1 when the peer closed first, -ETIMEDOUT on the deadline, or another
 * -errno. */
int fio_recv_exact(int fd, unsigned char *buf, size_t want, size_t *filled, long long deadline_ms,
                   unsigned long long *arrived);

/* A counter fio_recv_exact adds to, read (and added to) from other threads. */
unsigned long long fio_counter_load(const unsigned long long *counter);
void fio_counter_add(unsigned long long *counter, unsigned long long amount);

/* CLOCK_MONOTONIC in milliseconds, the clock of fio_recv_exact's deadline. */
long long fio_monotonic_ms(void);

#endif
