/* features.c: the CPUID/XGETBV check of features.h. */
#include "cpu/features.h"

#include <cpuid.h>

static int detect(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0xe6) != 0xe6) return 0; /* the OS saves SSE, AVX, opmask and zmm state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    unsigned max_sub = a;
    int f = 0;
    if (b & (1u << 16)) f |= CPU_AVX512F;
    if ((b & (1u << 30)) && (b & (1u << 31))) f |= CPU_AVX512BW_VL;
    if (c & (1u << 11)) f |= CPU_AVX512_VNNI;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if (a & (1u << 5)) f |= CPU_AVX512_BF16;
    }
    return f;
}

int cpu_features(void)
{
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
