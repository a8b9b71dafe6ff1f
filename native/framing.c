#define _GNU_SOURCE
#include "framing.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define TFRECORD_MASK_DELTA 0xa282ead8u

/* ---- CRC-32C ------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (CRC32C_POLY & (0u - (crc & 1)));
        crc_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xff];
}

/* Slicing-by-8 on the raw (not inverted) state. */
static uint32_t crc_software(uint32_t state, const uint8_t *p, size_t len)
{
    pthread_once(&crc_table_once, crc_table_init);
    while (len && ((uintptr_t)p & 7)) {
        state = (state >> 8) ^ crc_table[0][(state ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= state;
        state = crc_table[7][word & 0xff] ^ crc_table[6][(word >> 8) & 0xff] ^
                crc_table[5][(word >> 16) & 0xff] ^ crc_table[4][(word >> 24) & 0xff] ^
                crc_table[3][(word >> 32) & 0xff] ^ crc_table[2][(word >> 40) & 0xff] ^
                crc_table[1][(word >> 48) & 0xff] ^ crc_table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        state = (state >> 8) ^ crc_table[0][(state ^ *p++) & 0xff];
    return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t state, const uint8_t *p,
                                                            size_t len)
{
    uint64_t wide = state;
    while (len && ((uintptr_t)p & 7)) {
        wide = __builtin_ia32_crc32qi((uint32_t)wide, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = __builtin_ia32_crc32di(wide, word);
        p += 8;
        len -= 8;
    }
    while (len--)
        wide = __builtin_ia32_crc32qi((uint32_t)wide, *p++);
    return (uint32_t)wide;
}

static int have_sse42(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return cached;
}
#endif

uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len)
{
    uint32_t state = ~crc;
#if defined(__x86_64__)
    if (have_sse42())
        return ~crc_sse42(state, data, len);
#endif
    return ~crc_software(state, data, len);
}

uint32_t fio_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    return ~crc_software(~crc, data, len);
}

/* ---- TFRecord ------------------------------------------------------------------ */

static uint32_t masked_crc(const uint8_t *data, size_t len)
{
    uint32_t crc = fio_crc32c(0, data, len);
    return ((crc >> 15) | (crc << 17)) + TFRECORD_MASK_DELTA;
}

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t value;
    memcpy(&value, p, 8);
    return value; /* x86-64 and aarch64 Linux are little-endian */
}

static uint32_t load_le32(const uint8_t *p)
{
    uint32_t value;
    memcpy(&value, p, 4);
    return value;
}

size_t fio_tfrecord_scan(const uint8_t *buf, size_t len, int verify, fio_record *out,
                         size_t max_out, size_t *consumed, size_t *needed,
                         fio_frame_error *error)
{
    size_t pos = 0, count = 0;

    error->kind = FIO_FRAME_OK;
    error->offset = 0;
    *needed = 0;
    while (count < max_out) {
        if (len - pos < 12) {
            *needed = len > pos ? 12 : 0; /* a cut record's header comes first */
            break;
        }
        uint64_t length = load_le64(buf + pos);
        if (verify && masked_crc(buf + pos, 8) != load_le32(buf + pos + 8)) {
            error->kind = FIO_FRAME_LENGTH_CRC;
            error->offset = pos;
            break;
        }
        if (length > len - pos - 12 || len - pos - 12 - length < 4) {
            *needed = 16 + length; /* incomplete: the rest comes with the next chunk */
            break;
        }
        const uint8_t *data = buf + pos + 12;
        if (verify && masked_crc(data, length) != load_le32(data + length)) {
            error->kind = FIO_FRAME_DATA_CRC;
            error->offset = pos;
            break;
        }
        out[count].offset = pos + 12;
        out[count].length = length;
        count++;
        pos += 16 + length;
    }
    *consumed = pos;
    return count;
}

/* ---- lines ---------------------------------------------------------------------- */

size_t fio_split_lines(const uint8_t *buf, size_t len, uint64_t *ends, size_t max_out,
                       size_t *consumed)
{
    size_t pos = 0, count = 0;
    while (count < max_out && pos < len) {
        const uint8_t *newline = memchr(buf + pos, '\n', len - pos);
        if (!newline)
            break;
        ends[count++] = (uint64_t)(newline - buf);
        pos = (size_t)(newline - buf) + 1;
    }
    *consumed = pos;
    return count;
}

/* ---- tar ------------------------------------------------------------------------ */

#define TAR_BLOCK 512

static size_t field_length(const uint8_t *field, size_t width)
{
    const uint8_t *nul = memchr(field, 0, width);
    return nul ? (size_t)(nul - field) : width;
}

/* Octal ASCII (space or NUL padded) or GNU base-256 (high bit of the first byte). */
static int parse_number(const uint8_t *field, size_t width, uint64_t *value)
{
    uint64_t result = 0;
    size_t i = 0;
    if (field[0] & 0x80) {
        result = field[0] & 0x3f;
        for (i = 1; i < width; i++) {
            if (result >> 56)
                return -1;
            result = (result << 8) | field[i];
        }
        *value = result;
        return 0;
    }
    while (i < width && (field[i] == ' ' || field[i] == 0))
        i++;
    int digits = 0;
    while (i < width && field[i] >= '0' && field[i] <= '7') {
        if (result >> 61)
            return -1;
        result = (result << 3) | (uint64_t)(field[i] - '0');
        i++;
        digits++;
    }
    while (i < width && (field[i] == ' ' || field[i] == 0))
        i++;
    if (i != width || !digits)
        return -1;
    *value = result;
    return 0;
}

static int header_checksum_ok(const uint8_t *block)
{
    uint64_t stored;
    unsigned long unsigned_sum = 0;
    long signed_sum = 0;
    if (parse_number(block + 148, 8, &stored))
        return 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        uint8_t byte = (i >= 148 && i < 156) ? ' ' : block[i];
        unsigned_sum += byte;
        signed_sum += (signed char)byte;
    }
    /* Some old writers summed signed chars; accept both, as GNU tar does. */
    return stored == unsigned_sum || (long)stored == signed_sum;
}

