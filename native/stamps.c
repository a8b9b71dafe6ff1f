#define _GNU_SOURCE
#include "stamps.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Paths the calling thread stats first, timing them: a local filesystem
 * answers a stat in about 2 us (a virtual machine's syscall and path walk), a
 * network one (NFS, Lustre, a FUSE mount of an object store) in a round trip,
 * hundreds of microseconds or more, which threads overlap. */
#define STAMPS_PROBE 16
/* Threads for the rest where a stat is a round trip. */
#define STAMPS_REMOTE_THREADS 32
/* Locally a second thread pays off past this many paths (a thread costs tens
 * of microseconds to start); more would only contend for the cores. */
#define STAMPS_LOCAL_PER_THREAD 256
#define STAMPS_LOCAL_THREADS 2
/* Paths a thread takes at a time from the shared cursor. */
#define STAMPS_CHUNK 8

struct stamps_job {
    const char *const *paths;
    size_t count;
    int64_t *stamps;
    int *errors;
    atomic_size_t next; /* the first path no thread has taken yet */
};
typedef struct stamps_job stamps_job;

/* The folder a thread last statted a file in, kept open: a dataset's shards
 * mostly share one, and a stat relative to it walks one part of the path, not
 * every one (a quarter less time a file, locally). */
typedef struct folder {
    const char *path; /* its first `length` bytes name the folder */
    size_t length;
    int fd;           /* -1 where none is open */
} folder;

static void close_folder(folder *open_folder)
{
    if (open_folder->fd >= 0)
        close(open_folder->fd);
    open_folder->fd = -1;
}

/* stat(2) of `path`, relative to its folder where it names one (kept open in
 * `open_folder` for the next path); the same answer either way. */
static int stat_in(folder *open_folder, const char *path, struct stat *status)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path || slash[1] == '\0' || (size_t)(slash - path) >= PATH_MAX)
        return stat(path, status);
    size_t length = (size_t)(slash - path);
    if (open_folder->fd < 0 || open_folder->length != length ||
        memcmp(open_folder->path, path, length) != 0) {
        close_folder(open_folder);
        char name[PATH_MAX];
        memcpy(name, path, length);
        name[length] = '\0';
        open_folder->fd = open(name, O_PATH | O_DIRECTORY | O_CLOEXEC);
        open_folder->path = path;
        open_folder->length = length;
    }
    if (open_folder->fd < 0) /* the stat says why (or it is not a folder's file) */
        return stat(path, status);
    return fstatat(open_folder->fd, slash + 1, status, 0);
}

static void stat_one(folder *open_folder, const char *path, int64_t *out, int *error)
{
    struct stat status;
    if (stat_in(open_folder, path, &status)) {
        *error = errno;
        out[0] = out[1] = out[2] = 0;
        return;
    }
    *error = 0;
    out[0] = (int64_t)status.st_size;
    out[1] = (int64_t)status.st_mtim.tv_sec * 1000000000 + status.st_mtim.tv_nsec;
    /* The low 63 bits of the exact value are those of its value mod 2**64. */
    uint64_t ctime = (uint64_t)status.st_ctim.tv_sec * 1000000000u + (uint64_t)status.st_ctim.tv_nsec;
    out[2] = (int64_t)(((uint64_t)status.st_ino * 1000003u + ctime) & (UINT64_MAX >> 1));
}

static void *stat_rest(void *arg)
{
    stamps_job *job = arg;
    folder open_folder = {NULL, 0, -1};
    for (;;) {
        size_t first = atomic_fetch_add(&job->next, STAMPS_CHUNK);
        if (first >= job->count)
            break;
        size_t last = first + STAMPS_CHUNK < job->count ? first + STAMPS_CHUNK : job->count;
        for (size_t i = first; i < last; i++)
            stat_one(&open_folder, job->paths[i], &job->stamps[3 * i], &job->errors[i]);
    }
    close_folder(&open_folder);
    return NULL;
}

static uint64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

fio_stamps_job *fio_stamps_new(const char *const *paths, size_t count, int64_t *stamps,
                               int *errors)
{
    stamps_job *job = malloc(sizeof *job);
    if (job == NULL)
        return NULL;
    job->paths = paths;
    job->count = count;
    job->stamps = stamps;
    job->errors = errors;
    /* The first ones are the runner's own, timed (see fio_stamps_run). */
    atomic_init(&job->next, count < STAMPS_PROBE ? count : STAMPS_PROBE);
    return job;
}

void fio_stamps_free(fio_stamps_job *job)
{
    free(job);
}

void fio_stamps_help(fio_stamps_job *job)
{
    stat_rest(job);
}

void fio_stamps_run(fio_stamps_job *job, uint64_t round_trip_ns, size_t local_threads)
{
    size_t count = job->count;
    size_t probe = count < STAMPS_PROBE ? count : STAMPS_PROBE;
    uint64_t began = now_ns();
    folder open_folder = {NULL, 0, -1};
    for (size_t i = 0; i < probe; i++)
        stat_one(&open_folder, job->paths[i], &job->stamps[3 * i], &job->errors[i]);
    close_folder(&open_folder);
    size_t rest = count - probe;
    if (!rest)
        return;
    size_t threads;
    if ((now_ns() - began) / probe >= round_trip_ns) {
        threads = (rest + STAMPS_CHUNK - 1) / STAMPS_CHUNK;
        if (threads > STAMPS_REMOTE_THREADS)
            threads = STAMPS_REMOTE_THREADS;
    } else {
        threads = rest / STAMPS_LOCAL_PER_THREAD;
        if (threads > local_threads)
            threads = local_threads;
    }
    /* The calling thread is one of them. */
    pthread_t helpers[STAMPS_REMOTE_THREADS];
    size_t started = 0;
    while (started + 1 < threads && pthread_create(&helpers[started], NULL, stat_rest, job) == 0)
        started++;
    stat_rest(job);
    for (size_t i = 0; i < started; i++)
        pthread_join(helpers[i], NULL);
}

void fio_stat_stamps(const char *const *paths, size_t count, uint64_t round_trip_ns,
                     int64_t *stamps, int *errors)
{
    stamps_job job = {paths, count, stamps, errors, count < STAMPS_PROBE ? count : STAMPS_PROBE};
    fio_stamps_run(&job, round_trip_ns, STAMPS_LOCAL_THREADS);
}
