/* attention.h: one (sequence, head) of inference attention on the CPU
 * with an AVX-512F kernel (attention.c; its products in BF16:
 * attention_bf16.c): scores, the masked row softmax
 * (softmax.h) and the weighted sum of the values, with no library call
 * and no copy of the inputs but one of the keys. backend_cpu.c runs it
 * for every (sequence, head) and falls back to its two BLAS products where
 * it declines. Private to cpu/.
 */
#ifndef SM_CPU_ATTENTION_H
#define SM_CPU_ATTENTION_H

/* Attention of one head over the first len of T rows: q, k and v point at
 * the head's first query, key and value (row stride ldqkv floats), d
 * floats each; att gets the len x len probabilities (row stride T, the
 * columns len .. T-1 zero: the backend's attention slot hands them back,
 * core/backend.h); out gets
 * the len x d result (row stride ldo) and zeros in rows len .. T-1. 1 when
 * done; 0, with nothing written, where this CPU lacks AVX-512F, d is not
 * 16, 32, 48 or 64, or memory for the keys' copy is short. */
int cpu_attention_head(float *out, int ldo, float *att, const float *q, const float *k,
                       const float *v, int ldqkv, int len, int T, int d, float scale);

/* The same for the first `rows` query rows only (1 <= rows <= len), each
 * with the bits cpu_attention_head gives it: att gets their rows of
 * probabilities, out their rows of results, and nothing else is written
 * (an inference pass that reads only each sequence's [CLS] row asks for
 * one). 0 where cpu_attention_head would be, or rows is out of range. */
int cpu_attention_head_rows(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale,
                            int rows);

/* The same with the scores' and the values' products in BF16 (FP32 sums;
 * attention_bf16.c), the softmax and att in FP32: the attention of a model
 * whose linear layers run packed BF16 or INT8 weights. 0, with nothing
 * written, where this CPU lacks AVX512-BF16 (or AVX-512BW/VL), d is not
 * 16, 32, 48 or 64, or memory for the rounded copies is short. */
int cpu_attention_head_bf16(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale);

/* cpu_attention_head_bf16 for the first `rows` query rows, as
 * cpu_attention_head_rows. */
int cpu_attention_head_bf16_rows(float *out, int ldo, float *att, const float *q, const float *k,
                                 const float *v, int ldqkv, int len, int T, int d, float scale,
                                 int rows);

#endif
