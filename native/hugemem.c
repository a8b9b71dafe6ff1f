#define _GNU_SOURCE
#include "hugemem.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

int fio_region_map(fio_region *region, size_t size, int huge, int populate)
{
    size_t rounded = (size + FIO_HUGE_PAGE - 1) & ~(FIO_HUGE_PAGE - 1);
    size_t mapped_len = rounded + FIO_HUGE_PAGE; /* room to align the start */
    char *mapping = mmap(NULL, mapped_len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED)
        return -errno;
    char *data = (char *)(((uintptr_t)mapping + FIO_HUGE_PAGE - 1) & ~(uintptr_t)(FIO_HUGE_PAGE - 1));
#ifdef MADV_HUGEPAGE
    /* Advice only: without THP the region still works with small pages. */
    if (huge)
        (void)madvise(data, rounded, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
    /* Fault the pages in now, once: a fault in the middle of io_uring's inline
     * copy of cached data makes it hand the read to a kernel worker instead
     * (Linux 5.14+; older kernels fault on first use as before). */
    if (populate)
        (void)madvise(data, rounded, MADV_POPULATE_WRITE);
#endif
    region->mapping = mapping;
    region->mapped_len = mapped_len;
    region->data = data;
    region->size = rounded;
    return 0;
}

void fio_region_unmap(fio_region *region)
{
    if (region->mapping) {
        munmap(region->mapping, region->mapped_len);
        region->mapping = NULL;
    }
}

void fio_prefault(void *data, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t start = (uintptr_t)data & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)data + len + 4095) & ~(uintptr_t)4095;
    if (len)
        (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
#else
    (void)data;
    (void)len;
#endif
}
