"""A one-pass CPU kernel for A7's sub-block, h = x + dropout(a), y = LayerNorm(h): the fused
kernel the article describes, written so that each tensor crosses DRAM once.

Inductor's CPU kernel for the same sub-block makes more passes over memory than eager's ATen ops
(``kernels.inductor_tensor_passes``), so on a CPU ``torch.compile`` cannot test the mechanism
"fewer bytes through DRAM, less time". This kernel can: per row, it reads x and a once, draws the
dropout mask from a counter-based hash in registers (no mask tensor), builds h and y in a
buffer of its thread (a row of 4,096 fp32 values is 16 KiB: it stays in the core's cache for the
row's three traversals) and writes both out with streaming (non-temporal) stores, which do not
read a line before writing it. Over DRAM that is 2 tensor reads and 2 tensor writes and nothing
else: the bytes model's fused minimum, against eager's 5 passes at p = 0 and 11 with dropout
(``norm_fusion.eager_cpu_reads_writes``), whose every write also reads its line first
(``bytes_model.dram_traffic_passes``). Where the build has no streaming store (no AVX) or a row is
not aligned, the row is written with plain stores and its lines are read first like eager's; the
call reports how many rows it streamed.

The source is C (OpenMP over rows), compiled once per machine with the system's C compiler into a
per-user cache folder and called through ``ctypes`` on the tensors' memory; ``build()`` returns None, with
the reason, where there is no compiler, no OpenMP, or the tensors are not contiguous fp32 on a CPU.
Its dropout draws other random numbers than ATen's: the correctness gate at p > 0 is the dropped
fraction, as for ``torch.compile``'s kernel.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

READS_WRITES = (2, 2)  # x, a read; h, y written: each row's second and third traversal hit the cache
KERNEL_COUNT = {
    "count": 1,
    "names": ["ln_residual_dropout (C, OpenMP)"],
    "small": [],
    "what": "one C call over the tensor (the hand-written one-pass kernel)",
}
# A7's mechanism with its controls, a 2 x 2 of the same C code: impl -> (fused, streaming stores).
# Fusion's own effect is a fused kernel over the unfused one with the same stores; the stores'
# effect, the same passes with and without streaming stores.
VARIANTS = {
    "onepass": (True, True),  # the fused kernel: 2 reads + 2 writes, no line read before a write
    "onepass_plain": (True, False),  # the same pass with ordinary stores: each write reads its line
    "twopass_nt": (False, True),  # eager's passes (add, then LayerNorm: 3 + 2), streaming stores
    "twopass_plain": (False, False),  # eager's passes and ordinary stores: ATen eager's C twin
}
CONTROLS = tuple(v for v in VARIANTS if v != "onepass")  # timed in DRAM at p = 0 only


def reads_writes(impl: str) -> tuple[int, int]:
    """Tensor reads and writes of a C variant: fused, x and a in, h and y out; unfused, the add
    (x, a -> h) then LayerNorm (h -> y), h crossing memory between them (eager's 3 + 2)."""
    fused, _ = VARIANTS[impl]
    return READS_WRITES if fused else (3, 2)


def kernel_count(impl: str) -> dict:
    """What the profiler would see of a C variant: one call (fused) or two passes in one call."""
    fused, streaming = VARIANTS[impl]
    stores = "streaming" if streaming else "ordinary"
    if fused:
        return {**KERNEL_COUNT, "what": f"one C pass over the tensor ({stores} stores)"}
    return {
        "count": 2,
        "names": ["residual_dropout (C)", "layer_norm (C)"],
        "small": [],
        "what": f"two C passes over the tensor, as eager's add and layer_norm ({stores} stores)",
    }


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
#if defined(__AVX__)
        _mm_sfence(); /* the streamed lines are visible before the call returns */
#endif
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
#if defined(__AVX__)
        _mm_sfence(); /* this thread's streamed rows of h are visible ... */
#endif
        #pragma omp barrier /* ... before any thread reads h */
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *hr = h + r * cols;
            float sum = 0.0f;
            #pragma omp simd reduction(+:sum)
            for (int64_t c = 0; c < cols; c++) sum += hr[c];
            layer_norm_row(hr, sum, w, b, yb, cols, eps);
            streamed += store_row(y + r * cols, yb, cols, streaming);
        }
#if defined(__AVX__)
        _mm_sfence();
