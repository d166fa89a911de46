/* kernel_util.cuh: loop shapes, warp reductions and the heads layout's
 * index (head_index) shared by the kernels.
 *
 * Elementwise kernels are grid-stride loops over size_t indices with grids
 * of at most 2^20 blocks (grid_for); row kernels give one warp to a row,
 * WARPS rows per block, also grid-striding (row_grid). */
#ifndef SM_KERNEL_UTIL_CUH
#define SM_KERNEL_UTIL_CUH

#define WARPS 8 /* rows per 256-thread block in the row kernels */

/* Every kernel launch: LAUNCH_KERNEL(kernel, grid, block, shared bytes,
 * stream, arguments...). Under nvcc it is the triple-chevron launch; under
 * the CPU emulator of the tests (tests/gpu/cuda_emu, which defines
 * SM_CUDA_EMU) it queues the grid on the emulated stream. */
#ifdef SM_CUDA_EMU
#define LAUNCH_KERNEL(kernel, grid, block, smem, stream, ...) \
    sm_emu_launch(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__)
#else
#define LAUNCH_KERNEL(kernel, grid, block, smem, stream, ...) \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

#define GRID_STRIDE(i, n)                                                   \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

/* Rows handled by this warp: grid-strided, the same for every lane, so the
 * warp's shuffles always see all 32 lanes. */
#define WARP_ROWS(r, R)                                                                \
    for (long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); \
         r < (long long)(R); r += (long long)gridDim.x * (blockDim.x >> 5))

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Element i of a (B,T,C) tensor, C = H x d: its index in the same tensor
 * split by heads, (B,H,T,d); its row's b and t in *b and *t. */
__device__ __forceinline__ size_t head_index(size_t i, int T, int H, int d, size_t *b, size_t *t)
{
    size_t C = (size_t)H * d, bt = i / C;
    int hc = (int)(i - bt * C), h = hc / d, e = hc - h * d;
    *b = bt / (size_t)T;
    *t = bt - *b * (size_t)T;
    return ((*b * H + h) * T + *t) * d + e;
}

/* lengths[b] clamped to [1, T] as the CPU does; T when lengths is NULL. */
__device__ __forceinline__ int clamp_len(const int *lengths, int b, int T)
{
    if (!lengths) return T;
    int len = lengths[b];
    return len < 1 ? 1 : (len > T ? T : len);
}

static inline unsigned row_grid(long long rows)
{
    long long b = (rows + WARPS - 1) / WARPS;
    return b > (1 << 20) ? (1u << 20) : (unsigned)b;
}

#endif
