"""The kernels the ``fusion`` study times, and how it inspects them (torch, headless):
LayerNorm + residual + dropout in eager mode and as a hand-written Triton kernel, SDPA and
the backend it dispatches to, kernel counts from the profiler, the passes over memory of
inductor's generated C++ kernel, and the fresh-process worker that measures one attention
variant's peak memory on CPU. ``bench`` and ``norm_fusion_bench`` drive them."""

from __future__ import annotations

from mfulab.measure.gpt import naive_causal_attention
from mfulab.measure.timing import torch_dtype


def ln_eager(x, a, weight, bias, p: float):
    """h = x + dropout(a); y = layer_norm(h). At p = 0 dropout is the identity: ``F.dropout``
    would return its input without touching memory, so it is not called (the profiler then
    lists only the kernels that do work)."""
    import torch.nn.functional as F

    h = x + (F.dropout(a, p=p, training=True) if p > 0 else a)
    return h, F.layer_norm(h, (h.shape[-1],), weight, bias)


def triton_status(device: str) -> tuple[bool, str]:
    """Whether the hand-written Triton kernel can run here, and why not: it is built and
    launched once on a tiny tensor and checked against eager (importing ``triton`` is not
    enough: a compiler or driver mismatch fails only when the kernel builds or launches)."""
    if device != "cuda":
        return False, "Triton kernels need a CUDA device; this run is on CPU"
    try:
        import triton
    except ImportError:
        return False, "triton is not importable in this environment"
    import torch

    try:
        x, a = torch.randn(4, 96, device="cuda"), torch.randn(4, 96, device="cuda")
        w, b = torch.ones(96, device="cuda"), torch.zeros(96, device="cuda")
        h, y = triton_ln_residual()(x, a, w, b)
        torch.cuda.synchronize()
        _, y_ref = ln_eager(x, a, w, b, 0.0)
        if not torch.allclose(y, y_ref, atol=1e-4, rtol=1e-4):
            return False, "the Triton kernel ran but its result differs from eager's (not timed)"
    except Exception as e:  # a build or launch failure must skip the kernel, not end the study
        return False, f"triton {getattr(triton, '__version__', '?')} could not build or launch: {e!r}"[:300]
    return True, ""


def compile_status(device: str, mode: str = "default") -> tuple[bool, str]:
    """Whether ``torch.compile`` in ``mode`` can build and run here, and why not: a tiny
    function (add + layer norm, the sub-block's ops) is compiled, run three times (CUDA graphs
    record on a later call in ``reduce-overhead``) and checked against eager. Importing torch
    is not enough: a missing C++ compiler, or a Triton / driver mismatch on CUDA, fails only when
    a kernel builds or launches."""
    import torch

    def tiny(x, a):
        return torch.nn.functional.layer_norm(x + a, (x.shape[-1],))

    try:
        x, a = torch.randn(4, 96, device=device), torch.randn(4, 96, device=device)
        fn = torch.compile(tiny, mode=mode, dynamic=False)
        for _ in range(3):
            y = fn(x, a)
        if device == "cuda":
            torch.cuda.synchronize()
        if not torch.allclose(y, tiny(x, a), atol=1e-4, rtol=1e-4):
            return False, f"torch.compile ({mode}) ran but its result differs from eager's"
    except Exception as e:  # a build or launch failure must be reported, not end the study
        return False, f"torch.compile ({mode}) could not build or run on {device}: {e!r}"[:300]
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
    "empty_like",
    "empty_strided",
)


def profile_kernel_count(fn, device: str) -> dict:
    """Kernels one call launches, from ``torch.profiler``. On CUDA: the device kernels. On
    CPU: the outermost aten ops (each is one pass over memory in eager mode; their inner
    calls are not counted again) plus inductor's generated C++ kernels (profiled with
    ``torch._inductor.config.cpp.enable_kernel_profile``), allocation and view ops left out."""
    from torch.profiler import ProfilerActivity, profile

    from mfulab.measure.procs import native_stderr_filtered
    from mfulab.measure.timing import synchronize

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


