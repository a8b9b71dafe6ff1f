#define _GNU_SOURCE
#include "residency.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

static int count_window(int fd, uint64_t start, uint64_t end, uint64_t page,
                        uint64_t *resident, uint64_t *probed) {
    unsigned char vector[256];
    uint64_t first = start / page * page;
    uint64_t at = first;
    while (at < end) {
        uint64_t span = end - at;
        if (span > page * sizeof vector)
            span = page * sizeof vector;
        void *map = mmap(NULL, span, PROT_READ, MAP_SHARED, fd, (off_t)at);
        if (map == MAP_FAILED)
            return -errno;
        int rc = mincore(map, span, vector);
        int saved = errno;
        munmap(map, span);
        if (rc < 0)
            return -saved;
        uint64_t pages = (span + page - 1) / page;
        for (uint64_t i = 0; i < pages; i++)
            *resident += vector[i] & 1;
        *probed += pages;
        at += span;
    }
    return 0;
}

int fio_resident_pages(int fd, uint64_t offset, uint64_t length, unsigned probes,
                       uint64_t window, uint64_t *resident, uint64_t *probed) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    *resident = *probed = 0;
    if (length == 0)
        return 0;
    if (probes == 0)
        probes = 1;
    if (window < page)
        window = page;
    if ((uint64_t)probes * window >= length)
        return count_window(fd, offset, offset + length, page, resident, probed);
    /* Evenly spread windows, the first at the start and the last at the end. */
    uint64_t stride = probes > 1 ? (length - window) / (probes - 1) : 0;
    for (unsigned i = 0; i < probes; i++) {
        uint64_t start = offset + stride * i;
        int rc = count_window(fd, start, start + window, page, resident, probed);
        if (rc < 0)
            return rc;
    }
    return 0;
}
