"""The C source of A7's hand-written kernels (``onepass``): the fused sub-block in one pass over
memory, and its unfused twins in two passes (eager's add, then LayerNorm) and in three (the
article's dropout, residual add and LayerNorm), all drawing dropout's mask from the same
counter-based hash, with ordinary or streaming stores."""

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* the vector width of the streaming (non-temporal) stores this build makes; 0: plain stores */
int streaming_store_bits(void) {
#if defined(__AVX512F__)
    return 512;
#elif defined(__AVX__)
    return 256;
#else
    return 0;
#endif
}

/* a row from the thread's buffer to memory: with streaming (non-temporal) stores, bypassing the
   cache (no read of the line first), where asked and the vector unit and the alignment allow;
   a plain copy, whose every line is read before it is written, otherwise */
static inline int store_row(float *dst, const float *src, int64_t n, int streaming) {
#if defined(__AVX512F__)
    if (streaming && (uintptr_t)dst % 64 == 0 && n % 16 == 0) {
        for (int64_t c = 0; c < n; c += 16) _mm512_stream_ps(dst + c, _mm512_loadu_ps(src + c));
        return 1;
    }
#elif defined(__AVX__)
    if (streaming && (uintptr_t)dst % 32 == 0 && n % 8 == 0) {
        for (int64_t c = 0; c < n; c += 8) _mm256_stream_ps(dst + c, _mm256_loadu_ps(src + c));
        return 1;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof(float));
    return 0;
}

/* two row buffers of the thread, 1088 B past a page boundary: rows of x and a start on one
   (torch's large tensors are page-aligned, rows of 1024 floats are 4 KiB), and a buffer at a
   malloc-chosen offset could alias them modulo 4 KiB, which stalls the loads behind the stores by
   a different amount in every process; free(*raw) when done */
static float *row_buffers(int64_t cols, char **raw) {
    const size_t skew = 1088, row_bytes = (size_t)cols * sizeof(float);
    *raw = (char *)aligned_alloc(4096, ((2 * (row_bytes + skew) + 4095) / 4096 + 1) * 4096);
    return (float *)(*raw + skew);
}

static inline float residual_dropout_row(const float *xr, const float *ar, float *hb, int64_t cols,
                                         float p, float scale, uint64_t threshold, uint64_t first) {
    float sum = 0.0f;
    if (p > 0.0f) {
        #pragma omp simd reduction(+:sum)
        for (int64_t c = 0; c < cols; c++) {
            uint64_t u = splitmix64(first + (uint64_t)c);
            float v = xr[c] + (u >= threshold ? ar[c] * scale : 0.0f);
            hb[c] = v;
            sum += v;
        }
    } else {
        #pragma omp simd reduction(+:sum)
        for (int64_t c = 0; c < cols; c++) {
            float v = xr[c] + ar[c];
            hb[c] = v;
            sum += v;
        }
    }
    return sum;
}

/* y's row from h's (in the thread's cache), its sum given */
static inline void layer_norm_row(const float *hr, float sum, const float *w, const float *b, float *yb,
                                  int64_t cols, float eps) {
    const float mean = sum / (float)cols;
    float sq = 0.0f;
    #pragma omp simd reduction(+:sq)
    for (int64_t c = 0; c < cols; c++) {
        float d = hr[c] - mean;
        sq += d * d;
    }
    const float rstd = 1.0f / sqrtf(sq / (float)cols + eps);
    #pragma omp simd
    for (int64_t c = 0; c < cols; c++) {
        yb[c] = (hr[c] - mean) * rstd * w[c] + b[c];
    }
}

/* the streamed rows this thread stored are visible before anyone reads them (a no-op without them) */
static inline void stream_fence(void) {
#if defined(__AVX__)
    _mm_sfence();
#endif
}

/* y = LayerNorm(h) over every row, h complete in memory: the unfused kernels' last pass, called
   inside their parallel region (an orphaned omp for, ending in its barrier); returns this thread's
   row stores that streamed */
static int64_t layer_norm_pass(const float *h, const float *w, const float *b, float *y, float *yb,
                               int64_t rows, int64_t cols, float eps, int streaming) {
    int64_t streamed = 0;
    #pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *hr = h + r * cols;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int64_t c = 0; c < cols; c++) sum += hr[c];
        layer_norm_row(hr, sum, w, b, yb, cols, eps);
        streamed += store_row(y + r * cols, yb, cols, streaming);
    }
    return streamed;
}

