/* Fused float32 kernels for small-batch CPU inference (see cpu_kernels.py, which builds and loads this).
 *
 * At the 64 rows of a denoising step, PyTorch's RMSNorm is about ten kernels and QK-norm + rotary
 * embedding about fifteen; each costs nearly as much at 64 rows as at 256. These do the same
 * arithmetic in one pass over the data, single-threaded (they are only used on small tensors).
 *
 * Layouts: every row is contiguous; rows (and heads) are addressed by strides in elements.
 */
#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__)
/* One binary for any x86-64 CPU: the loader picks the widest vector ISA the CPU has (an ELF ifunc). */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

static inline float inv_rms(const float *x, int64_t n, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

/* y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.  x: rows of n with row stride xs; y contiguous. */
CLONES void rms_norm_f32(const float *x, int64_t rows, int64_t n, int64_t xs, const float *w, float eps,
                         float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * xs;
        float *yr = y + r * n;
        const float s = inv_rms(xr, n, eps);
#pragma omp simd
        for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * s * w[i];
    }
}

/* QK-norm then rotary embedding, per head vector, rotate-half layout.
 * x: (B, L, N, D), strides (xs_b, xs_l, D, 1); w: (D,); cos, ssin: (B or 1, L, D) with batch stride
 * cs_b (0 to broadcast) and row stride D; ssin is the signed sin of rope.rotation_table.
 * y: (B, L, N, D) contiguous.  With h = D/2 and u = rmsnorm(x) * w:
 *   y[i]     = u[i] * cos[i]         + u[i + h] * ssin[i]
 *   y[i + h] = u[i + h] * cos[i + h] + u[i] * ssin[i + h]          for i < h. */
CLONES void qk_norm_rope_f32(const float *x, int64_t B, int64_t L, int64_t N, int64_t D, int64_t xs_b,
                             int64_t xs_l, const float *w, float eps, const float *cos, const float *ssin,
                             int64_t cs_b, float *y) {
    const int64_t h = D / 2;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t l = 0; l < L; l++) {
            const float *c = cos + b * cs_b + l * D, *s = ssin + b * cs_b + l * D;
            for (int64_t n = 0; n < N; n++) {
                const float *xr = x + b * xs_b + l * xs_l + n * D;
                float *yr = y + ((b * L + l) * N + n) * D;
                const float r = inv_rms(xr, D, eps);
#pragma omp simd
                for (int64_t i = 0; i < h; i++) {
                    const float u1 = xr[i] * r * w[i], u2 = xr[i + h] * r * w[i + h];
                    yr[i] = u1 * c[i] + u2 * s[i];
                    yr[i + h] = u2 * c[i + h] + u1 * s[i + h];
                }
            }
        }
    }
}
