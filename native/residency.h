/*
 * How much of a file the page cache holds: what lets a reader choose per file
 * between buffered reads (cached data, served at memory speed) and O_DIRECT
 * (cold data, read at the device's speed without a copy through the cache).
 *
 * cachestat(2) (Linux 6.5) answers from the page cache without a mapping;
 * before it, mincore() on a read-only shared mapping of the file answers for
 * its pages exactly. Neither touches anything: no page is faulted in, no
 * read-ahead starts (preadv2 with RWF_NOWAIT, the other probe, may start
 * read-ahead of what it asks about).
 */
#ifndef FASTIO_RESIDENCY_H
#define FASTIO_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

/* Probe with mincore() even where cachestat(2) is there. */
#define FIO_RESIDENT_MAPPED 1

/* Pages of bytes offset..offset+length of `fd` that are in the page cache, of
 * at most `probes` windows of `window` bytes spread evenly over that span (the
 * whole span when it is no larger). Sets *probed to the pages looked at.
 * Returns 0 or a negative errno (ENODEV: the file cannot be mapped). */
int fio_resident_pages(int fd, uint64_t offset, uint64_t length, unsigned probes,
                       uint64_t window, int flags, uint64_t *resident, uint64_t *probed);

/* Maps bytes offset..offset+length of `fd` read-only (MAP_SHARED, its pages
 * entered at once) where the page cache holds every page of them, cut to the
 * file's size now. Returns 1 with *base (the mapping, from the page holding
 * `offset`), *mapped (its bytes) and *available (the range's bytes mapped,
 * from base + offset % page); 0 where the range is not wholly cached, the
 * file ends at or before `offset`, or cachestat(2) cannot tell (nothing is
 * mapped: read it); or a negative errno. Populating cached pages enters them
 * in the page tables, without a copy or a wait for the device. */
int fio_map_resident(int fd, uint64_t offset, uint64_t length, void **base, uint64_t *mapped,
                     uint64_t *available);

/* Reads bytes offset..offset+length of `fd` into `dest` with preadv2 and
 * `flags` (0, or RWF_NOWAIT to read only what the page cache holds), going on
 * after short reads. Returns the bytes read: fewer than `length` where the
 * file ends first, a read fails, or (RWF_NOWAIT) the rest is not cached. */
uint64_t fio_read_whole(int fd, void *dest, uint64_t offset, uint64_t length, int flags);

/* Reads each of `count` ranges (bytes offsets[i]..offsets[i]+lengths[i] of
 * the local file paths[i]) into dests[i], where the page cache holds at least
 * `least` (0..1) of the range's pages: the small reads a dataset makes when it
 * opens its shards (footers, headers), each a few microseconds this way. A
 * path is opened once for the ranges that follow each other in it. Sets
 * got[i] to the bytes read: lengths[i] where the range was read whole, else
 * fewer (a colder range, one past the file's end, or a failure, which the
 * caller's read through the reader reports). */
void fio_read_resident(const char *const *paths, const uint64_t *offsets,
                       const uint64_t *lengths, char *const *dests, size_t count, double least,
                       uint64_t *got);

#endif
