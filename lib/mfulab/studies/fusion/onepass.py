"""A one-pass CPU kernel for A7's sub-block, h = x + dropout(a), y = LayerNorm(h): the fused
kernel the article describes, written so that each tensor crosses DRAM once.

Inductor's CPU kernel for the same sub-block makes more passes over memory than eager's ATen ops
(``kernels.inductor_tensor_passes``), so on a CPU ``torch.compile`` cannot test the mechanism
"fewer bytes through DRAM, less time". This kernel can: per row, it reads x and a once, draws the
dropout mask from a counter-based hash in registers (no mask tensor), writes h, and normalises the
row while it is still in the core's cache (a row of 4,096 fp32 values is 16 KiB), writing y. Over
DRAM that is 2 tensor reads and 2 tensor writes (each write also reads its line first, as every
kernel here: ``bytes_model.dram_traffic_passes`` counts that), the bytes model's fused minimum,
against eager's 5 passes at p = 0 and 11 with dropout (``norm_fusion.eager_cpu_reads_writes``).

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

SOURCE = r"""
#include <math.h>
#include <stdint.h>

static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void ln_residual_dropout(const float *x, const float *a, const float *w, const float *b,
                         float *h, float *y, int64_t rows, int64_t cols, float p,
                         uint64_t seed, float eps, int threads) {
    const float scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols, *ar = a + r * cols;
        float *hr = h + r * cols, *yr = y + r * cols;
        float sum = 0.0f;
        if (p > 0.0f) {
            #pragma omp simd reduction(+:sum)
            for (int64_t c = 0; c < cols; c++) {
                uint64_t u = splitmix64(seed + (uint64_t)(r * cols + c));
                float v = xr[c] + (u >= threshold ? ar[c] * scale : 0.0f);
                hr[c] = v;
                sum += v;
            }
        } else {
            #pragma omp simd reduction(+:sum)
            for (int64_t c = 0; c < cols; c++) {
                float v = xr[c] + ar[c];
                hr[c] = v;
                sum += v;
            }
        }
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
            yr[c] = (hr[c] - mean) * rstd * w[c] + b[c];
        }
    }
}
"""

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-x", "c")  # then the source on stdin
EPS = 1e-5  # torch.nn.functional.layer_norm's default


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
    so.ln_residual_dropout.restype = None
    so.ln_residual_dropout.argtypes = [ctypes.c_void_p] * 6 + [
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_float,
        ctypes.c_uint64,
        ctypes.c_float,
        ctypes.c_int,
    ]
    return so, None


def build(device: str, dtype: str, cache_dir: Path | None = None):
    """``(fn, None)`` with ``fn(x, a, w, b, p) -> (h, y)`` like ``kernels.ln_eager``, or
    ``(None, why)`` where the kernel cannot run here. Every call draws a fresh dropout mask: the
    hash's counter runs on across calls (an offset of rows · cols a call), from a base taken
    from torch's generator (``torch.manual_seed`` makes it repeat)."""
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
        so.ln_residual_dropout(
            x.data_ptr(), a.data_ptr(), w.data_ptr(), b.data_ptr(), h.data_ptr(), y.data_ptr(),
            rows, cols, float(p), seed, EPS, torch.get_num_threads(),
        )  # fmt: skip
        return h, y

    return fn, None