def ln_kernel_count(fn, device: str, numel: int) -> dict:
    """Kernels one call of the LN sub-block runs over its [tokens, hidden] tensors. On CUDA:
    the device kernels. On CPU: the innermost aten ops that take a tensor of ``numel``
    elements (``aten::dropout`` is not counted again when its ``bernoulli_``, ``div_`` and
    ``mul`` are), plus inductor's generated C++ kernels; ops on a few elements only (the
    seed ``aten::randint`` of inductor's random numbers) are listed apart."""
    import math

    from torch.profiler import ProfilerActivity, profile

    from mfulab.measure.procs import native_stderr_filtered

    if device == "cuda":
        return profile_kernel_count(fn, device)
    fn()  # never the first call
    with native_stderr_filtered(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()

    def full_size(e) -> bool:
        return any(s and math.prod(s) == numel for s in (e.input_shapes or []))

    def working(e) -> bool:
        return e.name.startswith("aten::") and e.name.split("::")[-1] not in BOOKKEEPING_OPS

    def has_full_size_descendant(e) -> bool:
        return any((working(c) and full_size(c)) or has_full_size_descendant(c) for c in e.cpu_children)

    events = prof.events()
    names = [
        e.name
        for e in events
        if "cpp_fused" in e.name or (working(e) and full_size(e) and not has_full_size_descendant(e))
    ]
    small = [e.name for e in events if working(e) and not full_size(e) and e.cpu_parent is not None]
    small = [n for n in small if "randint" in n]
    return {
        "count": len(names),
        "names": names,
        "small": sorted(set(small)),
        "what": "CPU kernels over the tensor (innermost aten ops + inductor C++ kernels)",
    }


def _cpp_loop_nests(code: str) -> list[str] | None:
    """The loop nests of an inductor C++ kernel: with OpenMP (more than one thread), the blocks
    after each ``#pragma omp for`` / ``single``; single-threaded, inductor emits no OpenMP and
    each nest is a top-level block of the kernel's body that holds a ``for`` loop. None when
    the source has no C++ kernel (Triton on CUDA)."""
    import re

    if "#pragma omp" in code:
        return re.split(r"#pragma omp (?:for|single)", code[code.index("#pragma omp") :])[1:]
    if 'extern "C"' not in code:
        return None
    body = code[code.index('extern "C"') :]
    nests, depth, begin = [], 0, 0
    for i, ch in enumerate(body[body.index("{") :], body.index("{")):
        if ch == "{":
            depth += 1
            begin = i if depth == 2 else begin
        elif ch == "}":
            depth -= 1
            if depth == 1 and "for(" in body[begin : i + 1]:
                nests.append(body[begin : i + 1])
            if depth == 0:
                break
    return nests


def inductor_tensor_passes(code: str, numel: int) -> dict | None:
    """Passes over memory of an inductor C++ kernel (``run_and_get_code``'s source): its loop
    nests (``#pragma omp for`` / ``single``) and, in each, the distinct buffers loaded and
    stored over the whole tensor (an index whose loop variables span ``numel`` elements;
    the weights' ``x1`` and the per-row statistics' ``x0`` span less). Returns
    ``{"loop_nests", "tensor_passes", "per_nest": [[loads, stores], ...]}``, or None when the
    source has no C++ kernel (Triton on CUDA)."""
    import math
    import re

    nests = _cpp_loop_nests(code)
    if nests is None:
        return None
    per_nest = []
    for nest in nests:
        bounds = dict(
            re.findall(
                r"for\(int64_t (x\d+)=static_cast<int64_t>\(0L\); x\d+<static_cast<int64_t>\((\d+)L\)", nest
            )
        )

        def spans_tensor(index: str, bounds=bounds) -> bool:
            names = set(re.findall(r"\bx\d+\b", index))
            return (
                bool(names) and names <= bounds.keys() and math.prod(int(bounds[n]) for n in names) == numel
            )

        loads, stores = set(), set()
        for ptr, index in re.findall(r"loadu\((\w+) \+ static_cast<int64_t>\(([^)]*)\)", nest):
            if spans_tensor(index):
                loads.add(ptr)
        for ptr, index in re.findall(r"\.store\((\w+) \+ static_cast<int64_t>\(([^)]*)\)", nest):
            if spans_tensor(index):
                stores.add(ptr)
        for ptr, index, assign in re.findall(r"(\w+)\[static_cast<int64_t>\(([^\]]*)\)\](\s*=(?!=))?", nest):
            if spans_tensor(index):
                (stores if assign else loads).add(ptr)
        per_nest.append([len(loads), len(stores)])
    return {
        "loop_nests": len(nests),
        "tensor_loop_nests": sum(1 for a, b in per_nest if a + b),
        "tensor_passes": sum(a + b for a, b in per_nest),
        "per_nest": per_nest,
    }


def sdpa_backend(q, k, v, **kwargs) -> str:
    """The aten kernel ``scaled_dot_product_attention`` dispatched to for these inputs
    (``kwargs``: ``attn_mask``, ``dropout_p``, ``is_causal``; default causal, no mask)."""
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    kwargs = kwargs or {"is_causal": True}
    with Spy():
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    picked = [n for n in seen if "attention" in n or "flash" in n]
    ops = list(dict.fromkeys(seen))
    return (
        picked[0]
        if picked
        else "math (decomposed: " + ", ".join(ops[:6]) + (", …" if len(ops) > 6 else "") + ")"
    )


def sdpa_dispatch_cases(batch: int, heads: int, head_dim: int, seq_len: int, device, dtype) -> list[dict]:
    """The kernel SDPA picks on this device for the study's inputs and for the inputs that
    change the choice (an explicit mask, dropout, another dtype): one row per case."""
    import torch

    q, k, v = attn_inputs(batch, heads, head_dim, seq_len, device, dtype, requires_grad=False)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    cases = {
        "causal, no mask (the study's inputs)": ((q, k, v), {"is_causal": True}),
        "explicit boolean attn_mask": ((q, k, v), {"attn_mask": mask}),
        "dropout_p = 0.1": ((q, k, v), {"is_causal": True, "dropout_p": 0.1}),
        f"dtype {str(other).removeprefix('torch.')}": (
            tuple(t.to(other) for t in (q, k, v)),
            {"is_causal": True},
        ),
    }
    return [
        {"case": case, "backend": sdpa_backend(*tensors, **kwargs)}
        for case, (tensors, kwargs) in cases.items()
    ]


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

    from mfulab.measure.memprobe import peak_rss_of

    torch.set_num_threads(spec["num_threads"])
    fn = ATTENTION[spec["impl"]]
    shape = (spec["attn_batch"], spec["attn_heads"], spec["attn_head_dim"])
    tq, tk, tv = attn_inputs(*shape, 8, "cpu", torch_dtype(spec["dtype"]))  # warm the kernels' lazy set-up
    fn(tq, tk, tv).sum().backward()
    q, k, v = attn_inputs(*shape, spec["seq_len"], "cpu", torch_dtype(spec["dtype"]))
    return peak_rss_of(lambda: fn(q, k, v).sum().backward())
