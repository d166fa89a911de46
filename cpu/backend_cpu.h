/* backend_cpu.h: how to make the CPU backend, the reference implementation of
 * model/core/backend.h (backend_cpu.c and its kernels), and the public header of
 * cpu/.
 *
 * cpu/ holds the CPU backend and its kernels; model code reaches it only
 * through the backend table (model/core/backend.h) and never includes a header
 * of cpu/. The extension creates it through this header (runtime/device.c), as
 * it creates CUDA ones through the plugin's create export; tests and
 * benchmarks create them too. Every other header of cpu/ is private to it
 * (tests and benchmarks may include them). scripts/check-layout.sh checks
 * the rule; cpu/README.md lists the files.
 */
#ifndef SM_BACKEND_CPU_H
#define SM_BACKEND_CPU_H

#include "core/backend.h"

/* The CPU backend; threads <= 0 means all the cores this process may run on
 * (tp_default_threads). Its ops split their work across thread_pool.h. */
int backend_cpu_create(int threads, backend **out, char *err);
/* The threads a CPU backend splits its ops over (its lanes()). */
int backend_cpu_threads(const backend *be);
/* Threads worth using on a CPU backend for a product of `macs`
 * multiply-adds: 1 for small ones, else all of the backend's. */
int backend_cpu_threads_for(const backend *be, double macs);
/* 1 when this CPU computes in precision `name`: auto and fp32 always, bf16
 * with AVX512-BF16, int8 with AVX512-VNNI; 0 otherwise. */
int backend_cpu_precision_ok(const char *name);
/* 1 when this CPU runs packed weights of `kind` (backend_pack_kind) with
 * its own instructions: BF16 with AVX512-BF16, INT8 with AVX512-VNNI, F32
 * with AVX-512F; 0 when the CPU backend runs that kind in plain C (correct,
 * slow) or kind is none of them. */
int backend_cpu_pack_native(int kind);
/* 1 when FP32 inference on a CPU backend should run its weights packed
 * once (pack_weight BACKEND_PACK_F32, linear_packed) rather than linear
 * (OpenBLAS sgemm): on a CPU with AVX-512F (backend_cpu_pack_native: faster
 * than sgemm on the built-in model's shapes, level on BERT-base's). The
 * environment variable SENTIMENT_FP32_PACKED overrides that: 0 selects
 * linear, 1 the packed weights (on any CPU; without AVX-512F the packed
 * product runs in plain C, slowly). */
int backend_cpu_fp32_packed(void);
/* The packed kind a CPU backend in precision auto runs a model's linear
 * layers with (its linear_pack_kind): INT8 where this CPU has AVX512-VNNI
 * and int8_ok (the model's INT8 labels were checked), else packed FP32
 * where backend_cpu_fp32_packed says so, else 0 (FP32 through linear). */
int backend_cpu_auto_pack_kind(int int8_ok);
/* The BLAS the CPU backend uses, loaded first ("OpenBLAS 0.3.21 (...)", or
 * why it is not loaded). */
const char *backend_cpu_blas(void);

#endif