/* the fused sub-block, one pass; returns the row stores (h's and y's) that streamed */
int64_t ln_residual_dropout(const float *x, const float *a, const float *w, const float *b,
                            float *h, float *y, int64_t rows, int64_t cols, float p,
                            uint64_t seed, float eps, int streaming, int threads) {
    const float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    int64_t streamed = 0;
    #pragma omp parallel num_threads(threads) reduction(+:streamed)
    {
        /* the row lives in the thread's cache: h and y are built here, then stored */
        char *raw;
        float *hb = row_buffers(cols, &raw), *yb = hb + cols + 1088 / sizeof(float);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            float sum = residual_dropout_row(x + r * cols, a + r * cols, hb, cols, p, scale, threshold,
                                             seed + (uint64_t)(r * cols));
            layer_norm_row(hb, sum, w, b, yb, cols, eps);
            streamed += store_row(h + r * cols, hb, cols, streaming);
            streamed += store_row(y + r * cols, yb, cols, streaming);
        }
        stream_fence(); /* the streamed lines are visible before the call returns */
        free(raw);
    }
    return streamed;
}

/* the same sub-block unfused, as eager runs it: h = x + dropout(a) over every row, then y =
   LayerNorm(h) over every row, h crossing memory between the two; returns the row stores (h's and
   y's) that streamed */
int64_t ln_residual_dropout_two_pass(const float *x, const float *a, const float *w, const float *b,
                                     float *h, float *y, int64_t rows, int64_t cols, float p,
                                     uint64_t seed, float eps, int streaming, int threads) {
    const float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    int64_t streamed = 0;
    #pragma omp parallel num_threads(threads) reduction(+:streamed)
    {
        char *raw;
        float *hb = row_buffers(cols, &raw), *yb = hb + cols + 1088 / sizeof(float);
        #pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            residual_dropout_row(x + r * cols, a + r * cols, hb, cols, p, scale, threshold,
                                 seed + (uint64_t)(r * cols));
            streamed += store_row(h + r * cols, hb, cols, streaming);
        }
        stream_fence(); /* this thread's streamed rows of h are visible ... */
        #pragma omp barrier /* ... before any thread reads h */
        streamed += layer_norm_pass(h, w, b, y, yb, rows, cols, eps, streaming);
        stream_fence();
        free(raw);
    }
    return streamed;
}

/* the sub-block as the article's three kernels: d = dropout(a), h = x + d, y = LayerNorm(h), each
   a pass over every row, d and h crossing memory between them; the mask is the one-pass kernel's
   (the same hash of the same counter); returns the row stores (d's, h's and y's) that streamed */
int64_t ln_residual_dropout_three_pass(const float *x, const float *a, const float *w, const float *b,
                                       float *h, float *y, float *d, int64_t rows, int64_t cols, float p,
                                       uint64_t seed, float eps, int streaming, int threads) {
    const float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    int64_t streamed = 0;
    #pragma omp parallel num_threads(threads) reduction(+:streamed)
    {
        char *raw;
        float *hb = row_buffers(cols, &raw), *yb = hb + cols + 1088 / sizeof(float);
        #pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            const float *ar = a + r * cols;
            const uint64_t first = seed + (uint64_t)(r * cols);
            if (p > 0.0f) {
                #pragma omp simd
                for (int64_t c = 0; c < cols; c++) {
                    uint64_t u = splitmix64(first + (uint64_t)c);
                    hb[c] = u >= threshold ? ar[c] * scale : 0.0f;
                }
            } else {
                memcpy(hb, ar, (size_t)cols * sizeof(float));
            }
            streamed += store_row(d + r * cols, hb, cols, streaming);
        }
        stream_fence();
        #pragma omp barrier /* d is complete before any thread adds it */
        #pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * cols, *dr = d + r * cols;
            #pragma omp simd
            for (int64_t c = 0; c < cols; c++) hb[c] = xr[c] + dr[c];
            streamed += store_row(h + r * cols, hb, cols, streaming);
        }
        stream_fence();
        #pragma omp barrier /* h is complete before any thread normalises it */
        streamed += layer_norm_pass(h, w, b, y, yb, rows, cols, eps, streaming);
        stream_fence();
        free(raw);
    }
    return streamed;
}
"""
