/* What laying out a local Arrow IPC file needs, read in one pass, as arrow_scan.h says. */
#define _GNU_SOURCE
#include "arrow_scan.h"
#include "residency.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008 /* Linux 4.14; an older kernel refuses it: the file is read the other way */
#endif

#define MAGIC "ARROW1"
#define MAGIC_LENGTH 6
#define TRAILER (4 + MAGIC_LENGTH) /* the footer's length, then the magic */
#define BLOCK_BYTES 24             /* offset (int64), metadata length (int32, padded), body (int64) */

/* A little-endian integer of `width` bytes at `at`, where `n` bytes hold it. */
static int read_le(const uint8_t *bytes, uint64_t n, uint64_t at, unsigned width, uint64_t *value)
{
    if (at > n || n - at < width)
        return -1;
    uint64_t word = 0;
    for (unsigned i = 0; i < width; i++)
        word |= (uint64_t)bytes[at + i] << (8 * i);
    *value = word;
    return 0;
}

/* The table or vector the flatbuffer offset at `at` points to, or -1. */
static int64_t fb_deref(const uint8_t *bytes, uint64_t n, int64_t at)
{
    uint64_t offset;
    if (at < 0 || read_le(bytes, n, (uint64_t)at, 4, &offset) || (uint64_t)at + offset >= n)
        return -1;
    return at + (int64_t)offset;
}

/* Where field `index` of the flatbuffer table at `table` is; 0 where the
 * table leaves it out; -1 where the table points outside the bytes. */
static int64_t fb_field(const uint8_t *bytes, uint64_t n, int64_t table, unsigned index)
{
    uint64_t word, vtable_size, offset;
    if (table < 0 || read_le(bytes, n, (uint64_t)table, 4, &word))
        return -1;
    int64_t vtable = table - (int64_t)(int32_t)(uint32_t)word;
    if (vtable < 0 || read_le(bytes, n, (uint64_t)vtable, 2, &vtable_size))
        return -1;
    uint64_t entry = 4 + 2 * (uint64_t)index;
    if (entry + 2 > vtable_size)
        return 0;
    if (read_le(bytes, n, (uint64_t)vtable + entry, 2, &offset))
        return -1;
    return offset ? table + (int64_t)offset : 0;
}

/* Bytes offset..offset+length of `fd` in a new buffer, read where the page
 * cache holds all of them (RWF_NOWAIT: no wait for the device, and one system
 * call where asking the page cache first takes two); NULL where it does not,
 * or the read comes short. Before Linux 5.9 a refused read may start the
 * device's read-ahead of those bytes, which the other reading then reads. */
static uint8_t *read_cached(int fd, uint64_t offset, uint64_t length)
{
    uint8_t *buffer = malloc(length ? length : 1);
    if (buffer && fio_read_whole(fd, buffer, offset, length, RWF_NOWAIT) != length) {
        free(buffer);
        return NULL;
    }
    return buffer;
}

/* The footer's blocks of vector field `field` (2: dictionaries, 3: record
 * batches) appended to `out` from `*count`; -1 for a damaged vector. */
static int footer_blocks(const uint8_t *footer, uint64_t n, int64_t root, unsigned field,
                         fio_arrow_block *out, size_t room, size_t *count)
{
    int64_t at = fb_field(footer, n, root, field);
    if (at < 0)
        return -1;
    if (at == 0)
        return 0;
    int64_t vector = fb_deref(footer, n, at);
    uint64_t length;
    if (vector < 0 || read_le(footer, n, (uint64_t)vector, 4, &length))
        return -1;
    if (length > (n - (uint64_t)vector - 4) / BLOCK_BYTES || *count + length > room)
        return -1;
    for (uint64_t i = 0; i < length; i++) {
        uint64_t at_block = (uint64_t)vector + 4 + BLOCK_BYTES * i, offset, meta, body;
        read_le(footer, n, at_block, 8, &offset);
        read_le(footer, n, at_block + 8, 4, &meta);
        read_le(footer, n, at_block + 16, 8, &body);
        fio_arrow_block *block = &out[(*count)++];
        block->offset = (int64_t)offset;
        block->meta = (int32_t)(uint32_t)meta;
        block->body = (int64_t)body;
        block->rows = 0;
    }
    return 0;
}

int fio_arrow_footer(const uint8_t *footer, uint64_t n, fio_arrow_block **blocks,
                     size_t *batches, size_t *dictionaries)
{
    *blocks = NULL;
    *batches = *dictionaries = 0;
    int64_t root = fb_deref(footer, n, 0);
    if (root < 0)
        return -1;
    size_t room = n / BLOCK_BYTES + 1, count = 0;
    *blocks = calloc(room, sizeof **blocks);
    if (!*blocks)
        return -1;
    if (footer_blocks(footer, n, root, 3, *blocks, room, &count))
        goto damaged;
    *batches = count;
    if (footer_blocks(footer, n, root, 2, *blocks, room, &count))
        goto damaged;
    *dictionaries = count - *batches;
    return 0;
damaged:
    free(*blocks);
    *blocks = NULL;
    *batches = 0;
    return -1;
}

