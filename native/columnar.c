/* One binary column of records (TFRecord records, lines), as columnar.h declares it. */
#define _GNU_SOURCE
#include "columnar_internal.h"

#include <string.h>

/* Records framed per fio_tfrecord_scan call (on the stack). */
#define FRAME_STEP 512

void fio_stream_copy(uint8_t *to, const uint8_t *from, size_t length)
{
    fio_copy_value(to, from, length);
    fio_copy_done();
}

void fio_records_free(fio_records *records)
{
    free(records->pieces);
    memset(records, 0, sizeof *records);
}

static int add_piece(fio_records *records, const uint8_t *data, uint64_t length,
                     uint64_t position, int joins)
{
    if (fio_grow((void **)&records->pieces, &records->capacity, records->count + 1,
             sizeof(fio_piece)))
        return -ENOMEM;
    fio_piece *piece = &records->pieces[records->count++];
    piece->data = data;
    piece->length = length;
    piece->position = position;
    piece->joins = joins;
    records->bytes += length;
    records->rows += !joins;
    return 0;
}

int fio_tfrecord_collect(const uint8_t *buf, size_t len, uint64_t base, int verify,
                         uint64_t max_bytes, fio_records *out, size_t *rows, size_t *consumed,
                         size_t *needed, int *full, fio_frame_error *error)
{
    fio_record found[FRAME_STEP];
    size_t pos = 0, step_consumed = 0;

    *rows = 0;
    *full = 0;
    *needed = 0;
    if (max_bytes > FIO_COLUMN_MAX_BYTES)
        max_bytes = FIO_COLUMN_MAX_BYTES;
    int checks = verify ? FIO_TFRECORD_VERIFY : 0;
    for (;;) {
        size_t count = fio_tfrecord_scan(buf + pos, len - pos, checks, found, FRAME_STEP,
                                         &step_consumed, needed, error);
        if (fio_grow((void **)&out->pieces, &out->capacity, out->count + count, sizeof(fio_piece)))
            return -ENOMEM;
        for (size_t index = 0; index < count; index++) {
            if (found[index].length > max_bytes - out->bytes) {
                /* The rest waits for the next batch (an error after it too:
                 * the next scan finds that again). */
                *consumed = pos + found[index].offset - 12;
                *needed = 0;
                *full = 1;
                error->kind = FIO_FRAME_OK;
                return 0;
            }
            add_piece(out, buf + pos + found[index].offset, found[index].length,
                      base + pos + found[index].offset - 12, 0);
            (*rows)++;
        }
        if (error->kind)
            error->offset += pos;
        pos += step_consumed;
        if (error->kind || count < FRAME_STEP)
            break;
    }
    *consumed = pos;
    return 0;
}

int fio_lines_collect(const uint8_t *buf, size_t len, const uint8_t *prefix,
                      size_t prefix_length, int final, uint64_t max_bytes, fio_records *out,
                      size_t *rows, size_t *consumed, int *full)
{
    size_t pos = 0, carried = prefix_length; /* the first line begins with the prefix */

    *rows = 0;
    *full = 0;
    if (max_bytes > FIO_COLUMN_MAX_BYTES)
        max_bytes = FIO_COLUMN_MAX_BYTES;
    for (;;) {
        const uint8_t *newline = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        if (!newline && (!final || (pos == len && !carried)))
            break;
        size_t end = newline ? (size_t)(newline - buf) : len;
        if (end - pos + carried > max_bytes - out->bytes) {
            *full = 1;
            break;
        }
        if ((carried && add_piece(out, prefix, carried, 0, 0)) ||
            add_piece(out, buf + pos, end - pos, 0, carried > 0))
            return -ENOMEM;
        (*rows)++;
        carried = 0;
        pos = newline ? end + 1 : len;
        if (!newline)
            break;
    }
    *consumed = pos;
    return 0;
}

int fio_records_export(fio_records *records, const char *name, struct ArrowSchema *schema,
                       struct ArrowArray *array)
{
    fio_column_out column = {.name = name, .kind = FIO_COLUMN_BINARY};
    int32_t *offsets = fio_buffer_alloc((records->rows + 1) * sizeof(int32_t));
    uint8_t *data = fio_buffer_alloc(records->bytes);
    if (!offsets || !data) {
        fio_buffer_free(offsets);
        fio_buffer_free(data);
        return -ENOMEM;
    }
    size_t row = 0, at = 0;
    offsets[0] = 0;
    for (size_t index = 0; index < records->count; index++) {
        const fio_piece *piece = &records->pieces[index];
        if (index && !piece->joins)
            offsets[++row] = (int32_t)at;
        memcpy(data + at, piece->data, piece->length);
        at += piece->length;
    }
    if (records->count)
        offsets[++row] = (int32_t)at;
    column.offsets = offsets;
    column.data = data;
    int rc = fio_export_columns((int64_t)records->rows, &column, 1, schema, array);
    if (!rc)
        records->count = records->rows = records->bytes = 0;
    return rc;
}

fio_records *fio_records_detach(fio_records *records)
{
    fio_records *moved = malloc(sizeof *moved);
    if (!moved)
        return NULL;
    *moved = *records;
    memset(records, 0, sizeof *records);
    return moved;
}
