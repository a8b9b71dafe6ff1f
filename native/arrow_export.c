#define _GNU_SOURCE
#include "arrow_export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Every node (schema or array, parent or child) owns what it points to and
 * frees it in its own release callback, so that a consumer may move a child
 * out and release the parent, as the specification allows. */

typedef struct schema_private {
    char *name;
    struct ArrowSchema *child_block;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
} schema_private;

typedef struct array_private {
    const void *buffers[3];
    struct ArrowArray *child_block;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
} array_private;

static void release_schema(struct ArrowSchema *schema)
{
    schema_private *own = schema->private_data;
    for (int64_t index = 0; index < schema->n_children; index++)
        if (schema->children[index]->release)
            schema->children[index]->release(schema->children[index]);
    if (schema->dictionary && schema->dictionary->release)
        schema->dictionary->release(schema->dictionary);
    free(own->name);
    free(own->child_block);
    free(own->children);
    free(own->dictionary);
    free(own);
    schema->release = NULL;
}

static void release_array(struct ArrowArray *array)
{
    array_private *own = array->private_data;
    for (int64_t index = 0; index < array->n_children; index++)
        if (array->children[index]->release)
            array->children[index]->release(array->children[index]);
    if (array->dictionary && array->dictionary->release)
        array->dictionary->release(array->dictionary);
    for (int index = 0; index < 3; index++)
        fio_buffer_free(own->buffers[index]);
    free(own->child_block);
    free(own->children);
    free(own->dictionary);
    free(own);
    array->release = NULL;
}

static int schema_node(struct ArrowSchema *schema, const char *format, const char *name,
                       size_t name_length, int64_t flags, size_t children)
{
    schema_private *own = calloc(1, sizeof *own);
    memset(schema, 0, sizeof *schema);
    if (!own)
        return -ENOMEM;
    schema->format = format;
    schema->flags = flags;
    schema->release = release_schema;
    schema->private_data = own;
    own->name = malloc(name_length + 1);
    if (children) {
        own->child_block = calloc(children, sizeof *own->child_block);
        own->children = calloc(children, sizeof *own->children);
    }
    if (!own->name || (children && (!own->child_block || !own->children))) {
        release_schema(schema);
        return -ENOMEM;
    }
    memcpy(own->name, name, name_length);
    own->name[name_length] = 0;
    schema->name = own->name;
    for (size_t index = 0; index < children; index++)
        own->children[index] = &own->child_block[index];
    schema->children = own->children;
    schema->n_children = (int64_t)children;
    return 0;
}

/* Takes the buffers: the array's release frees them, or this does at once on failure. */
static int array_node(struct ArrowArray *array, int64_t length, int64_t null_count,
                      int64_t n_buffers, void *validity, void *second, void *third,
                      size_t children)
{
    array_private *own = calloc(1, sizeof *own);
    memset(array, 0, sizeof *array);
    if (!own) {
        fio_buffer_free(validity);
        fio_buffer_free(second);
        fio_buffer_free(third);
        return -ENOMEM;
    }
    own->buffers[0] = validity;
    own->buffers[1] = second;
    own->buffers[2] = third;
    array->length = length;
    array->null_count = null_count;
    array->n_buffers = n_buffers;
    array->buffers = own->buffers;
    array->release = release_array;
    array->private_data = own;
    if (children) {
        own->child_block = calloc(children, sizeof *own->child_block);
        own->children = calloc(children, sizeof *own->children);
        if (!own->child_block || !own->children) {
            release_array(array);
            return -ENOMEM;
        }
        for (size_t index = 0; index < children; index++)
            own->children[index] = &own->child_block[index];
        array->children = own->children;
        array->n_children = (int64_t)children;
    }
    return 0;
}

void fio_columns_free(fio_column_out *columns, size_t count)
{
    for (size_t index = 0; index < count; index++) {
        if (columns[index].kind == FIO_COLUMN_DICTIONARY) {
            fio_buffer_free(columns[index].offsets);
            columns[index].offsets = NULL;
            continue;
        }
        fio_buffer_free(columns[index].validity);
        fio_buffer_free(columns[index].offsets);
        fio_buffer_free(columns[index].data);
        fio_buffer_free(columns[index].item_offsets);
        columns[index].validity = columns[index].offsets = columns[index].data = NULL;
        columns[index].item_offsets = NULL;
    }
}