int fio_arrow_message(const uint8_t *data, uint64_t n, fio_arrow_message_info *info)
{
    uint64_t marker, value;
    memset(info, 0, sizeof *info);
    if (read_le(data, n, 0, 4, &marker))
        return -1;
    info->prefix = marker == 0xffffffffu ? 8 : 4;
    if (info->prefix == 8 && read_le(data, n, 4, 4, &marker))
        return -1;
    info->length = (int64_t)(uint32_t)marker;
    int64_t root = fb_deref(data, n, info->prefix);
    int64_t type = fb_field(data, n, root, 1), header = fb_field(data, n, root, 2);
    int64_t body = fb_field(data, n, root, 3);
    if (root < 0 || type < 0 || header <= 0 || body < 0)
        return -1; /* a message without a header, or pointing outside the bytes */
    if (type && read_le(data, n, (uint64_t)type, 1, &value))
        return -1;
    info->type = type ? (int)value : 0;
    if (body && read_le(data, n, (uint64_t)body, 8, &value))
        return -1;
    info->body = body ? (int64_t)value : 0;
    int64_t length = fb_field(data, n, fb_deref(data, n, header), 0);
    if (length < 0 || info->body < 0)
        return -1;
    value = 0;
    if (length && read_le(data, n, (uint64_t)length, 8, &value))
        return -1;
    info->rows = (int64_t)value;
    return info->rows < 0 ? -1 : 0;
}

int64_t fio_arrow_message_rows(const uint8_t *data, uint64_t n)
{
    fio_arrow_message_info info;
    return fio_arrow_message(data, n, &info) ? -1 : info.rows;
}

/* Where the schema message that `head` (the file's first bytes) begins with
 * ends, or 0 where the head is too short to say. */
static uint64_t schema_end(const uint8_t *head, uint64_t n)
{
    uint64_t word;
    if (n < 16)
        return 0;
    read_le(head, n, 8, 4, &word);
    if (word == 0xffffffffu) { /* the continuation marker, then the length */
        read_le(head, n, 12, 4, &word);
        return 16 + word;
    }
    return 12 + word; /* before format 1.0: the length alone */
}

void fio_arrow_file_free(fio_arrow_file *file)
{
    free(file->tail);
    free(file->head);
    free(file->blocks);
    memset(file, 0, sizeof *file);
}

/* The messages of an Arrow IPC stream (no footer: a schema message, then
 * dictionary and record batch messages, each a prefix, its flatbuffer and its
 * body, up to an end-of-stream marker or the file's end), walked from the
 * file's start where the page cache holds each message's metadata: the
 * schema message becomes the head, the others blocks as a footer lists them.
 * 0 for a stream to read the other way: colder, damaged, cut short, or with
 * a dictionary after a record batch (which the other reading refuses). */
#define WALK_READ 1024 /* bytes read at each message of a stream at first */

static int walk_stream(int fd, uint64_t size, uint64_t schema_max, fio_arrow_file *out)
{
    size_t room = 16, extra_room = 16, batches = 0, dictionaries = 0;
    fio_arrow_block *found = malloc(room * sizeof *found); /* batches */
    fio_arrow_block *extra = malloc(extra_room * sizeof *extra); /* dictionaries */
    uint8_t *message = NULL;
    int ok = 0;
    uint64_t at = 0;
    if (!found || !extra)
        goto done;
    while (at < size) {
        /* One read for the prefix and, mostly, the metadata after it (a
         * message's metadata is a few hundred bytes); what the page cache
         * does not hold of the body after them is simply not read. */
        uint8_t first[WALK_READ];
        uint64_t want = size - at < WALK_READ ? size - at : WALK_READ, marker, length;
        uint64_t got = fio_read_whole(fd, first, at, want, RWF_NOWAIT);
        if (got < 4 || (got < 8 && got < want))
            goto done;
        read_le(first, got, 0, 4, &marker);
        uint64_t skip = marker == 0xffffffffu ? 8 : 4;
        if (skip == 8 && read_le(first, got, 4, 4, &length))
            goto done;
        if (skip == 4)
            length = marker;
        if (length == 0)
            break; /* the end-of-stream marker */
        if (length > size - at - skip || length > INT32_MAX - 8 ||
            (!at && skip + length > schema_max))
            goto done;
        if (skip + length <= got) {
            message = malloc(skip + length);
            if (message)
                memcpy(message, first, skip + length);
        } else {
            message = read_cached(fd, at, skip + length);
        }
        fio_arrow_message_info info;
        if (!message || fio_arrow_message(message, skip + length, &info) ||
            (uint64_t)info.body > size - at - skip - length)
            goto done;
        if (!at) {
            if (info.type != FIO_ARROW_SCHEMA)
                goto done;
            out->head = message;
            out->head_length = skip + length;
            message = NULL;
        } else if (info.type == FIO_ARROW_RECORD_BATCH || info.type == FIO_ARROW_DICTIONARY) {
            int batch = info.type == FIO_ARROW_RECORD_BATCH;
            if (!batch && batches)
                goto done;
            fio_arrow_block **list = batch ? &found : &extra;
            size_t *count = batch ? &batches : &dictionaries, *space = batch ? &room : &extra_room;
            if (*count == *space) {
                fio_arrow_block *grown = realloc(*list, 2 * *space * sizeof **list);
                if (!grown)
                    goto done;
                *list = grown;
                *space *= 2;
            }
            fio_arrow_block *block = &(*list)[(*count)++];
            block->offset = (int64_t)at;
            block->meta = (int32_t)(skip + length);
            block->body = info.body;
            block->rows = batch ? info.rows : 0;
        } else {
            goto done;
        }
        free(message);
        message = NULL;
        at += skip + length + (uint64_t)info.body;
    }
    if (!out->head)
        goto done;
    out->blocks = malloc((batches + dictionaries + 1) * sizeof *out->blocks);
    if (!out->blocks)
        goto done;
    memcpy(out->blocks, found, batches * sizeof *found);
    memcpy(out->blocks + batches, extra, dictionaries * sizeof *extra);
    out->batches = batches;
    out->dictionaries = dictionaries;
    out->tail_start = size;
    ok = 1;
done:
    free(message);
    free(found);
    free(extra);
    return ok;
}

