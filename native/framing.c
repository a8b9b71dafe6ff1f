#define _GNU_SOURCE
#include "framing.h"

#include <pthread.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
/* Joining CRC states (as zlib's crc32_combine does): a raw state of bytes A
 * followed by B is state(A) times x^(8 |B|) modulo the polynomial, xor the
 * state of B from zero. Polynomials are reflected, as the CRC is. */
#define CRC_POLY 0x82f63b78u
#define CRC_BLOCK ((size_t)4096)

static pthread_once_t crc_shift_once = PTHREAD_ONCE_INIT;
static uint32_t crc_block_shift; /* x^(8 CRC_BLOCK) mod the polynomial */

static uint32_t crc_multiply(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t bit = (uint32_t)1 << 31; bit; bit >>= 1) {
        if (a & bit)
            product ^= b;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return product;
}

static uint32_t crc_xpow(uint64_t n) /* x^n mod P, reflected as crc_multiply's operands */
{
    uint32_t power = (uint32_t)1 << 30; /* x^1 */
    uint32_t result = (uint32_t)1 << 31; /* x^0 */
    for (; n; n >>= 1) {
        if (n & 1)
            result = crc_multiply(power, result);
        power = crc_multiply(power, power);
    }
    return result;
}

static void crc_shift_init(void)
{
    crc_block_shift = crc_xpow(8 * CRC_BLOCK);
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t state, const uint8_t *p,
                                                            size_t len)
{
    uint64_t wide = state;
    while (len && ((uintptr_t)p & 7)) {
        wide = __builtin_ia32_crc32qi((uint32_t)wide, *p++);
        len--;
    }
    /* The crc32 instruction takes 3 cycles and can start every cycle: three
     * independent streams over neighbouring blocks keep it busy (about 3x one
     * dependent chain), and their states are joined by shifting the earlier
     * ones over the bytes that follow them (crc_shift). */
    if (len >= 3 * CRC_BLOCK) {
        pthread_once(&crc_shift_once, crc_shift_init);
        while (len >= 3 * CRC_BLOCK) {
            uint64_t second = 0, third = 0;
            for (size_t at = 0; at < CRC_BLOCK; at += 8) {
                uint64_t a, b, c;
                memcpy(&a, p + at, 8);
                memcpy(&b, p + CRC_BLOCK + at, 8);
                memcpy(&c, p + 2 * CRC_BLOCK + at, 8);
                wide = __builtin_ia32_crc32di(wide, a);
                second = __builtin_ia32_crc32di(second, b);
                third = __builtin_ia32_crc32di(third, c);
            }
            wide = crc_multiply(crc_block_shift, (uint32_t)wide) ^ (uint32_t)second;
            wide = crc_multiply(crc_block_shift, (uint32_t)wide) ^ (uint32_t)third;
            p += 3 * CRC_BLOCK;
            len -= 3 * CRC_BLOCK;
        }
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

/* Carry-less multiplication folding (as Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ", over 512-bit lanes). A 128-bit lane A
 * of the data stands for the polynomial A(x); the message so far is A(x)
 * times x to the number of bits after it, and A x^d mod P can replace A x^d.
 * Folding a lane d bits forward multiplies its two 64-bit halves by
 * x^(d + 64 - 1) and x^(d - 1) mod P (the -1: a carry-less product of
 * reflected operands comes out one bit short); the products, each under 96
 * bits, xor into the lane d bits further on. What is left at the end is one
 * 128-bit lane congruent to the message, whose CRC the crc32 instruction
 * takes. Loads are 64 bytes wide and the multiplier keeps up with memory:
 * about 3x the crc32 instruction on data that is not in the cache. */
#define FOLD_GROUP 256u /* bytes: four 512-bit accumulators */
static pthread_once_t fold_once = PTHREAD_ONCE_INIT;
static uint64_t fold_constants[5][2]; /* for d = 2048, 512, 384, 256, 128 bits */

static void fold_init(void)
{
    static const uint64_t bits[5] = {8 * FOLD_GROUP, 512, 384, 256, 128};
    for (int k = 0; k < 5; k++) {
        /* A constant of degree < 32 in the high half of a 64-bit operand. */
        fold_constants[k][0] = (uint64_t)crc_xpow(bits[k] + 64 - 1) << 32;
        fold_constants[k][1] = (uint64_t)crc_xpow(bits[k] - 1) << 32;
    }
}

#define FOLD_TARGET "sse4.2,pclmul,avx512f,avx512vl,avx512bw,vpclmulqdq"

__attribute__((target(FOLD_TARGET))) static inline __m512i fold512(__m512i lanes, __m512i k,
                                                                   __m512i onto)
{
    __m512i low = _mm512_clmulepi64_epi128(lanes, k, 0x00);
    __m512i high = _mm512_clmulepi64_epi128(lanes, k, 0x11);
    return _mm512_ternarylogic_epi64(low, high, onto, 0x96); /* low ^ high ^ onto */
}

__attribute__((target(FOLD_TARGET))) static inline __m128i fold128(__m128i lane, int k)
{
    __m128i constant = _mm_loadu_si128((const __m128i *)fold_constants[k]);
    return _mm_xor_si128(_mm_clmulepi64_si128(lane, constant, 0x00),
                         _mm_clmulepi64_si128(lane, constant, 0x11));
}

__attribute__((target(FOLD_TARGET))) static uint32_t crc_fold(uint32_t state, const uint8_t *p,
                                                              size_t len)
{
    if (len < FOLD_GROUP)
        return crc_sse42(state, p, len);
    pthread_once(&fold_once, fold_init);
    __m512i group = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_constants[0]));
    __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 64);
    __m512i z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
    /* The state joins the message's first 32 bits (reflected CRCs allow it). */
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)state)));
    p += FOLD_GROUP;
    len -= FOLD_GROUP;
    while (len >= FOLD_GROUP) {
        z0 = fold512(z0, group, _mm512_loadu_si512(p));
        z1 = fold512(z1, group, _mm512_loadu_si512(p + 64));
        z2 = fold512(z2, group, _mm512_loadu_si512(p + 128));
        z3 = fold512(z3, group, _mm512_loadu_si512(p + 192));
        p += FOLD_GROUP;
        len -= FOLD_GROUP;
    }
    __m512i next = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)fold_constants[1]));
    z1 = fold512(z0, next, z1);
    z2 = fold512(z1, next, z2);
    z3 = fold512(z2, next, z3);
    /* z3's four lanes are consecutive: the first three fold onto the last. */
    __m128i lane = _mm512_extracti32x4_epi32(z3, 3);
    lane = _mm_xor_si128(lane, fold128(_mm512_extracti32x4_epi32(z3, 0), 2));
    lane = _mm_xor_si128(lane, fold128(_mm512_extracti32x4_epi32(z3, 1), 3));
    lane = _mm_xor_si128(lane, fold128(_mm512_extracti32x4_epi32(z3, 2), 4));
    for (; len >= 16; p += 16, len -= 16)
        lane = _mm_xor_si128(fold128(lane, 4), _mm_loadu_si128((const __m128i *)p));
    uint64_t wide = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(lane));
    wide = __builtin_ia32_crc32di(wide, (uint64_t)_mm_extract_epi64(lane, 1));
    while (len--)
        wide = __builtin_ia32_crc32qi((uint32_t)wide, *p++);
    return (uint32_t)wide;
}
#endif

