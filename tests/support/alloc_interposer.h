/* alloc_interposer.h: replaces malloc, calloc, realloc, memalign,
 * aligned_alloc, posix_memalign and free for the whole test process,
 * forwarding to glibc's __libc_* functions, so that a test can make one
 * chosen allocation fail (tests/ext/test_c_alloc_faults.c,
 * tests/model/test_model_clone.c).
 *
 * Include once, in a test's .c file, after defining
 *     static int should_fail(void);   (1: this allocation fails)
 * and not under NO_INTERPOSE (sanitizer builds, whose allocator must not be
 * replaced). A failed allocation sets errno to ENOMEM and returns NULL.
 */
#ifndef ALLOC_INTERPOSER_H
#define ALLOC_INTERPOSER_H

#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define EXPORT __attribute__((visibility("default")))

static int should_fail(void);

EXPORT void *malloc(size_t n)
{
    if (should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

EXPORT void *calloc(size_t a, size_t b)
{
    if (should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(a, b);
}

EXPORT void *realloc(void *p, size_t n)
{
    if (p && n == 0) return __libc_realloc(p, n); /* a free, not an allocation */
    if (should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
    if (should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_memalign(align, n);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return memalign(align, n);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void free(void *p)
{
    __libc_free(p);
}

#endif
