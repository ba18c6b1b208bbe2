"""The analytic side of the ``fusion`` study: bytes moved, the roofline, and the memory of
naive attention. Pure arithmetic: ``bench`` uses it for predictions and skip rules,
``analysis`` for the roofline and the tables.

The fused computation (Megatron's bias-dropout-add followed by LayerNorm)::

    h = x + dropout(a)          # the residual stream, needed downstream
    y = layer_norm(h)           # the next sub-layer's input

Minimum bytes moved over a [tokens, hidden] tensor of N elements with element size e:

- unfused, three kernels: dropout reads a, writes its output and a 1-byte mask (2Ne + N);
  add reads x and the dropout output, writes h (3Ne); LayerNorm reads h, writes y (2Ne):
  7Ne + N. Without dropout (p = 0) there is no dropout kernel: 5Ne.
- fused, one kernel: read a and x, write h, y and the mask: 4Ne + N (4Ne without dropout).

When memory-bound, the time ratio is the bytes ratio: (7e + 1)/(4e + 1) ≈ 1.67× for bf16.
The roofline (Williams et al. 2009): time ≥ max(FLOPs / peak, bytes / bandwidth), with the
peak and bandwidth *measured* on this device (``timing.matmul_ceiling``/``memory_bandwidth``).
"""

from __future__ import annotations

import math

from mfulab.errors import ParameterError


def ln_residual_dropout_bytes(
    *, tokens: int, hidden: int, dtype_bytes: int, fused: bool, dropout: bool
) -> int:
    """Minimum bytes read + written by h = x + dropout(a); y = layer_norm(h) (module docstring)."""
    for name, v in (("tokens", tokens), ("hidden", hidden), ("dtype_bytes", dtype_bytes)):
        if not (isinstance(v, int) and v > 0):
            raise ParameterError(f"{name} must be a positive integer, got {v!r}")
    n, e = tokens * hidden, dtype_bytes
    mask_bytes = n if dropout else 0
    if fused:
        return 4 * n * e + mask_bytes
    return (7 if dropout else 5) * n * e + mask_bytes


def ln_residual_dropout_flops(*, tokens: int, hidden: int, dropout: bool) -> int:
    """Arithmetic of the same computation, counting each add/mul/div/sqrt as one FLOP:
    dropout ~2 per element (compare, scale), add 1, LayerNorm ~8 (mean, centre, square,
    variance, rsqrt-scale, affine). Only its order of magnitude matters: ~1 FLOP per byte."""
    return tokens * hidden * ((2 if dropout else 0) + 1 + 8)


def predicted_fusion_speedup(*, dtype_bytes: int, dropout: bool) -> float:
    """Unfused / fused bytes: the speed-up of fusion when the kernels are memory-bound."""
    kw = dict(tokens=1, hidden=1, dtype_bytes=dtype_bytes, dropout=dropout)
    return ln_residual_dropout_bytes(fused=False, **kw) / ln_residual_dropout_bytes(fused=True, **kw)


def roofline_time_s(
    *, flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """Lower bound on run time: max(FLOPs / peak, bytes / bandwidth) (Williams et al. 2009)."""
    return max(flops / peak_flops_per_s, bytes_moved / bandwidth_bytes_per_s)


def naive_attention_bytes(*, batch: int, heads: int, seq_len: int, dtype_bytes: int) -> float:
    """Peak bytes of naive attention's s×s tensors in backward: scores, probabilities and
    their two gradients are alive together, 4·e·b·a·s². The skip rule uses it to predict
    where naive attention stops fitting instead of letting the kernel run out of memory."""
    return 4.0 * dtype_bytes * batch * heads * seq_len**2


def naive_attention_max_seq_len(*, batch: int, heads: int, dtype_bytes: int, limit_bytes: float) -> int:
    """The longest sequence whose naive s×s tensors (``naive_attention_bytes``) fit ``limit_bytes``."""
    return int(math.sqrt(limit_bytes / (4.0 * dtype_bytes * batch * heads)))


# Write-allocate ("read for ownership"): an ordinary cached store first reads its cache line
# from DRAM, so a kernel that reads R and writes W tensors moves R + 2·W of them through DRAM
# (non-temporal stores skip the read). STREAM counts its Copy as 2 words per element and notes
# that with write-allocate it moves 3 (McCalpin, STREAM FAQ, "counting bytes"). The
# calibration's copy bandwidth counts 2 (``timing.memory_bandwidth``: read + write), so DRAM's
# own bandwidth is up to 3/2 of it, reached by a kernel that only reads.
COPY_COUNTED_PASSES = 2


def dram_traffic_passes(*, reads: int, writes: int, write_allocate: bool = True) -> int:
    """Tensor passes DRAM really serves for R reads and W writes: R + 2·W with write-allocate."""
    return reads + (2 if write_allocate else 1) * writes


def copy_roof_factor(*, reads: int, writes: int, write_allocate: bool = True) -> float:
    """The kernel's DRAM roof, in bytes counted as (R + W)·N·e per second, as a multiple of the
    copy bandwidth (counted as 2·N·e): (R + W) / (R + 2W) × 3/2 with write-allocate. 1.0 for a
    copy, 1.5 for a kernel that only reads; ATen's eager sub-block (3 reads, 2 writes) 15/14;
    a kernel whose writes stream past the cache (no line read first) 3/2."""
    copy_traffic = dram_traffic_passes(reads=1, writes=1)
    return (
        (reads + writes)
        / dram_traffic_passes(reads=reads, writes=writes, write_allocate=write_allocate)
        * copy_traffic
        / COPY_COUNTED_PASSES
    )
