#define _GNU_SOURCE
#include "residency.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same number on every architecture (Linux 6.5) */
#endif

struct fio_cachestat_range {
    uint64_t off;
    uint64_t len;
};

struct fio_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* cachestat(2) answers from the page cache alone, with no mapping: one system
 * call a window. -ENOSYS before Linux 6.5 (or where seccomp refuses it). */
static int count_cachestat(int fd, uint64_t start, uint64_t end, uint64_t page,
                           uint64_t *resident, uint64_t *probed) {
    uint64_t first = start / page * page;
    struct fio_cachestat_range range = {first, end - first};
    struct fio_cachestat stat;
    if (syscall(__NR_cachestat, fd, &range, &stat, 0) < 0)
        return -errno;
    *resident += stat.nr_cache;
    *probed += (end - first + page - 1) / page;
    return 0;
}

/* Resident pages by mincore() over a mapping of the file made once for every
 * window: a mapping per window costs a mmap and a munmap each (about 10 us),
 * 30x the mincore. */
static int count_mapped(const unsigned char *map, uint64_t map_start, uint64_t start,
                        uint64_t end, uint64_t page, uint64_t *resident, uint64_t *probed) {
    unsigned char vector[256];
    uint64_t at = start / page * page;
    while (at < end) {
        uint64_t span = end - at;
        if (span > page * sizeof vector)
            span = page * sizeof vector;
        if (mincore((void *)(map + (at - map_start)), span, vector) < 0)
            return -errno;
        uint64_t pages = (span + page - 1) / page;
        for (uint64_t i = 0; i < pages; i++)
            *resident += vector[i] & 1;
        *probed += pages;
        at += span;
    }
    return 0;
}

/* The same, mapping the window a piece at a time (where the whole span is
 * too large to map at once). */
static int count_window(int fd, uint64_t start, uint64_t end, uint64_t page,
                        uint64_t *resident, uint64_t *probed) {
    for (uint64_t at = start / page * page; at < end;) {
        uint64_t span = end - at;
        if (span > page * 256)
            span = page * 256;
        void *map = mmap(NULL, span, PROT_READ, MAP_SHARED, fd, (off_t)at);
        if (map == MAP_FAILED)
            return -errno;
        int rc = count_mapped(map, at, at, at + span, page, resident, probed);
        munmap(map, span);
        if (rc < 0)
            return rc;
        at += span;
    }
    return 0;
}

int fio_resident_pages(int fd, uint64_t offset, uint64_t length, unsigned probes,
                       uint64_t window, int flags, uint64_t *resident, uint64_t *probed) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    *resident = *probed = 0;
    if (length == 0)
        return 0;
    if (probes == 0)
        probes = 1;
    if (window < page)
        window = page;
    /* Evenly spread windows, the first at the start and the last at the end;
     * a span no larger than the windows is looked at whole. */
    uint64_t stride = 0;
    if ((uint64_t)probes * window >= length) {
        probes = 1;
        window = length;
    } else if (probes > 1) {
        stride = (length - window) / (probes - 1);
    }
    int rc = 0;
    if (!(flags & FIO_RESIDENT_MAPPED)) {
        /* A layout of many files checks each as it opens it: one system call
         * a window, where a mapping costs two more (and a lock of the address
         * space each). */
        for (unsigned i = 0; i < probes && rc == 0; i++)
            rc = count_cachestat(fd, offset + stride * i, offset + stride * i + window, page,
                                 resident, probed);
        if (rc != -ENOSYS && rc != -EPERM)
            return rc;
        *resident = *probed = 0;
    }
    uint64_t first = offset / page * page;
    uint64_t map_length = offset + length - first;
    void *map = mmap(NULL, map_length, PROT_READ, MAP_SHARED, fd, (off_t)first);
    for (unsigned i = 0; i < probes; i++) {
        uint64_t start = offset + stride * i;
        /* A span too large to map at once (address space) is mapped a window
         * at a time. */
        rc = map == MAP_FAILED
                 ? count_window(fd, start, start + window, page, resident, probed)
                 : count_mapped(map, first, start, start + window, page, resident, probed);
        if (rc < 0)
            break;
    }
    if (map != MAP_FAILED)
        munmap(map, map_length);
    return rc;
}

int fio_map_resident(int fd, uint64_t offset, uint64_t length, void **base, uint64_t *mapped,
                     uint64_t *available) {
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size <= offset || length == 0)
        return 0;
    if (length > (uint64_t)st.st_size - offset)
        length = (uint64_t)st.st_size - offset;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t resident = 0, probed = 0;
    if (count_cachestat(fd, offset, offset + length, page, &resident, &probed) < 0 ||
        resident < probed)
        return 0;
    uint64_t lead = offset % page;
    void *map = mmap(NULL, lead + length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                     (off_t)(offset - lead));
    if (map == MAP_FAILED)
        return errno == ENODEV || errno == EACCES ? 0 : -errno;
    *base = map;
    *mapped = lead + length;
    *available = length;
    return 1;
}

uint64_t fio_read_whole(int fd, void *dest, uint64_t offset, uint64_t length, int flags) {
    uint64_t done = 0;
    while (done < length) {
        struct iovec piece = {(char *)dest + done, length - done};
        ssize_t count = preadv2(fd, &piece, 1, (off_t)(offset + done), flags);
        if (count < 0 && errno == EINTR)
            continue;
        if (count <= 0)
            break; /* the end of the file, a failure, or (RWF_NOWAIT) not cached */
        done += (uint64_t)count;
    }
    return done;
}

void fio_read_resident(const char *const *paths, const uint64_t *offsets,
                       const uint64_t *lengths, char *const *dests, size_t count, double least,
                       uint64_t *got) {
    int fd = -1;
    const char *open_path = NULL;
    for (size_t i = 0; i < count; i++) {
        got[i] = 0;
        if (open_path == NULL || strcmp(open_path, paths[i]) != 0) {
            if (fd >= 0)
                close(fd);
            open_path = paths[i];
            /* Not blocking until it is known to be a file: a FIFO without a
             * writer would wait in open() for ever. Others are left to the
             * reader's stream, which says what they are. */
            fd = open(open_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            struct stat st;
            if (fd >= 0 && (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))) {
                close(fd);
                fd = -1;
            }
        }
        if (fd < 0 || lengths[i] == 0)
            continue;
        uint64_t resident = 0, probed = 0;
        if (fio_resident_pages(fd, offsets[i], lengths[i], 1, lengths[i], 0, &resident,
                               &probed) < 0)
            continue;
        if (probed && (double)resident < least * (double)probed)
            continue; /* a read here would wait for the device */
        got[i] = fio_read_whole(fd, dests[i], offsets[i], lengths[i], 0);
    }
    if (fd >= 0)
        close(fd);
}