#endif
        free(raw);
    }
    return streamed;
}
"""

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-x", "c")  # then the source on stdin
EPS = 1e-5  # torch.nn.functional.layer_norm's default


def kernel_source(fused: bool = True) -> str:
    """The C function of the fused sub-block (or of its unfused twin), from :data:`SOURCE`: what the
    one-pass kernel does per row, for the notebook to show."""
    start = "/* the fused sub-block" if fused else "/* the same sub-block unfused"
    end = "/* the same sub-block unfused" if fused else None
    text = SOURCE[SOURCE.index(start) :]
    return (text[: text.index(end)] if end else text).strip()


def write_allocate(records, impl: str) -> bool:
    """Whether a kernel's writes read their lines first: every kernel of the sub-block but a C
    variant with streaming stores that streamed all its rows (the records' ``streamed_share`` per
    variant; older records: ``onepass_streamed_share``)."""
    ln = records["ln"]
    shares = ln.get("streamed_share") or {"onepass": ln.get("onepass_streamed_share")}
    return not (impl in VARIANTS and VARIANTS[impl][1] and (shares.get(impl) or 0) >= 1)


def compiler() -> str | None:
    """The C compiler: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    return os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def cache_folder() -> Path:
    """Per user (a library loaded from a shared /tmp could be anyone's): ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``mfulab/onepass``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mfulab" / "onepass"


def _cache_key(cc: str) -> str:
    """The source, the flags, the compiler's version and this CPU: ``-march=native`` code built on
    one host must not load on another (a home folder shared over a cluster)."""
    from mfulab.measure.host import cpu_model

    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    flags = ""
    if Path("/proc/cpuinfo").exists():
        flags = next(
            (ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), ""
        )
    text = "\n".join([SOURCE, " ".join(FLAGS), cc, version, cpu_model(), flags])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _library(cache_dir: Path | None = None) -> tuple[ctypes.CDLL | None, str | None]:
    cc = compiler()
    if cc is None:
        return None, "no C compiler on the PATH (set CC)"
    try:
        folder = cache_dir or cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        lib = folder / f"ln_onepass-{_cache_key(cc)}.so"
        if not lib.exists():
            # the source on stdin and a per-process output: concurrent builds never share a file
            tmp = folder / f".{lib.name}.{os.getpid()}"
            done = subprocess.run(
                [cc, *FLAGS, "-o", str(tmp), "-", "-lm"], input=SOURCE, capture_output=True, text=True
            )
            if done.returncode != 0:
                return None, f"{cc} failed: {done.stderr.strip()[:200]}"
            if not hasattr(ctypes.CDLL(str(tmp)), "ln_residual_dropout"):
                tmp.unlink(missing_ok=True)
                return None, f"{cc} built a library without the kernel"
            tmp.replace(lib)  # atomic: a concurrent build never loads a half-written library
        so = ctypes.CDLL(str(lib))
    except OSError as err:  # a missing compiler named by CC, a folder we may not write
        return None, f"the one-pass kernel could not be built: {err}"
    so.streaming_store_bits.restype = ctypes.c_int
    for kernel in (so.ln_residual_dropout, so.ln_residual_dropout_two_pass):
        kernel.restype = ctypes.c_int64
        kernel.argtypes = [ctypes.c_void_p] * 6 + [
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_float,
            ctypes.c_uint64,
            ctypes.c_float,
            ctypes.c_int,  # streaming stores
            ctypes.c_int,  # threads
        ]
    return so, None


def build(device: str, dtype: str, cache_dir: Path | None = None, impl: str = "onepass"):
    """``(fn, None)`` with ``fn(x, a, w, b, p) -> (h, y)`` like ``kernels.ln_eager``, or
    ``(None, why)`` where the kernel cannot run here; ``impl`` one of :data:`VARIANTS` (the fused
    kernel with streaming stores by default). Every call draws a fresh dropout mask: the
    hash's counter runs on across calls (an offset of rows · cols a call), from a base taken
    from torch's generator (``torch.manual_seed`` makes it repeat). ``fn.streamed_share`` is the
    last call's share of row stores that bypassed the cache."""
    if impl not in VARIANTS:
        raise ValueError(f"impl must be one of {sorted(VARIANTS)}, got {impl!r}")
    if device != "cpu" or dtype != "fp32":
        return None, f"a CPU fp32 kernel ({device}, {dtype} here)"
    so, why = _library(cache_dir)
    if so is None:
        return None, why
    import torch

    counter = [int(torch.randint(0, 2**62, (1,)).item())]

    def fn(x, a, w, b, p: float):
        if x.dim() != 2 or a.shape != x.shape or w.shape != (x.shape[1],) or b.shape != (x.shape[1],):
            raise ValueError(
                f"the one-pass kernel takes x, a of one [rows, cols] shape and w, b of [cols]: "
                f"got {tuple(x.shape)}, {tuple(a.shape)}, {tuple(w.shape)}, {tuple(b.shape)}"
            )
        if not all(
            t.device.type == "cpu" and t.is_contiguous() and t.dtype == torch.float32 for t in (x, a, w, b)
        ):
            raise ValueError("the one-pass kernel takes contiguous fp32 CPU tensors")
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout p must be in [0, 1), got {p!r}")
        h, y = torch.empty_like(x), torch.empty_like(x)
        rows, cols = x.shape
        seed = counter[0]
        counter[0] = (seed + rows * cols) % 2**64  # the next call's elements draw new numbers
        streamed = kernel(
            x.data_ptr(), a.data_ptr(), w.data_ptr(), b.data_ptr(), h.data_ptr(), y.data_ptr(),
            rows, cols, float(p), seed, EPS, int(streaming), torch.get_num_threads(),
        )  # fmt: skip
        fn.streamed_share = int(streamed) / (2 * rows) if rows else 0.0  # h's and y's row stores
        return h, y

    fused, streaming = VARIANTS[impl]
    kernel = so.ln_residual_dropout if fused else so.ln_residual_dropout_two_pass
    fn.streaming_store_bits = int(so.streaming_store_bits()) if streaming else 0
    fn.streamed_share = 0.0
    return fn, None