static int all_zero(const uint8_t *block)
{
    for (int i = 0; i < TAR_BLOCK; i++)
        if (block[i])
            return 0;
    return 1;
}

static uint64_t padded(uint64_t size)
{
    return (size + TAR_BLOCK - 1) & ~(uint64_t)(TAR_BLOCK - 1);
}

/* Pax records are "<length> <key>=<value>\n". Picks out path and size. */
static int parse_pax(const uint8_t *data, uint64_t size, uint64_t base, uint64_t *path_offset,
                     uint32_t *path_length, int *has_path, uint64_t *pax_size, int *has_size)
{
    uint64_t pos = 0;
    while (pos < size) {
        uint64_t length = 0, i = pos;
        while (i < size && data[i] >= '0' && data[i] <= '9')
            length = length * 10 + (uint64_t)(data[i++] - '0');
        if (i >= size || data[i] != ' ' || length == 0 || pos + length > size ||
            data[pos + length - 1] != '\n')
            return data[pos] == 0 ? 0 : -1; /* trailing NUL padding is fine */
        const uint8_t *key = data + i + 1;
        const uint8_t *end = data + pos + length - 1;
        const uint8_t *equals = memchr(key, '=', (size_t)(end - key));
        if (!equals)
            return -1;
        size_t key_length = (size_t)(equals - key);
        const uint8_t *value = equals + 1;
        if (key_length == 4 && !memcmp(key, "path", 4)) {
            *path_offset = base + (uint64_t)(value - data);
            *path_length = (uint32_t)(end - value);
            *has_path = 1;
        } else if (key_length == 4 && !memcmp(key, "size", 4)) {
            uint64_t number = 0;
            for (const uint8_t *p = value; p < end; p++) {
                if (*p < '0' || *p > '9')
                    return -1;
                number = number * 10 + (uint64_t)(*p - '0');
            }
            *pax_size = number;
            *has_size = 1;
        }
        pos += length;
    }
    return 0;
}

size_t fio_tar_scan(const uint8_t *buf, size_t len, fio_tar_member *out, size_t max_out,
                    size_t *consumed, size_t *needed, int *at_end, fio_frame_error *error)
{
    size_t pos = 0, count = 0;

    *at_end = 0;
    *needed = 0;
    error->kind = FIO_TAR_OK;
    error->offset = 0;
    while (count < max_out) {
        /* One member: optional GNU long-name and pax blocks, then its header. */
        size_t member_start = pos, cursor = pos;
        uint64_t long_name_offset = 0, pax_path_offset = 0, pax_size = 0;
        uint32_t long_name_length = 0, pax_path_length = 0;
        int has_long_name = 0, has_pax_path = 0, has_pax_size = 0, complete = 0;

        for (;;) {
            if (len - cursor < TAR_BLOCK) {
                *needed = cursor + TAR_BLOCK - member_start;
                break;
            }
            const uint8_t *block = buf + cursor;
            if (all_zero(block)) {
                *at_end = 1;
                break;
            }
            if (!header_checksum_ok(block)) {
                error->kind = FIO_TAR_CHECKSUM;
                error->offset = cursor;
                break;
            }
            uint64_t size;
            if (parse_number(block + 124, 12, &size)) {
                error->kind = FIO_TAR_BAD_NUMBER;
                error->offset = cursor;
                break;
            }
            char type = (char)block[156];
            uint64_t data = cursor + TAR_BLOCK;
            if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
                if (size > len - data || padded(size) > len - data) {
                    *needed = data + padded(size) - member_start; /* incomplete */
                    break;
                }
                if (type == 'L') {
                    long_name_offset = data;
                    long_name_length = (uint32_t)field_length(buf + data, (size_t)size);
                    has_long_name = 1;
                } else if (type == 'x' &&
                           parse_pax(buf + data, size, data, &pax_path_offset, &pax_path_length,
                                     &has_pax_path, &pax_size, &has_pax_size)) {
                    error->kind = FIO_TAR_BAD_PAX;
                    error->offset = cursor;
                    break;
                }
                cursor = data + padded(size);
                continue;
            }
            if (has_pax_size)
                size = pax_size;
            if (size > len - data || padded(size) > len - data) {
                *needed = data + padded(size) - member_start; /* incomplete */
                break;
            }
            fio_tar_member *member = &out[count];
            member->header_offset = member_start;
            member->data_offset = data;
            member->size = size;
            member->typeflag = type;
            member->prefix_offset = cursor + 345;
            member->prefix_length = 0;
            if (has_pax_path) {
                member->name_offset = pax_path_offset;
                member->name_length = pax_path_length;
            } else if (has_long_name) {
                member->name_offset = long_name_offset;
                member->name_length = long_name_length;
            } else {
                member->name_offset = cursor;
                member->name_length = (uint32_t)field_length(block, 100);
                if (!memcmp(block + 257, "ustar\0", 6)) /* POSIX; GNU puts times there */
                    member->prefix_length = (uint32_t)field_length(block + 345, 155);
            }
            cursor = data + padded(size);
            complete = 1;
            break;
        }
        if (!complete)
            break;
        count++;
        pos = cursor;
    }
    *consumed = pos;
    return count;
}
