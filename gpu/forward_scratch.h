/* forward_scratch.h: how much device scratch the CUDA backend may grow to
 * in one forward pass (its forward_scratch_bytes slot), as one formula that
 * the plugin and the tests' stand-in for it (tests/support/fake_gpu.c) share.
 * Pure C.
 *
 * The scratch that grows on demand (growbuf, cuda_ctx.h), each with its
 * 25% headroom: BF16 copies of a product's operands (the larger of an FFN
 * activation N x F and the attention scores B x H x T x T, and of a weight),
 * per-head copies of q, k, v and the output (4 x N x C floats); plus 32 MiB
 * for cuBLAS's workspace. An estimate, on the high side.
 */
#ifndef SM_FORWARD_SCRATCH_H
#define SM_FORWARD_SCRATCH_H

#include <stddef.h>

static inline size_t cuda_forward_scratch_bytes(int batch, int seq, int hidden, int ffn, int heads)
{
    double B = batch, T = seq, N = B * T, C = hidden, F = ffn, H = heads;
    double scores = B * H * T * T;
    double a = N * F > scores ? N * F : scores;
    double b = F * C > 3 * C * C ? F * C : 3 * C * C;
    if (N * C > b) b = N * C;
    double bytes = 1.25 * (2.0 * a + 2.0 * b + 4.0 * 4 * N * C) + 32.0 * 1048576;
    return bytes < 1e18 ? (size_t)bytes : (size_t)1e18;
}

#endif
