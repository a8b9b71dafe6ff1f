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

/* The same stats as a job that more threads may share: one runs it (its first
 * stats timed as above, then the rest with up to `local_threads` threads in
 * all where the filesystem is local), any other may help with what is left
 * (fio_stamps_help returns once no stat is left to take; the job is done once
 * every thread that runs or helps has returned). NULL where out of memory. */
typedef struct stamps_job fio_stamps_job;
fio_stamps_job *fio_stamps_new(const char *const *paths, size_t count, int64_t *stamps,
                               int *errors);
void fio_stamps_run(fio_stamps_job *job, uint64_t round_trip_ns, size_t local_threads);
void fio_stamps_help(fio_stamps_job *job);
void fio_stamps_free(fio_stamps_job *job);

#endif
