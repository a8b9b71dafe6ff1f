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
                         size_t max_out, size_t *consumed, fio_frame_error *error)
{
    size_t pos = 0, count = 0;

    error->kind = FIO_FRAME_OK;
    error->offset = 0;
    while (count < max_out && len - pos >= 12) {
        uint64_t length = load_le64(buf + pos);
        if (verify && masked_crc(buf + pos, 8) != load_le32(buf + pos + 8)) {
            error->kind = FIO_FRAME_LENGTH_CRC;
            error->offset = pos;
            break;
        }
        if (length > len - pos - 12 || len - pos - 12 - length < 4)
            break; /* incomplete: the rest comes with the next chunk */
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
