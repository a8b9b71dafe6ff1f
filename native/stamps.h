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
 * paths[i]; errors[i] = 0, or the errno of its stat (its stamps then 0). */
void fio_stat_stamps(const char *const *paths, size_t count, int64_t *stamps, int *errors);

#endif
