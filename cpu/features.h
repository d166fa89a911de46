/* features.h: which AVX-512 extensions this CPU and OS run, found once
 * (CPUID for the instructions, XGETBV for the OS saving the opmask and zmm
 * state) and cached. The kernels with target attributes (gemm_*.c,
 * softmax.c) ask here before running their AVX-512 code. Private to
 * cpu/.
 */
#ifndef SM_CPU_FEATURES_H
#define SM_CPU_FEATURES_H

enum {
    CPU_AVX512F = 1 << 0,
    CPU_AVX512BW_VL = 1 << 1, /* AVX512BW and AVX512VL, both */
    CPU_AVX512_VNNI = 1 << 2,
    CPU_AVX512_BF16 = 1 << 3,
};

/* The CPU_* bits this CPU and OS have (0 when the OS does not save zmm). */
int cpu_features(void);

/* 1 when every bit of want is present. */
static inline int cpu_has(int want)
{
    return (cpu_features() & want) == want;
}

#endif