int fio_crc32c_supported(int kernel)
{
    switch (kernel) {
    case FIO_CRC_AUTO:
    case FIO_CRC_PORTABLE:
        return 1;
#if defined(__x86_64__)
    case FIO_CRC_SSE42:
        return __builtin_cpu_supports("sse4.2");
    case FIO_CRC_FOLD:
        return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq");
#endif
    default:
        return 0;
    }
}

static int best_kernel(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = fio_crc32c_supported(FIO_CRC_FOLD)    ? FIO_CRC_FOLD
                 : fio_crc32c_supported(FIO_CRC_SSE42) ? FIO_CRC_SSE42
                                                       : FIO_CRC_PORTABLE;
    return cached;
}

uint32_t fio_crc32c_kernel(int kernel, uint32_t crc, const void *data, size_t len)
{
    uint32_t state = ~crc;
    switch (kernel == FIO_CRC_AUTO ? best_kernel() : kernel) {
#if defined(__x86_64__)
    case FIO_CRC_FOLD:
        return ~crc_fold(state, data, len);
    case FIO_CRC_SSE42:
        return ~crc_sse42(state, data, len);
#endif
    default:
        return ~crc_software(state, data, len);
    }
}

uint32_t fio_crc32c(uint32_t crc, const void *data, size_t len)
{
    return fio_crc32c_kernel(FIO_CRC_AUTO, crc, data, len);
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

/* Whether the `len` bytes at `data` are followed by their masked CRC-32C. */
static int crc_holds(const uint8_t *data, size_t len)
{
    return masked_crc(data, len) == load_le32(data + len);
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
        if ((verify & FIO_TFRECORD_LENGTHS) && !crc_holds(buf + pos, 8)) {
            error->kind = FIO_FRAME_LENGTH_CRC;
            error->offset = pos;
            break;
        }
        if (length > len - pos - 12 || len - pos - 12 - length < 4) {
            *needed = 16 + length; /* incomplete: the rest comes with the next chunk */
            break;
        }
        const uint8_t *data = buf + pos + 12;
        if ((verify & FIO_TFRECORD_DATA) && !crc_holds(data, length)) {
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

size_t fio_tfrecord_check(const uint8_t *buf, const uint64_t *offsets, const uint64_t *lengths,
                          size_t count)
{
    for (size_t index = 0; index < count; index++) {
        if (!crc_holds(buf + offsets[index], lengths[index]))
            return index;
    }
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

/* The sum of a block's bytes: SSE2's sum of absolute differences against zero
 * adds 16 bytes at a time; elsewhere, eight at a time in 16-bit lanes (64
 * words add at most 64 * 2 * 255 to a lane, which fits). */
#if defined(__x86_64__)
static uint32_t block_sum(const uint8_t *block)
{
    __m128i zero = _mm_setzero_si128(), total = zero;
    for (int i = 0; i < TAR_BLOCK; i += 16)
        total = _mm_add_epi64(
            total, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(block + i)), zero));
    return (uint32_t)(_mm_cvtsi128_si64(total) +
                      _mm_cvtsi128_si64(_mm_unpackhi_epi64(total, total)));
}
#else
static uint32_t block_sum(const uint8_t *block)
{
    const uint64_t low_bytes = 0x00ff00ff00ff00ffull;
    uint64_t lanes = 0;
    for (int i = 0; i < TAR_BLOCK; i += 8) {
        uint64_t word;
        memcpy(&word, block + i, 8);
        lanes += (word & low_bytes) + ((word >> 8) & low_bytes);
    }
    lanes = (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + ((lanes >> 32) & 0xffff) + (lanes >> 48);
    return (uint32_t)lanes;
}
#endif

static int header_checksum_ok(const uint8_t *block)
{
    uint64_t stored;
    if (parse_number(block + 148, 8, &stored))
        return 0;
    /* The checksum field counts as eight spaces. */
    uint32_t field = 0, field_high = 0;
    for (int i = 148; i < 156; i++) {
        field += block[i];
        field_high += block[i] >> 7;
    }
    uint32_t unsigned_sum = block_sum(block) - field + 8 * ' ';
    if (stored == unsigned_sum)
        return 1;
    /* Some old writers summed signed chars (each byte >= 0x80 counts 256 less);
     * accept both, as GNU tar does. */
    long high = -(long)field_high;
    for (int i = 0; i < TAR_BLOCK; i++)
        high += block[i] >> 7;
    return (long)stored == (long)unsigned_sum - 256 * high;
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

int fio_tar_next(const uint8_t *buf, size_t len, fio_tar_member *member, size_t *span,
                 fio_frame_error *error)
{
    size_t cursor = 0;
    uint64_t long_name_offset = 0, pax_path_offset = 0, pax_size = 0;
    uint32_t long_name_length = 0, pax_path_length = 0;
    int has_long_name = 0, has_pax_path = 0, has_pax_size = 0;

    error->kind = FIO_TAR_OK;
    error->offset = 0;
    /* Optional GNU long-name and pax blocks, then the member's own header. */
    for (;;) {
        if (len - cursor < TAR_BLOCK) {
            *span = cursor + TAR_BLOCK;
            return FIO_TAR_CUT_HEADER;
        }
        const uint8_t *block = buf + cursor;
        if (all_zero(block))
            return FIO_TAR_END;
        int kind = 0;
        uint64_t size;
        if (!header_checksum_ok(block))
            kind = FIO_TAR_CHECKSUM;
        else if (parse_number(block + 124, 12, &size))
            kind = FIO_TAR_BAD_NUMBER;
        if (kind) {
            error->kind = kind;
            error->offset = cursor;
            return FIO_TAR_ERROR;
        }
        char type = (char)block[156];
        uint64_t data = cursor + TAR_BLOCK;
        if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
            if (size > len - data || padded(size) > len - data) {
                *span = data + padded(size);
                return FIO_TAR_CUT_HEADER;
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
                return FIO_TAR_ERROR;
            }
            cursor = data + padded(size);
            continue;
        }
        if (has_pax_size)
            size = pax_size;
        member->header_offset = 0;
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
        *span = data + padded(size);
        if (size > len - data || padded(size) > len - data)
            return FIO_TAR_CUT_DATA;
        return FIO_TAR_MEMBER;
    }
}

size_t fio_tar_scan(const uint8_t *buf, size_t len, fio_tar_member *out, size_t max_out,
                    size_t *consumed, size_t *needed, int *at_end, fio_frame_error *error)
{
    size_t pos = 0, count = 0, span = 0;

    *at_end = 0;
    *needed = 0;
    error->kind = FIO_TAR_OK;
    error->offset = 0;
    while (count < max_out) {
        fio_tar_member *member = &out[count];
        int step = fio_tar_next(buf + pos, len - pos, member, &span, error);
        if (step == FIO_TAR_MEMBER) {
            member->header_offset = pos;
            member->data_offset += pos;
            member->name_offset += pos;
            member->prefix_offset += pos;
            count++;
            pos += span;
            continue;
        }
        if (step == FIO_TAR_CUT_HEADER || step == FIO_TAR_CUT_DATA)
            *needed = span;
        else if (step == FIO_TAR_END)
            *at_end = 1;
        else
            error->offset += pos;
        break;
    }
    *consumed = pos;
    return count;
}

/* ---- tf.train.Example ----------------------------------------------------------------- */

typedef struct pb_field {
    uint64_t number;
    int wire;
    uint64_t value;      /* wire type 0 */
    const uint8_t *data; /* wire types 1, 2 and 5 */
    uint64_t length;
} pb_field;

/* At most ten bytes; bits past the 64th are dropped, as protobuf does. */
static int read_varint(const uint8_t **at, const uint8_t *end, uint64_t *value)
{
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*at == end)
            return -1;
        uint8_t byte = *(*at)++;
        result |= (uint64_t)(byte & 0x7f) << shift;
        if (byte < 0x80) {
            *value = result;
            return 0;
        }
    }
    return -1;
}

/* The next field of a message: 1, 0 at its end, or -1 for malformed bytes. */
static int next_field(const uint8_t **at, const uint8_t *end, pb_field *field, const char **what)
{
    uint64_t key;
    if (*at == end)
        return 0;
    if (read_varint(at, end, &key)) {
        *what = "a field's key is cut short or longer than 64 bits";
        return -1;
    }
    field->number = key >> 3;
    field->wire = (int)(key & 7);
    switch (field->wire) {
    case 0:
        if (!read_varint(at, end, &field->value))
            return 1;
        *what = "a varint is cut short or longer than 64 bits";
        return -1;
    case 1:
    case 5:
        field->length = field->wire == 1 ? 8 : 4;
        break;
    case 2:
        if (!read_varint(at, end, &field->length))
            break;
        *what = "a length is cut short or longer than 64 bits";
        return -1;
    default:
        *what = "unsupported wire type (groups are not tf.train.Example fields)";
        return -1;
    }
    if (field->length > (uint64_t)(end - *at)) {
        *what = "a field runs past the end of its message";
        return -1;
    }
    field->data = *at;
    *at += field->length;
    return 1;
}

/* Counts the values of a value list (field 1 of BytesList, FloatList, Int64List). */
static int count_values(int kind, const uint8_t *list, uint64_t length, uint64_t *count,
                        const char **what)
{
    const uint8_t *at = list, *end = list + length;
    pb_field field;
    int rc;
    *count = 0;
    while ((rc = next_field(&at, end, &field, what)) > 0) {
        if (field.number != 1)
            continue;
        if (kind == FIO_FEATURE_BYTES && field.wire == 2) {
            (*count)++;
        } else if (kind == FIO_FEATURE_FLOAT && field.wire == 5) {
            (*count)++;
        } else if (kind == FIO_FEATURE_FLOAT && field.wire == 2) {
            if (field.length % 4) {
                *what = "packed floats are not a whole number of float32 values";
                return -1;
            }
            *count += field.length / 4;
        } else if (kind == FIO_FEATURE_INT64 && field.wire == 0) {
            (*count)++;
        } else if (kind == FIO_FEATURE_INT64 && field.wire == 2) {
            const uint8_t *value = field.data, *values_end = field.data + field.length;
            uint64_t ignored;
            while (value < values_end) {
                if (read_varint(&value, values_end, &ignored)) {
                    *what = "a packed varint is cut short or longer than 64 bits";
                    return -1;
                }
                (*count)++;
            }
        } else {
            *what = "a value has the wrong wire type for its list";
            return -1;
        }
    }
    return rc;
}

/* A Feature: oneof bytes_list = 1, float_list = 2, int64_list = 3 (the first one). */
static int describe_feature(const uint8_t *record, const uint8_t *data, uint64_t length,
                            fio_feature *feature, const char **what)
{
    const uint8_t *at = data, *end = data + length;
    pb_field field;
    int rc;
    while ((rc = next_field(&at, end, &field, what)) > 0) {
        if (field.number < 1 || field.number > 3)
            continue;
        if (field.wire != 2) {
            *what = "a Feature's value list is not a message";
            return -1;
        }
        feature->kind = (int)field.number;
        feature->list_offset = (uint64_t)(field.data - record);
        feature->list_length = field.length;
        return count_values(feature->kind, field.data, field.length, &feature->count, what);
    }
    return rc;
}

int64_t fio_example_features(const uint8_t *record, size_t len, fio_feature *out,
                             size_t max_out, const char **what)
{
    const uint8_t *at = record, *end = record + len;
    pb_field features, entry, part;
    int64_t count = 0;
    int rc;
    while ((rc = next_field(&at, end, &features, what)) > 0) {
        if (features.number != 1) /* Example.features */
            continue;
        if (features.wire != 2) {
            *what = "Example.features is not a message";
            return -1;
        }
        const uint8_t *entries = features.data, *entries_end = features.data + features.length;
        while ((rc = next_field(&entries, entries_end, &entry, what)) > 0) {
            if (entry.number != 1) /* Features.feature, a map entry */
                continue;
            if (entry.wire != 2) {
                *what = "a Features entry is not a message";
                return -1;
            }
            fio_feature feature = {0};
            const uint8_t *value = NULL, *parts = entry.data, *parts_end = entry.data + entry.length;
            uint64_t value_length = 0;
            int named = 0;
            while ((rc = next_field(&parts, parts_end, &part, what)) > 0) {
                if (part.number != 1 && part.number != 2)
                    continue;
                if (part.wire != 2) {
                    *what = "a Features entry's key or value is not length-delimited";
                    return -1;
                }
                if (part.number == 1) {
                    /* No writer gives a key twice; a second one would hide the
                     * first from the UTF-8 check that names get. */
                    if (named++) {
                        *what = "a Features entry gives its key twice";
                        return -1;
                    }
                    feature.name_offset = (uint64_t)(part.data - record);
                    feature.name_length = (uint32_t)part.length;
                } else {
                    value = part.data;
                    value_length = part.length;
                }
            }
            if (rc < 0 || (value && describe_feature(record, value, value_length, &feature, what)))
                return -1;
            if ((size_t)count < max_out)
                out[count] = feature;
            count++;
        }
        if (rc < 0)
            return -1;
    }
    return rc < 0 ? -1 : count;
}

/* The next value (field 1) of a list that count_values has checked. */
static int next_value(const uint8_t **at, const uint8_t *end, pb_field *field)
{
    const char *ignored;
    while (next_field(at, end, field, &ignored) > 0)
        if (field->number == 1)
            return 1;
    return 0;
}

void fio_feature_int64s(const uint8_t *record, const fio_feature *feature, int64_t *values)
{
    const uint8_t *at = record + feature->list_offset, *end = at + feature->list_length;
    pb_field field;
    size_t index = 0;
    while (next_value(&at, end, &field)) {
        if (field.wire == 0) {
            values[index++] = (int64_t)field.value;
            continue;
        }
        const uint8_t *packed = field.data, *packed_end = field.data + field.length;
        uint64_t value;
        while (packed < packed_end && !read_varint(&packed, packed_end, &value))
            values[index++] = (int64_t)value;
    }
}

void fio_feature_floats(const uint8_t *record, const fio_feature *feature, float *values)
{
    const uint8_t *at = record + feature->list_offset, *end = at + feature->list_length;
    pb_field field;
    size_t index = 0;
    while (next_value(&at, end, &field)) {
        memcpy(values + index, field.data, field.length); /* little-endian float32s */
        index += field.length / 4;
    }
}

void fio_feature_bytes(const uint8_t *record, const fio_feature *feature, fio_record *values)
{
    const uint8_t *at = record + feature->list_offset, *end = at + feature->list_length;
    pb_field field;
    size_t index = 0;
    while (next_value(&at, end, &field)) {
        values[index].offset = (uint64_t)(field.data - record);
        values[index].length = field.length;
        index++;
    }
}
