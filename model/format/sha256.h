/* sha256.h: SHA-256 (FIPS 180-4), for the identity of stored model bytes.
 *
 * Portable C; on an x86-64 CPU with the SHA extensions (SHA-NI) the block
 * function is chosen at run time (about 4x faster). Streaming: init, any
 * number of updates, final. Knows no SQLite.
 */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;  /* message length so far */
    uint8_t buf[64]; /* a partial block */
    size_t n;        /* bytes in buf */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_DIGEST_LEN]);
/* One call: the digest of len bytes. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);
/* 64 lower-case hex digits and a NUL. */
void sha256_hex(const uint8_t d[SHA256_DIGEST_LEN], char out[SHA256_HEX_LEN + 1]);
/* 1 when the SHA-NI block function is in use (for tests and benchmarks);
 * sha256_force_portable(1) turns it off (tests compare the two). */
int sha256_uses_shani(void);
void sha256_force_portable(int on);

#endif