/* A list<binary>, list<int64> or list<double> column, its items one child. */
static int export_list(struct ArrowSchema *schema, struct ArrowArray *array, int64_t rows,
                       fio_column_out *column)
{
    static const char *item_formats[] = {"z", "l", "g"};
    int binary = column->item_kind == FIO_ITEM_BINARY;
    int rc = schema_node(schema, "+l", column->name, strlen(column->name), ARROW_FLAG_NULLABLE,
                         1);
    if (!rc)
        rc = schema_node(schema->children[0], item_formats[column->item_kind], "item", 4,
                         ARROW_FLAG_NULLABLE, 0);
    if (rc)
        return rc;
    rc = array_node(array, rows, column->null_count, 2, column->validity, column->offsets, NULL,
                    1);
    column->validity = column->offsets = NULL;
    if (rc)
        return rc;
    rc = array_node(array->children[0], column->item_count, 0, binary ? 3 : 2, NULL,
                    binary ? column->item_offsets : column->data,
                    binary ? column->data : NULL, 0);
    if (!binary)
        fio_buffer_free(column->item_offsets);
    column->item_offsets = column->data = NULL;
    return rc;
}

static int export_column(struct ArrowSchema *schema, struct ArrowArray *array, int64_t rows,
                         fio_column_out *column)
{
    static const char *formats[] = {"z", "u", "i"};
    if (column->kind == FIO_COLUMN_LIST)
        return export_list(schema, array, rows, column);
    int rc = schema_node(schema, formats[column->kind], column->name, strlen(column->name),
                         ARROW_FLAG_NULLABLE, 0);
    if (rc)
        return rc;
    if (column->kind != FIO_COLUMN_DICTIONARY) {
        rc = array_node(array, rows, column->null_count, 3, column->validity, column->offsets,
                        column->data, 0);
        column->validity = column->offsets = column->data = NULL;
        return rc;
    }
    /* Each row's index into a dictionary of the strings. */
    schema_private *own = schema->private_data;
    own->dictionary = malloc(sizeof *own->dictionary);
    if (!own->dictionary || schema_node(own->dictionary, "u", "", 0, 0, 0))
        return -ENOMEM; /* the caller releases `schema`, which frees the dictionary */
    schema->dictionary = own->dictionary;
    void *row_indices = column->offsets;
    column->offsets = NULL;
    if (array_node(array, rows, 0, 2, NULL, row_indices, NULL, 0))
        return -ENOMEM;
    size_t strings = column->dictionary_count;
    int32_t *offsets = fio_buffer_alloc((strings + 1) * sizeof(int32_t));
    uint8_t *text = fio_buffer_alloc(column->data_length);
    array_private *indices = array->private_data;
    indices->dictionary = malloc(sizeof *indices->dictionary);
    if (!indices->buffers[1] || !indices->dictionary || !offsets || !text) {
        fio_buffer_free(offsets);
        fio_buffer_free(text);
        return -ENOMEM;
    }
    memcpy(offsets, column->dictionary_offsets, (strings + 1) * sizeof(int32_t));
    memcpy(text, column->data, column->data_length);
    array->dictionary = indices->dictionary;
    return array_node(array->dictionary, (int64_t)strings, 0, 3, NULL, offsets, text, 0);
}

int fio_export_columns(int64_t rows, fio_column_out *columns, size_t count,
                       struct ArrowSchema *schema, struct ArrowArray *array)
{
    int rc = schema_node(schema, "+s", "", 0, 0, count);
    if (!rc)
        rc = array_node(array, rows, 0, 1, NULL, NULL, NULL, count);
    for (size_t index = 0; !rc && index < count; index++)
        rc = export_column(schema->children[index], array->children[index], rows,
                           &columns[index]);
    if (rc) {
        fio_columns_free(columns, count);
        fio_export_release(schema, array);
    }
    return rc;
}

void fio_export_release(struct ArrowSchema *schema, struct ArrowArray *array)
{
    if (schema && schema->release)
        schema->release(schema);
    if (array && array->release)
        array->release(array);
}

