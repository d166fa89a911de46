/* test_sha256.c: model/format/sha256.c against the FIPS 180-4 example vectors
 * (NIST CSRC "SHA-256" examples and the one-million-'a' vector), for both
 * the portable and the SHA-NI block functions, whole and fed in pieces.
 * Prints the hashing speed (not asserted).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "format/sha256.h"

static const struct {
    const char *msg;
    const char *digest;
} k_vectors[] = {
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
     "rsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
};

static void hex_of(const void *p, size_t n, char out[65])
{
    uint8_t d[32];
    sha256(p, n, d);
    sha256_hex(d, out);
}

static void check_vectors(void)
{
    char hex[65];
    for (size_t i = 0; i < sizeof k_vectors / sizeof k_vectors[0]; i++) {
        hex_of(k_vectors[i].msg, strlen(k_vectors[i].msg), hex);
        assert_string_equal(hex, k_vectors[i].digest);
    }
}

static void check_million_a(void)
{
    const char *want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    char hex[65];
    uint8_t d[32];
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    hex_of(a, 1000000, hex);
    assert_string_equal(hex, want);
    /* the same in uneven pieces (1, 2, 3, ... bytes) */
    sha256_ctx c;
    sha256_init(&c);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step % 200 + 1)
        sha256_update(&c, a + off, off + step > 1000000 ? 1000000 - off : step);
    sha256_final(&c, d);
    sha256_hex(d, hex);
    assert_string_equal(hex, want);
    free(a);
}

static void test_nist_vectors(void **state)
{
    (void)state;
    sha256_force_portable(0);
    check_vectors();
    check_million_a();
}

static void test_nist_vectors_portable(void **state)
{
    (void)state;
    sha256_force_portable(1);
    check_vectors();
    check_million_a();
    sha256_force_portable(0);
}

/* Every length 0..300 split at every point equals the one-call digest, and
 * the two block functions agree. */
static void test_split_points(void **state)
{
    (void)state;
    uint8_t buf[300], whole[32], part[32], port[32];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 7 + 3);
    for (size_t n = 0; n <= 300; n += 1) {
        sha256(buf, n, whole);
        sha256_force_portable(1);
        sha256(buf, n, port);
        sha256_force_portable(0);
        assert_memory_equal(whole, port, 32);
        for (size_t cut = 0; cut <= n; cut += (n > 80 ? 13 : 1)) {
            sha256_ctx c;
            sha256_init(&c);
            sha256_update(&c, buf, cut);
            sha256_update(&c, buf + cut, n - cut);
            sha256_final(&c, part);
            assert_memory_equal(whole, part, 32);
        }
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_speed(void **state)
{
    (void)state;
    size_t n = 16u << 20;
    uint8_t *p = malloc(n), d[32];
    assert_non_null(p);
    memset(p, 0x5a, n);
    for (int portable = 0; portable <= 1; portable++) {
        sha256_force_portable(portable);
        double t = now();
        sha256(p, n, d);
        t = now() - t;
        printf("sha256 %s: %.0f MB/s\n",
               portable ? "portable" : (sha256_uses_shani() ? "SHA-NI" : "portable (no SHA-NI)"),
               (double)n / 1e6 / t);
    }
    sha256_force_portable(0);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nist_vectors),
        cmocka_unit_test(test_nist_vectors_portable),
        cmocka_unit_test(test_split_points),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
