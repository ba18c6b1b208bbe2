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

from mfulab.studies.fusion.onepass_c import SOURCE

READS_WRITES = (2, 2)  # x, a read; h, y written: each row's second and third traversal hit the cache
KERNEL_COUNT = {
    "count": 1,
    "names": ["ln_residual_dropout (C, OpenMP)"],
    "small": [],
    "what": "one C call over the tensor (the hand-written one-pass kernel)",
}
# A7's mechanism with its controls, all the same C code: impl -> (passes over memory, streaming
# stores). Fusion's own effect is a fused kernel over an unfused one with the same stores; the
# stores' effect, the same passes with and without streaming stores. The three-pass variant is the
# article's three kernels (dropout, residual add, LayerNorm) with ordinary stores, its dropout
# drawing the same numbers as the one-pass kernel's: at p > 0 the pair differs in passes only.
VARIANTS = {
    "onepass": (1, True),  # the fused kernel: 2 reads + 2 writes, no line read before a write
    "onepass_plain": (1, False),  # the same pass with ordinary stores: each write reads its line
    "twopass_nt": (2, True),  # eager's passes at p = 0 (add, then LayerNorm: 3 + 2), streaming stores
    "twopass_plain": (2, False),  # eager's passes at p = 0 and ordinary stores: ATen eager's C twin
    "threepass_plain": (3, False),  # dropout, add, LayerNorm (4 + 3), ordinary stores
}
CONTROLS = tuple(v for v in VARIANTS if v != "onepass")  # timed in DRAM at p = 0
DROPOUT_CONTROLS = ("onepass_plain", "threepass_plain")  # also timed in DRAM at the study's p
PASS_READS_WRITES = {1: READS_WRITES, 2: (3, 2), 3: (4, 3)}


def reads_writes(impl: str) -> tuple[int, int]:
    """Tensor reads and writes of a C variant: one pass, x and a in, h and y out; two, the
    residual add (x, a -> h) then LayerNorm (h -> y); three, dropout (a -> d), the add (x, d -> h)
    then LayerNorm; every intermediate crossing memory between passes."""
    return PASS_READS_WRITES[VARIANTS[impl][0]]


def kernel_count(impl: str) -> dict:
    """What the profiler would see of a C variant: one call of one, two or three passes."""
    passes, streaming = VARIANTS[impl]
    stores = "streaming" if streaming else "ordinary"
    if passes == 1:
        return {**KERNEL_COUNT, "what": f"one C pass over the tensor ({stores} stores)"}
    names = ["residual_dropout (C)", "layer_norm (C)"]
    if passes == 3:
        names = ["dropout (C)", "residual_add (C)", "layer_norm (C)"]
    unfused = "eager's add and layer_norm" if passes == 2 else "the article's three kernels"
    return {
        "count": passes,
        "names": names,
        "small": [],
        "what": f"{passes} C passes over the tensor, as {unfused} ({stores} stores)",
    }


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
    for kernel, pointers in (
        (so.ln_residual_dropout, 6),
        (so.ln_residual_dropout_two_pass, 6),
        (so.ln_residual_dropout_three_pass, 7),  # and d, dropout's output
    ):
        kernel.restype = ctypes.c_int64
        kernel.argtypes = [ctypes.c_void_p] * pointers + [
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
        d = torch.empty_like(x) if passes == 3 else None  # dropout's output, kept alive for the call
        outs = [t for t in (h, y, d) if t is not None]
        streamed = kernel(
            x.data_ptr(), a.data_ptr(), w.data_ptr(), b.data_ptr(), *(t.data_ptr() for t in outs),
            rows, cols, float(p), seed, EPS, int(streaming), torch.get_num_threads(),
        )  # fmt: skip
        stores = len(outs) * rows  # a row store per output tensor (h, y; and d for three passes)
        fn.streamed_share = int(streamed) / stores if rows else 0.0
        return h, y

    passes, streaming = VARIANTS[impl]
    kernel = {
        1: so.ln_residual_dropout,
        2: so.ln_residual_dropout_two_pass,
        3: so.ln_residual_dropout_three_pass,
    }[passes]
    fn.streaming_store_bits = int(so.streaming_store_bits()) if streaming else 0
    fn.streamed_share = 0.0
    return fn, None