static int scan(int fd, uint64_t first_bytes, uint64_t schema_max,
                fio_arrow_file *out)
{
    struct stat status;
    if (fstat(fd, &status) < 0 || !S_ISREG(status.st_mode))
        return 0;
    uint64_t size = (uint64_t)status.st_size;
    out->size = size;
    if (size < TRAILER + 8)
        return 0;
    uint64_t length = size < first_bytes ? size : first_bytes;
    if (length < TRAILER)
        length = TRAILER;
    out->tail = read_cached(fd, size - length, length);
    if (!out->tail)
        return 0;
    if (memcmp(out->tail + length - MAGIC_LENGTH, MAGIC, MAGIC_LENGTH)) {
        free(out->tail);
        out->tail = NULL;
        return walk_stream(fd, size, schema_max, out);
    }
    uint64_t footer_length;
    read_le(out->tail, length, length - TRAILER, 4, &footer_length);
    if (footer_length + TRAILER + 8 > size)
        return 0;
    if (footer_length + TRAILER > length) { /* read again, whole */
        free(out->tail);
        length = footer_length + TRAILER;
        out->tail = read_cached(fd, size - length, length);
        if (!out->tail)
            return 0;
    }
    /* The footer and what follows it are kept, the bytes before it dropped. */
    memmove(out->tail, out->tail + length - TRAILER - footer_length, footer_length + TRAILER);
    length = footer_length + TRAILER;
    out->tail_start = size - length;
    out->tail_length = length;
    if (fio_arrow_footer(out->tail, footer_length, &out->blocks, &out->batches,
                         &out->dictionaries))
        return 0;
    for (size_t i = 0; i < out->batches + out->dictionaries; i++) {
        const fio_arrow_block *block = &out->blocks[i];
        if (block->offset < 0 || block->meta <= 0 || block->body < 0 ||
            (uint64_t)block->offset > size || (uint64_t)block->meta > size - (uint64_t)block->offset)
            return 0; /* a damaged footer: the other reading says so */
    }
    for (size_t i = 0; i < out->batches; i++) {
        fio_arrow_block *block = &out->blocks[i];
        uint8_t *message = read_cached(fd, (uint64_t)block->offset, (uint64_t)block->meta);
        if (!message)
            return 0;
        block->rows = fio_arrow_message_rows(message, (uint64_t)block->meta);
        free(message);
        if (block->rows < 0)
            return 0;
    }
    length = size < first_bytes ? size : first_bytes;
    out->head = read_cached(fd, 0, length);
    if (!out->head)
        return 0;
    uint64_t end = schema_end(out->head, length);
    if (end > size)
        end = size;
    if (length < end && end <= schema_max) { /* a schema longer than the head read */
        free(out->head);
        length = end;
        out->head = read_cached(fd, 0, length);
        if (!out->head)
            return 0;
    }
    /* The magic and the schema message are kept, where the head holds them. */
    out->head_length = end && end < length ? end : length;
    return 1;
}

int fio_arrow_scan(const char *path, uint64_t first_bytes, uint64_t schema_max,
                   fio_arrow_file *out)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = scan(fd, first_bytes, schema_max, out);
    close(fd);
    if (!found)
        fio_arrow_file_free(out);
    return found;
}
