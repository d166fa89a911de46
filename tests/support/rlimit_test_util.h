/* rlimit_test_util.h: what the tests that set RLIMIT_AS in a child need to
 * know: NO_RLIMIT_AS is defined, with the reason, in a build where such a
 * limit cannot be set (AddressSanitizer reserves terabytes of shadow
 * memory), so the test can say why it skips.
 */
#ifndef RLIMIT_TEST_UTIL_H
#define RLIMIT_TEST_UTIL_H

#if defined(__SANITIZE_ADDRESS__)
#define NO_RLIMIT_AS "AddressSanitizer's shadow memory does not fit under RLIMIT_AS"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_RLIMIT_AS "AddressSanitizer's shadow memory does not fit under RLIMIT_AS"
#endif
#endif

#endif
