/*
 * What a local file is now, as a dataset checks a shard against its index:
 * size, modification time and change stamp, for many paths in one call.
 */
#ifndef FASTIO_STAMPS_H
#define FASTIO_STAMPS_H

#include <stddef.h>
#include <stdint.h>

/* stamps[3 * i .. 3 * i + 2] = size, modification time (ns) and change stamp
 * (inode and status-change time: (ino * 1000003 + ctime_ns) mod 2**63) of
 * paths[i]; errors[i] = 0, or the errno of its stat (its stamps then 0).
 * Where the first stats take round_trip_ns or more on average (a network
 * filesystem), the rest are asked by many threads at once. */
void fio_stat_stamps(const char *const *paths, size_t count, uint64_t round_trip_ns,
                     int64_t *stamps, int *errors);

#endif
