"""The kernels the ``fusion`` study times, and how it inspects them (torch, headless):
LayerNorm + residual + dropout in eager mode and as a hand-written Triton kernel, SDPA and
the backend it dispatches to, kernel counts from the profiler, and the fresh-process worker
that measures one attention variant's peak memory on CPU. ``bench`` drives them."""

from __future__ import annotations

from ...model import naive_causal_attention
from ...timing import torch_dtype


def ln_eager(x, a, weight, bias, p: float):
    import torch.nn.functional as F

    h = x + F.dropout(a, p=p, training=True)
    return h, F.layer_norm(h, (h.shape[-1],), weight, bias)


def triton_status(device: str) -> tuple[bool, str]:
    """Whether the hand-written Triton kernel can run here, and why not."""
    if device != "cuda":
        return False, "Triton kernels need a CUDA device; this run is on CPU"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "triton is not importable in this environment"
    return True, ""


def triton_ln_residual():
    """A one-pass Triton kernel for h = x + a; y = layer_norm(h) (p = 0): one program per row."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, a_ptr, w_ptr, b_ptr, h_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        offs = row * n_cols + cols
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        h = x + a
        mean = tl.sum(h, axis=0) / n_cols
        centred = tl.where(mask, h - mean, 0.0)
        var = tl.sum(centred * centred, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=1.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(h_ptr + offs, h.to(h_ptr.dtype.element_ty), mask=mask)
        tl.store(y_ptr + offs, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)

    def run(x, a, weight, bias, p=0.0):
        if p:
            raise ValueError("the Triton kernel implements p = 0 only")
        rows, cols = x.shape
        h, y = torch.empty_like(x), torch.empty_like(x)
        kernel[(rows,)](x, a, weight, bias, h, y, cols, 1e-5, BLOCK=triton.next_power_of_2(cols))
        return h, y

    return run


BOOKKEEPING_OPS = (
    "empty",
    "view",
    "reshape",
    "as_strided",
    "expand",
    "detach",
    "alias",
    "resolve",
    "lift",
    "_unsafe_view",
    "t",
    "transpose",
    "unsqueeze",
    "squeeze",
    "select",
    "slice",
    "permute",
    "resize_",
    "set_",
    "zeros",
    "ones",
    "clone",
    "result_type",
)


def profile_kernel_count(fn, device: str) -> dict:
    """Kernels one call launches, from ``torch.profiler``. On CUDA: the device kernels. On
    CPU: the outermost aten ops (each is one pass over memory in eager mode; their inner
    calls are not counted again) plus inductor's generated C++ kernels (profiled with
    ``torch._inductor.config.cpp.enable_kernel_profile``), allocation and view ops left out."""
    from torch.profiler import ProfilerActivity, profile

    from ...procs import native_stderr_filtered
    from ...timing import synchronize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    fn()  # never the first call
    synchronize(device)
    with native_stderr_filtered(), profile(activities=activities) as prof:
        fn()
        synchronize(device)
    events = prof.events()
    if device == "cuda":
        names = [e.name for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
        return {"count": len(names), "names": sorted(set(names))[:20], "what": "CUDA kernels"}

    def outermost_aten(e):
        parent = e.cpu_parent
        return e.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::"))

    names = [
        e.name
        for e in events
        if ("cpp_fused" in e.name or outermost_aten(e)) and e.name.split("::")[-1] not in BOOKKEEPING_OPS
    ]
    return {
        "count": len(names),
        "names": sorted(set(names))[:20],
        "what": "CPU kernels (outermost aten ops + inductor C++ kernels)",
    }


def sdpa_backend(q, k, v) -> str:
    """The aten kernel ``scaled_dot_product_attention`` dispatched to for these inputs."""
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Spy():
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    picked = [n for n in seen if "attention" in n or "flash" in n]
    return picked[0] if picked else "math (decomposed: " + ", ".join(dict.fromkeys(seen)) + ")"


def sdpa_causal_attention(q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


ATTENTION = {"naive": naive_causal_attention, "sdpa": sdpa_causal_attention}


def attn_inputs(batch: int, heads: int, head_dim: int, seq_len: int, device, dtype, requires_grad=True):
    """q, k, v of shape [batch, heads, seq_len, head_dim], seeded by the sequence length."""
    import torch

    gen = torch.Generator().manual_seed(seq_len)
    shape = (batch, heads, seq_len, head_dim)
    return [
        torch.randn(shape, generator=gen).to(device, dtype).requires_grad_(requires_grad) for _ in range(3)
    ]


def attn_peak_worker(spec: dict) -> dict:
    """Fresh process: one forward+backward of one attention variant; peak RSS added."""
    import torch

    from ...memprobe import peak_rss_of

    torch.set_num_threads(spec["num_threads"])
    fn = ATTENTION[spec["impl"]]
    shape = (spec["attn_batch"], spec["attn_heads"], spec["attn_head_dim"])
    tq, tk, tv = attn_inputs(*shape, 8, "cpu", torch_dtype(spec["dtype"]))  # warm the kernels' lazy set-up
    fn(tq, tk, tv).sum().backward()
    q, k, v = attn_inputs(*shape, spec["seq_len"], "cpu", torch_dtype(spec["dtype"]))
    return peak_rss_of(lambda: fn(q, k, v).sum().backward())
