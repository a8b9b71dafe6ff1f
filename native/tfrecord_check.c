/*
 * A TFRecord scan with checksums on a thread of its own.
 *
 * Checking a large record's CRC-32C costs about as much as copying it, and
 * the thread that parses records is the one a training job waits on; so the
 * checked scan of a buffer runs here while the caller frames the same buffer
 * unchecked and parses it. The caller then keeps the records the checked scan
 * accepts. Nothing here touches Python.
 */
#define _GNU_SOURCE
#include "framing.h"

#include <stdlib.h>
#include <string.h>

enum { CHECK_BATCH = 1024 }; /* records found per call of fio_tfrecord_scan */

static int check_grow(fio_tfrecord_check *check, size_t more)
{
    if (check->count + more <= check->capacity)
        return 0;
    size_t capacity = check->capacity ? check->capacity * 2 : CHECK_BATCH;
    while (capacity < check->count + more)
        capacity *= 2;
    fio_record *records = realloc(check->records, capacity * sizeof(fio_record));
    if (!records)
        return -1;
    check->records = records;
    check->capacity = capacity;
    return 0;
}

/* The whole checked scan of the buffer, as scan_tfrecords does it in batches. */
static void *check_run(void *arg)
{
    fio_tfrecord_check *check = arg;
    size_t total = 0, consumed = 0;
    for (;;) {
        if (check_grow(check, CHECK_BATCH)) {
            check->failed = 1;
            break;
        }
        size_t found = fio_tfrecord_scan(check->buf + total, check->len - total, 1,
                                         check->records + check->count, CHECK_BATCH, &consumed,
                                         &check->needed, &check->error);
        for (size_t index = check->count; index < check->count + found; index++)
            check->records[index].offset += total;
        check->count += found;
        if (check->error.kind)
            check->error.offset += total;
        total += consumed;
        if (check->error.kind || found < CHECK_BATCH)
            break;
    }
    check->consumed = total;
    return NULL;
}

void fio_tfrecord_check_start(fio_tfrecord_check *check, const uint8_t *buf, size_t len)
{
    memset(check, 0, sizeof(*check));
    check->buf = buf;
    check->len = len;
    /* Without a thread (none to be had) the scan runs at the wait instead. */
    check->threaded = pthread_create(&check->thread, NULL, check_run, check) == 0;
}

int fio_tfrecord_check_wait(fio_tfrecord_check *check)
{
    if (check->threaded)
        pthread_join(check->thread, NULL);
    else
        check_run(check);
    check->threaded = 0;
    return check->failed ? -1 : 0;
}

void fio_tfrecord_check_free(fio_tfrecord_check *check)
{
    free(check->records);
    check->records = NULL;
    check->count = check->capacity = 0;
}
