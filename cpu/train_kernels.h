/* train_kernels.h: vectorised loops the CPU training ops share
 * (train_ops.c, attention_train_ops.c), and the functions that
 * fill the CPU backend's training ops. Private to cpu/.
 *
 * Each is compiled for several instruction sets with target_clones and picked
 * at run time; x86-64-v4 (AVX-512 with DQ) is the set whose 64-bit multiplies
 * let the dropout hash vectorise. Results depend only on the inputs and the
 * instruction set picked, never on threads.
 */
#ifndef SM_CPU_TRAIN_KERNELS_H
#define SM_CPU_TRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* out[i] = in[i] * inv when element base + i of the stream `key` is kept
 * (dropout_keep), else 0; i in [0, n). out may alias in. */
void cpu_dropout_span(float *out, const float *in, size_t n, uint64_t key, uint64_t base,
                      uint32_t threshold, float inv);

struct backend;
/* Fill a CPU backend's training ops (train_ops.c), which fills the
 * attention ops (attention_train_ops.c) and the pretraining ops
 * (mlm_ops.c). */
void backend_cpu_init_train_ops(struct backend *be);
void backend_cpu_init_attn_train_ops(struct backend *be);
void backend_cpu_init_mlm_ops(struct backend *be);

#endif
