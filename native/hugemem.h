/*
 * Memory for read buffers, backed by transparent huge pages where the kernel
 * allows (MADV_HUGEPAGE; /sys/kernel/mm/transparent_hugepage/enabled is
 * "madvise" or "always").
 *
 * Why: an O_DIRECT read into scattered 4 KiB pages needs one scatter-gather
 * segment per page, and devices cap segments per request (virtio-blk: 254), so
 * a 1 MiB read is split in two and neighbouring reads cannot merge. Huge pages
 * are physically contiguous: a read stays one segment and adjacent reads merge
 * into larger device requests (measured: 2.2 GB/s against 0.9 GB/s cold on the
 * CI machine's virtio disk). Page-cache copies also take fewer TLB misses.
 */
#ifndef FASTIO_HUGEMEM_H
#define FASTIO_HUGEMEM_H

#include <stddef.h>

#define FIO_HUGE_PAGE ((size_t)2 << 20)

typedef struct fio_region {
    void *mapping;     /* what mmap returned */
    size_t mapped_len; /* what to munmap */
    char *data;        /* FIO_HUGE_PAGE-aligned start of the usable bytes */
    size_t size;       /* usable bytes, a multiple of FIO_HUGE_PAGE */
} fio_region;

/* Maps at least `size` bytes, huge-page aligned, advised for huge pages if
 * `huge` (faulting a huge page in may first reclaim or compact 2 MiB of
 * memory: milliseconds where the page cache fills memory), its pages faulted
 * in at once if `populate` (else on first use, by whoever writes them).
 * Returns 0 or a negative errno. */
int fio_region_map(fio_region *region, size_t size, int huge, int populate);
void fio_region_unmap(fio_region *region);
/* Faults in the pages under [data, data + len) for writing, as a region
 * mapped with `populate` has them (no-op where the kernel cannot). */
void fio_prefault(void *data, size_t len);

#endif
