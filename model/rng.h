/* rng.h: the project's random numbers, all from splitmix64.
 *
 * Everything random in the engine is a pure function of a seed and
 * counters, drawn here: initial weights (rng_normal), data orders and masks
 * (rng_next streams keyed by the seed), and dropout. No generator keeps
 * hidden state, so a run repeats to the bit, and the CPU and a GPU draw the
 * same numbers.
 *
 * Dropout: whether element i of a tensor is kept is a pure function of a
 * 64-bit key and i (splitmix64's finaliser), so a backward pass regenerates
 * the mask instead of storing it. Keys are derived from (seed, step, site):
 * every dropout site of every optimizer step gets its own stream.
 */
#ifndef SM_RNG_H
#define SM_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64's finaliser of z + the golden-ratio increment. */
static inline uint64_t rng_mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next number of the splitmix64 stream whose state is *s. */
static inline uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return rng_mix64(*s);
}

/* A standard normal draw from the stream *s (Box-Muller on two draws). */
static inline double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* x[0, n) = normal(0, stddev) draws from the stream *s, in order. */
static inline void rng_fill_normal(float *x, size_t n, double stddev, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(s) * stddev);
}

/* The key of dropout site `site` (< 4096) in micro-step `step`. */
static inline uint64_t dropout_key(uint64_t seed, uint64_t step, uint32_t site)
{
    return rng_mix64(seed ^ rng_mix64(step * 4096u + site));
}

/* Drop threshold for probability p in [0, 1): element kept when its 32-bit
 * draw is >= the threshold. */
static inline uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

static inline int dropout_keep(uint64_t key, uint64_t i, uint32_t threshold)
{
    return (uint32_t)(rng_mix64(key + i * 0xD1B54A32D192ED03ull) >> 32) >= threshold;
}

#endif
