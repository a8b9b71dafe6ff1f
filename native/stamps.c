#define _GNU_SOURCE
#include "stamps.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>

/* Below this many paths one thread does them all: a thread costs tens of
 * microseconds to start, a stat about two (a virtual machine's syscall). */
#define STAMPS_PER_THREAD 256

typedef struct stamps_job {
    const char *const *paths;
    size_t count;
    int64_t *stamps;
    int *errors;
} stamps_job;

static void stat_some(const stamps_job *job)
{
    for (size_t i = 0; i < job->count; i++) {
        struct stat status;
        int64_t *out = &job->stamps[3 * i];
        if (stat(job->paths[i], &status)) {
            job->errors[i] = errno;
            out[0] = out[1] = out[2] = 0;
            continue;
        }
        job->errors[i] = 0;
        out[0] = (int64_t)status.st_size;
        out[1] = (int64_t)status.st_mtim.tv_sec * 1000000000 + status.st_mtim.tv_nsec;
        /* The low 63 bits of the exact value are those of its value mod 2**64. */
        uint64_t ctime = (uint64_t)status.st_ctim.tv_sec * 1000000000u
                         + (uint64_t)status.st_ctim.tv_nsec;
        out[2] = (int64_t)(((uint64_t)status.st_ino * 1000003u + ctime) & (UINT64_MAX >> 1));
    }
}

static void *stat_thread(void *job)
{
    stat_some(job);
    return NULL;
}

void fio_stat_stamps(const char *const *paths, size_t count, int64_t *stamps, int *errors)
{
    /* The second half on a thread of its own where there are many (each stat
     * waits on the kernel's path walk; two cores walk two paths at once). */
    size_t half = count >= 2 * STAMPS_PER_THREAD ? count / 2 : 0;
    stamps_job first = {paths, count - half, stamps, errors};
    stamps_job second = {paths + (count - half), half, stamps + 3 * (count - half),
                         errors + (count - half)};
    pthread_t helper;
    int helped = half && pthread_create(&helper, NULL, stat_thread, &second) == 0;
    stat_some(&first);
    if (helped)
        pthread_join(helper, NULL);
    else
        stat_some(&second);
}
