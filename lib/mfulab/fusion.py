"""Study ``fusion``: why small ops are memory-bound and what fusing them buys — a bytes-moved
model and roofline, LayerNorm + residual + dropout eager vs compiled (vs Triton on CUDA),
attention variants vs sequence length, kernel counts, model-level ``torch.compile``, and
fp32/TF32/bf16 matmul throughput.

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
peak and bandwidth *measured* on this device (``measure.matmul_ceiling``/``memory_bandwidth``).
"""

from __future__ import annotations

import math
import time

from . import verdicts as claims_mod
from . import flops, hardware, memory
from .verdicts import Claim
from .config import ParameterError, check_param_names, preset, require_positive_int
from .timing import torch_dtype

STUDY = "fusion"
BENCHMARK_VERSION = {"ln_fusion": 1, "attention": 1, "model_compile": 1, "matmul_dtypes": 1}
DTYPES = ("fp32", "bf16", "fp16")
PARAMS = {
    "device": "auto|cpu|cuda", "dtype": "fp32|bf16|fp16", "num_threads": "non-negative int",
    "ln_tokens": "positive int", "ln_hidden": "positive int", "dropout_p": "number in [0, 1)",
    "attn_seq_lens": "list of positive ints", "attn_batch": "positive int", "attn_heads": "positive int",
    "attn_head_dim": "positive int", "naive_memory_limit_mib": "positive number",
    "compile_attention_seq_lens": "list of positive ints (subset of attn_seq_lens)",
    "compile_preset": "preset name", "compile_seq_len": "positive int", "compile_micro_batch": "positive int",
    "compile_graph_break": "bool", "matmul_sizes": "list of positive ints", "min_run_time_s": "positive number",
}


# ---------------------------------------------------------------------------- analytic
def ln_residual_dropout_bytes(*, tokens: int, hidden: int, dtype_bytes: int, fused: bool, dropout: bool) -> int:
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


def roofline_time_s(*, flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
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


def a8_article_scale() -> dict:
    """A8 at the article's setting (7B, seq 4096, batch 16): activations per layer with the
    scores kept (naive) vs flash (Korthikanti Table 2 without / with the a·s² terms)."""
    cfg = preset("article-7b")
    naive = memory.activation_bytes_per_layer(cfg, micro_batch=16)
    flash = memory.activation_bytes_per_layer(cfg, micro_batch=16, recompute="selective")
    states = memory.model_state_bytes_per_device(flops.param_count(cfg), n_devices=1, zero_stage=0)
    total_naive = cfg.n_layers * naive + states
    total_flash = cfg.n_layers * flash + states
    return {"per_layer_naive_bytes": naive, "per_layer_flash_bytes": flash,
            "activation_reduction": 1 - flash / naive,
            "with_model_states_reduction": 1 - total_flash / total_naive, "model_states_bytes": states,
            "attention_flops_share_palm": flops.attention_flops_share(cfg, convention="palm")}


# ---------------------------------------------------------------------------- parameters
def validate(params: dict) -> dict:
    check_param_names(params, PARAMS)
    p = dict(params)
    for name in ("ln_tokens", "ln_hidden", "attn_batch", "attn_heads", "attn_head_dim", "compile_seq_len",
                 "compile_micro_batch"):
        require_positive_int(name, p[name])
    for name in ("attn_seq_lens", "matmul_sizes", "compile_attention_seq_lens"):
        if not isinstance(p[name], list) or any(not (isinstance(v, int) and v > 0) for v in p[name]):
            raise ParameterError(f"{name} must be a list of positive integers, got {p[name]!r}")
    if not p["attn_seq_lens"] or not p["matmul_sizes"]:
        raise ParameterError("attn_seq_lens and matmul_sizes must not be empty")
    if not set(p["compile_attention_seq_lens"]) <= set(p["attn_seq_lens"]):
        raise ParameterError("compile_attention_seq_lens must be a subset of attn_seq_lens")
    if not (isinstance(p["dropout_p"], (int, float)) and 0 <= p["dropout_p"] < 1):
        raise ParameterError(f"dropout_p must be in [0, 1), got {p['dropout_p']!r}")
    for name in ("naive_memory_limit_mib", "min_run_time_s"):
        if not (isinstance(p[name], (int, float)) and p[name] > 0):
            raise ParameterError(f"{name} must be a positive number, got {p[name]!r}")
    if not isinstance(p["compile_graph_break"], bool):
        raise ParameterError("compile_graph_break must be true or false")
    preset(p["compile_preset"])
    if p["dtype"] not in DTYPES:
        raise ParameterError(f"dtype must be one of {', '.join(DTYPES)}; got {p['dtype']!r}")
    p["device"] = hardware.resolve_device(p["device"])
    if p["device"] == "cpu" and p["dtype"] == "fp16":
        raise ParameterError("dtype fp16 is not supported on CPU by every kernel here; use fp32 or bf16")
    return p


# ---------------------------------------------------------------------------- implementations
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


def _triton_ln_residual():
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


BOOKKEEPING_OPS = ("empty", "view", "reshape", "as_strided", "expand", "detach", "alias", "resolve", "lift",
                   "_unsafe_view", "t", "transpose", "unsqueeze", "squeeze", "select", "slice", "permute",
                   "resize_", "set_", "zeros", "ones", "clone", "result_type")


def profile_kernel_count(fn, device: str) -> dict:
    """Kernels one call launches, from ``torch.profiler``. On CUDA: the device kernels. On
    CPU: the outermost aten ops (each is one pass over memory in eager mode; their inner
    calls are not counted again) plus inductor's generated C++ kernels (profiled with
    ``torch._inductor.config.cpp.enable_kernel_profile``), allocation and view ops left out."""
    from torch.profiler import ProfilerActivity, profile

    from .timing import synchronize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    fn()  # never the first call
    synchronize(device)
    with profile(activities=activities) as prof:
        fn()
        synchronize(device)
    events = prof.events()
    if device == "cuda":
        names = [e.name for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
        return {"count": len(names), "names": sorted(set(names))[:20], "what": "CUDA kernels"}

    def outermost_aten(e):
        parent = e.cpu_parent
        return e.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::"))

    names = [e.name for e in events
             if ("cpp_fused" in e.name or outermost_aten(e))
             and e.name.split("::")[-1] not in BOOKKEEPING_OPS]
    return {"count": len(names), "names": sorted(set(names))[:20], "what": "CPU kernels (outermost aten ops + inductor C++ kernels)"}


# ---------------------------------------------------------------------------- measurements
def measure_ln_fusion(p: dict) -> dict:
    """Eager vs torch.compile (vs Triton) for LN + residual + dropout: correctness at p = 0,
    forward time, achieved bytes/s, kernel counts; dropout p > 0 timed separately."""
    import torch

    from .timing import compare_timings, time_fn

    device, dt = p["device"], torch_dtype(p["dtype"])
    n_tok, hid = p["ln_tokens"], p["ln_hidden"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n_tok, hid, generator=gen).to(device, dt)
    a = torch.randn(n_tok, hid, generator=gen).to(device, dt)
    w = torch.randn(hid, generator=gen).to(device, dt)
    b = torch.randn(hid, generator=gen).to(device, dt)
    e = x.element_size()
    impls = {"eager": ln_eager}
    t0 = time.perf_counter()
    compiled = torch.compile(ln_eager)
    compiled(x, a, w, b, 0.0)
    compiled(x, a, w, b, p["dropout_p"])
    compile_s = time.perf_counter() - t0
    impls["compiled"] = compiled
    ok, why = triton_status(device)
    if ok:
        impls["triton"] = _triton_ln_residual()
    out = {"tokens": n_tok, "hidden": hid, "dtype": p["dtype"], "dtype_bytes": e, "compile_s": compile_s,
           "triton_skipped": None if ok else why, "rows": []}
    ref_h, ref_y = ln_eager(x, a, w, b, 0.0)
    tol = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 1e-2}[p["dtype"]]
    timings = {}
    for dropout_p in sorted({0.0, float(p["dropout_p"])}):
        for name, fn in impls.items():
            if name == "triton" and dropout_p:
                continue
            h, y = fn(x, a, w, b, dropout_p)
            if dropout_p == 0.0:  # correctness gate: same outputs as eager
                gate = bool(torch.allclose(h.float(), ref_h.float(), atol=tol, rtol=tol)
                            and torch.allclose(y.float(), ref_y.float(), atol=tol, rtol=tol))
            else:  # a different RNG: check the dropout statistics instead of the mask
                zeros = float(((h - x) == 0).float().mean())
                gate = abs(zeros - dropout_p) < 0.02
            t = time_fn(lambda fn=fn, q=dropout_p: fn(x, a, w, b, q), label=f"{name} p={dropout_p}", device=device,
                        min_run_time_s=p["min_run_time_s"])
            timings[(name, dropout_p)] = t
            dropout = dropout_p > 0
            fused = name != "eager"
            min_bytes = ln_residual_dropout_bytes(tokens=n_tok, hidden=hid, dtype_bytes=e, fused=fused, dropout=dropout)
            kernels = profile_kernel_count(lambda fn=fn, q=dropout_p: fn(x, a, w, b, q), device)
            out["rows"].append({"impl": name, "dropout_p": dropout_p, "correct": gate, **t.to_dict(with_samples=True),
                                "min_bytes": min_bytes, "achieved_bytes_per_s": min_bytes / t.median_s,
                                "kernels": kernels["count"], "kernel_kind": kernels["what"],
                                "kernel_names": kernels["names"]})
    out["comparisons"] = []
    for dropout_p in sorted({0.0, float(p["dropout_p"])}):
        for name in impls:
            if name != "eager" and (name, dropout_p) in timings:
                c = compare_timings(timings[("eager", dropout_p)], timings[(name, dropout_p)])
                out["comparisons"].append({"dropout_p": dropout_p, **c.to_dict(),
                                           "predicted": predicted_fusion_speedup(dtype_bytes=e, dropout=dropout_p > 0)})
    return out


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


def _attn_naive(q, k, v):
    from .model import naive_causal_attention

    return naive_causal_attention(q, k, v)


def _attn_sdpa(q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _attn_inputs(spec, seq_len, device, dtype, requires_grad=True):
    import torch

    gen = torch.Generator().manual_seed(seq_len)
    shape = (spec["attn_batch"], spec["attn_heads"], seq_len, spec["attn_head_dim"])
    return [torch.randn(shape, generator=gen).to(device, dtype).requires_grad_(requires_grad) for _ in range(3)]


def _attn_peak_worker(spec: dict) -> dict:
    """Fresh process: one forward+backward of one attention variant; peak RSS added."""
    import gc

    import torch

    from .memprobe import peak_rss_of

    torch.set_num_threads(spec["num_threads"])
    fn = {"naive": _attn_naive, "sdpa": _attn_sdpa}[spec["impl"]]
    tq, tk, tv = _attn_inputs(spec, 8, "cpu", torch_dtype(spec["dtype"]))  # warm the kernels' lazy set-up
    fn(tq, tk, tv).sum().backward()
    q, k, v = _attn_inputs(spec, spec["seq_len"], "cpu", torch_dtype(spec["dtype"]))
    return peak_rss_of(lambda: fn(q, k, v).sum().backward())


def measure_attention(p: dict) -> dict:
    """Attention variants vs sequence length: time (fwd+bwd), exact saved bytes, peak memory,
    backend, kernel counts; outputs and gradients agree across variants."""
    import torch

    from .memprobe import run_in_fresh_process
    from .timing import progress, time_fn
    from .recompute import SavedTensorAccountant

    device, dt = p["device"], torch_dtype(p["dtype"])
    e = torch.empty(0, dtype=dt).element_size()
    limit = p["naive_memory_limit_mib"] * 2**20
    compiled_naive = torch.compile(_attn_naive)
    rows, skipped = [], []
    backend = None
    tol = {"fp32": 2e-4, "bf16": 5e-2, "fp16": 1e-2}[p["dtype"]]
    for T in progress(p["attn_seq_lens"], "attention"):
        variants = {"sdpa": _attn_sdpa, "naive": _attn_naive}
        if T in p["compile_attention_seq_lens"]:
            variants["naive compiled"] = compiled_naive
        predicted_naive = naive_attention_bytes(batch=p["attn_batch"], heads=p["attn_heads"], seq_len=T,
                                                dtype_bytes=e)
        ref = None
        for name, fn in variants.items():
            if name.startswith("naive") and predicted_naive > limit:
                skipped.append({"seq_len": T, "impl": name, "why": f"naive attention needs about "
                                f"{predicted_naive / 2**20:.0f} MiB (scores, softmax and their gradients) > "
                                f"naive_memory_limit_mib={p['naive_memory_limit_mib']}"})
                continue
            q, k, v = _attn_inputs(p, T, device, dt)
            if name == "sdpa" and backend is None:
                backend = sdpa_backend(q, k, v)
            o = fn(q, k, v)
            o.sum().backward()
            grads = [t.grad.clone() for t in (q, k, v)]
            if ref is None:
                ref = (o.detach(), grads)
                agree = True
            else:
                agree = bool(torch.allclose(o.detach().float(), ref[0].float(), atol=tol, rtol=tol) and all(
                    torch.allclose(g.float(), r.float(), atol=tol, rtol=tol) for g, r in zip(grads, ref[1])))

            def step(fn=fn, q=q, k=k, v=v):
                for t in (q, k, v):
                    t.grad = None
                fn(q, k, v).sum().backward()

            t = time_fn(step, label=f"{name} T={T}", device=device, min_run_time_s=p["min_run_time_s"], warmup=2)
            saved = None  # exact bytes kept for backward, inputs q, k, v excluded (held as "parameters")
            if name != "naive compiled":  # hooks and dispatch modes would change what is compiled
                holder = torch.nn.ParameterList([torch.nn.Parameter(t) for t in (q, k, v)])
                with SavedTensorAccountant(holder) as acc:
                    out_t = fn(*holder)
                saved = sum(r["bytes"] for r in acc.unique())
                del out_t
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                step()
                torch.cuda.synchronize()
                peak_added, method = torch.cuda.max_memory_allocated() - before, "torch.cuda.max_memory_allocated"
            elif name == "naive compiled":
                peak_added, method = None, "not measured (a fresh process would recompile)"
            else:
                r = run_in_fresh_process("mfulab.fusion:_attn_peak_worker",
                                         {**{k_: p[k_] for k_ in ("attn_batch", "attn_heads", "attn_head_dim", "dtype")},
                                          "impl": name, "seq_len": T, "num_threads": torch.get_num_threads()})
                peak_added, method = r["step_added_bytes"], r["method"]
            rows.append({"seq_len": T, "impl": name, "agrees_with_sdpa": agree, **t.to_dict(with_samples=True),
                         "saved_bytes": saved, "peak_added_bytes": peak_added, "peak_method": method,
                         "kernels": profile_kernel_count(step, device)["count"]})
    crossover = naive_attention_max_seq_len(batch=p["attn_batch"], heads=p["attn_heads"], dtype_bytes=e, limit_bytes=limit)
    return {"rows": rows, "skipped": skipped, "backend": backend, "dtype": p["dtype"], "dtype_bytes": e,
            "naive_max_seq_len": crossover}


def measure_model_compile(p: dict) -> dict:
    """B5: the reference model's training step, eager vs torch.compile (and with a forced
    graph break), compile time and steady step time; graph breaks from dynamo's explain."""
    import torch

    from .timing import compare_timings, time_fn
    from .model import GPT

    device = p["device"]
    cfg = preset(p["compile_preset"]).with_(seq_len=p["compile_seq_len"])
    idx = torch.randint(0, cfg.vocab_size, (p["compile_micro_batch"], cfg.seq_len), device=device)

    def make_step(model):
        def step():
            model.zero_grad(set_to_none=True)
            _, loss = model(idx, idx)
            loss.backward()
        return step

    torch.manual_seed(0)
    eager = GPT(cfg, attn_impl="sdpa").to(device)
    variants = {"eager": (eager, None)}
    modes = ["default"] + (["reduce-overhead"] if device == "cuda" else [])
    for mode in modes:
        torch.manual_seed(0)
        m = GPT(cfg, attn_impl="sdpa").to(device)
        variants[f"compiled ({mode})"] = (torch.compile(m, mode=mode), m)
    if p["compile_graph_break"]:
        torch.manual_seed(0)
        m = GPT(cfg, attn_impl="sdpa").to(device)
        for block in m.blocks:
            block.mlp.register_forward_pre_hook(lambda mod, args: torch._dynamo.graph_break())
        variants["compiled, graph break per block"] = (torch.compile(m), m)
    out = {"preset": cfg.name, "seq_len": cfg.seq_len, "micro_batch": p["compile_micro_batch"], "rows": []}
    timings = {}
    for name, (model, _) in variants.items():
        step = make_step(model)
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        t = time_fn(step, label=name, device=device, min_run_time_s=p["min_run_time_s"], warmup=2)
        timings[name] = t
        breaks = None
        if name != "eager":
            explanation = torch._dynamo.explain(variants[name][1])(idx, idx)
            breaks = explanation.graph_break_count
        out["rows"].append({"variant": name, "first_call_s": first_s, "graph_breaks": breaks,
                            **t.to_dict(with_samples=True)})
    out["comparisons"] = [compare_timings(timings["eager"], timings[n]).to_dict() for n in timings if n != "eager"]
    return out


def measure_matmul_dtypes(p: dict) -> dict:
    """B4: matmul ceilings per dtype — fp32, tf32 (CUDA only) and bf16."""
    from .timing import matmul_ceiling

    dtypes = ["fp32", "tf32", "bf16"] if p["device"] == "cuda" else ["fp32", "bf16"]
    return {d: matmul_ceiling(device=p["device"], dtype=d, sizes=tuple(p["matmul_sizes"]),
                              min_run_time_s=p["min_run_time_s"]) for d in dtypes}


def measure(params: dict) -> dict:
    import os

    import torch

    from .timing import matmul_ceiling, memory_bandwidth

    p = validate(params)
    # a persistent inductor cache: the second run of this study skips most compilation
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(os.path.join("scratch", "inductor-cache")))
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True  # generated C++ kernels appear in the profiler
    if p["num_threads"]:
        torch.set_num_threads(p["num_threads"])
    device = p["device"]
    rec = {"study": STUDY, "params": p, "device": device, "num_threads": torch.get_num_threads(),
           "device_name": torch.cuda.get_device_name(0) if device == "cuda" else hardware.cpu_model(),
           "torch": torch.__version__, "benchmark_version": BENCHMARK_VERSION}
    rec["ceiling"] = matmul_ceiling(device=device, dtype=p["dtype"], sizes=tuple(p["matmul_sizes"]),
                                    min_run_time_s=p["min_run_time_s"])
    rec["bandwidth"] = memory_bandwidth(device=device, sizes_bytes=(p["ln_tokens"] * p["ln_hidden"] * 4,),
                                        min_run_time_s=p["min_run_time_s"])
    rec["ln"] = measure_ln_fusion(p)
    rec["attention"] = measure_attention(p)
    rec["compile"] = measure_model_compile(p)
    rec["matmul_dtypes"] = measure_matmul_dtypes(p)
    return rec


# ---------------------------------------------------------------------------- analysis
def ln_table(records):
    """LN + residual + dropout per implementation: time, bytes, achieved vs measured bandwidth."""
    import pandas as pd

    df = pd.DataFrame(records["ln"]["rows"]).drop(columns=["times_s", "kernel_names"])
    df["fraction_of_measured_bandwidth"] = df.achieved_bytes_per_s / records["bandwidth"]["best_bytes_per_s"]
    return df


def roofline_points(records):
    """Each measured kernel placed on this device's roofline (FLOP/s vs FLOPs per byte)."""
    import pandas as pd

    ln = records["ln"]
    rows = []
    for r in ln["rows"]:
        dropout = r["dropout_p"] > 0
        fl = ln_residual_dropout_flops(tokens=ln["tokens"], hidden=ln["hidden"], dropout=dropout)
        rows.append({"kernel": f"LN+residual{'+dropout' if dropout else ''} ({r['impl']})",
                     "intensity_flops_per_byte": fl / r["min_bytes"], "achieved_flops_per_s": fl / r["median_s"]})
    best = max(records["ceiling"]["rows"], key=lambda r: r["achieved_flops_per_s"])
    rows.append({"kernel": f"matmul {best['size']}³", "intensity_flops_per_byte":
                 best["flops"] / (3 * best["size"] ** 2 * {"fp32": 4, "bf16": 2, "fp16": 2, "tf32": 4}[records["ceiling"]["dtype"]]),
                 "achieved_flops_per_s": best["achieved_flops_per_s"]})
    return pd.DataFrame(rows)


def attention_table(records):
    import pandas as pd

    return pd.DataFrame(records["attention"]["rows"]).drop(columns=["times_s"])


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 2 for O(n²), 1 for O(n)."""
    import numpy as np

    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


def attention_slopes(records) -> dict:
    df = attention_table(records)
    out = {}
    for impl in ("naive", "sdpa"):
        d = df[(df.impl == impl) & df.saved_bytes.notna()]
        if len(d) >= 2:
            out[f"{impl}_saved_bytes_slope"] = loglog_slope(d.seq_len, d.saved_bytes)
            out[f"{impl}_time_slope"] = loglog_slope(d.seq_len, d.median_s)
    return out


def compile_table(records):
    import pandas as pd

    rows = pd.DataFrame(records["compile"]["rows"]).drop(columns=["times_s"])
    comps = {c["candidate"]: c for c in records["compile"]["comparisons"]}
    rows["speedup_vs_eager"] = [comps[v]["ratio"] if v in comps else 1.0 for v in rows.variant]
    rows["speedup_lo"] = [comps[v]["ratio_lo"] if v in comps else None for v in rows.variant]
    rows["speedup_hi"] = [comps[v]["ratio_hi"] if v in comps else None for v in rows.variant]
    rows["verdict"] = [comps[v]["verdict"] if v in comps else None for v in rows.variant]
    return rows


def dtype_table(records):
    import pandas as pd

    rows = []
    base = records["matmul_dtypes"]["fp32"]["best_flops_per_s"]
    for d, v in records["matmul_dtypes"].items():
        rows.append({"dtype": d, "best_flops_per_s": v["best_flops_per_s"], "best_size": v["best_size"],
                     "vs_fp32": v["best_flops_per_s"] / base})
    sheet = hardware.device_spec("a100").flops_per_s
    rows.append({"dtype": "A100 datasheet tf32 / fp32", "best_flops_per_s": None, "best_size": None,
                 "vs_fp32": sheet["tf32"] / sheet["fp32"]})
    return pd.DataFrame(rows)


def claims(records) -> list[Claim]:
    out = []
    ln = records["ln"]
    comps = {(c["dropout_p"], c["candidate"].split(" ")[0]): c for c in ln["comparisons"]}
    p = max(c["dropout_p"] for c in ln["comparisons"])
    c = comps.get((p, "compiled"))
    if c:
        kern = {(r["impl"], r["dropout_p"]): r["kernels"] for r in ln["rows"]}
        out.append(Claim(
            "A7", "fusing LayerNorm + residual + dropout into one kernel: 3 memory round trips → 1, forward ≈30% faster",
            f"eager vs torch.compile on [{ln['tokens']}, {ln['hidden']}] {ln['dtype']}, p = {p}; bytes model; kernel counts",
            claims_mod.verdict_from_interval(c["ratio_lo"], c["ratio_hi"], threshold=1.3),
            f"speed-up {c['ratio']:.2f}× [{c['ratio_lo']:.2f}, {c['ratio_hi']:.2f}] (95% bootstrap), memory-bound "
            f"prediction {c['predicted']:.2f}×; kernels {kern[('eager', p)]} → {kern[('compiled', p)]}"
            + (f"; at p = 0: {comps[(0.0, 'compiled')]['ratio']:.2f}× (prediction {comps[(0.0, 'compiled')]['predicted']:.2f}×)"
               if (0.0, "compiled") in comps else "")))
    slopes = attention_slopes(records)
    if "naive_saved_bytes_slope" in slopes and "sdpa_saved_bytes_slope" in slopes:
        ok = slopes["naive_saved_bytes_slope"] > 1.7 and slopes["sdpa_saved_bytes_slope"] < 1.3
        a8 = a8_article_scale()
        out.append(Claim(
            "A8", "fused (flash) attention turns activation memory O(n²) into O(n)",
            "exact bytes saved for backward vs sequence length, naive vs SDPA (log-log slope)",
            "confirmed" if ok else "refuted",
            f"slopes: naive {slopes['naive_saved_bytes_slope']:.2f}, SDPA {slopes['sdpa_saved_bytes_slope']:.2f} "
            f"(thresholds > 1.7 and < 1.3)"))
        out.append(Claim(
            "A8", "7B, seq 4096, batch 16: activation memory −40%, step time −18%",
            "Korthikanti Table 2 with and without the a·s² terms; attention share of FLOPs", "analytic only",
            f"activations per layer −{a8['activation_reduction']:.0%} (−{a8['with_model_states_reduction']:.0%} with "
            f"fp32 Adam model states on one device); the −18% step time cannot be derived from memory alone: attention "
            f"matmuls are {a8['attention_flops_share_palm']:.0%} of the model FLOPs at this length"))
    backend = records["attention"]["backend"]
    fused = backend is not None and any(k in backend for k in ("flash", "efficient", "cudnn"))
    out.append(Claim(
        "B3", "scaled_dot_product_attention picks a flash / memory-efficient kernel by itself",
        f"the aten kernel SDPA dispatched to ({records['attention']['dtype']}, causal, no mask tensor)",
        "confirmed" if fused else "refuted", f"dispatched to {backend}"))
    dt = dtype_table(records).set_index("dtype")
    if "tf32" in dt.index:
        ratio = dt.loc["tf32", "vs_fp32"]
        out.append(Claim("B4", "TF32 doubles matmul throughput on A100-class GPUs",
                         "matmul ceiling tf32 vs fp32 on this GPU", "confirmed" if ratio >= 1.8 else "refuted",
                         f"tf32/fp32 = {ratio:.2f}×; bf16/fp32 = {dt.loc['bf16', 'vs_fp32']:.2f}×; "
                         f"A100 datasheet tf32/fp32 = {dt.loc['A100 datasheet tf32 / fp32', 'vs_fp32']:.0f}×"))
    else:
        out.append(Claim("B4", "TF32 doubles matmul throughput on A100-class GPUs",
                         "matmul ceiling fp32 vs bf16 on this CPU; TF32 exists only on NVIDIA tensor cores",
                         "inconclusive on this machine",
                         f"no TF32 on a CPU; bf16/fp32 here = {dt.loc['bf16', 'vs_fp32']:.2f}×; the A100 datasheet gives "
                         f"tf32/fp32 = {dt.loc['A100 datasheet tf32 / fp32', 'vs_fp32']:.0f}× (dense), more than double"))
    ct = compile_table(records).set_index("variant")
    if "compiled (default)" in ct.index:
        r = ct.loc["compiled (default)"]
        gain = (f"graph breaks: {int(r.graph_breaks)}; compile took {r.first_call_s:.1f} s")
        if "compiled, graph break per block" in ct.index:
            g = ct.loc["compiled, graph break per block"]
            gain += (f"; with a graph break per block ({int(g.graph_breaks)} breaks) {g.speedup_vs_eager:.2f}× "
                     f"[{g.speedup_lo:.2f}, {g.speedup_hi:.2f}]")
        out.append(Claim(
            "B5", "torch.compile cuts step time by 8–12%; graph breaks erase the gain",
            f"training step of {records['compile']['preset']} (seq {records['compile']['seq_len']}, micro-batch "
            f"{records['compile']['micro_batch']}), eager vs compiled",
            claims_mod.verdict_from_interval(r.speedup_lo, r.speedup_hi, threshold=1.08),
            f"speed-up {r.speedup_vs_eager:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]; {gain}"))
    return out


def headline_metrics(records) -> dict:
    ln = ln_table(records)
    return {
        "device": records["device"], "device_name": records["device_name"], "dtype": records["params"]["dtype"],
        "matmul_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
        "memory_bandwidth_bytes_per_s": records["bandwidth"]["best_bytes_per_s"],
        "ln_fusion": records["ln"]["comparisons"], "ln_rows": ln.to_dict(orient="records"),
        "triton_skipped": records["ln"]["triton_skipped"], "sdpa_backend": records["attention"]["backend"],
        "attention_slopes": attention_slopes(records), "attention_skipped": records["attention"]["skipped"],
        "compile": compile_table(records).to_dict(orient="records"),
        "matmul_dtypes": dtype_table(records).to_dict(orient="records"),
        "a8_article_scale": a8_article_scale(),
        "claims": claims_mod.records(claims(records)),
    }


# ---------------------------------------------------------------------------- figures
def plot_roofline(records):
    import matplotlib.pyplot as plt
    import numpy as np

    peak = records["ceiling"]["best_flops_per_s"]
    bw = records["bandwidth"]["best_bytes_per_s"]
    pts = roofline_points(records)
    xs = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.loglog(xs, np.minimum(peak, xs * bw), color="black", label="roofline (measured ceilings)")
    for row in pts.itertuples():
        ax.loglog(row.intensity_flops_per_byte, row.achieved_flops_per_s, "o", label=row.kernel)
    ax.axvline(peak / bw, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"LayerNorm-type kernels sit far left of the ridge ({peak / bw:.0f} FLOP/B): memory-bound")
    ax.legend(fontsize=7)
    return fig


def plot_ln_bars(records):
    import matplotlib.pyplot as plt

    df = ln_table(records)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    labels = [f"{r.impl}\np={r.dropout_p:g}" for r in df.itertuples()]
    ax.bar(range(len(df)), df.median_s * 1e3,
           yerr=[(df.median_s - df.q1_s) * 1e3, (df.q3_s - df.median_s) * 1e3], capsize=4)
    for i, r in enumerate(df.itertuples()):
        ax.text(i, r.median_s * 1e3, f"{r.fraction_of_measured_bandwidth:.0%} of BW\n{r.kernels} kernels",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(df)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("forward time (ms, median, IQR bars)")
    comps = records["ln"]["comparisons"]
    best = max(comps, key=lambda c: c["dropout_p"]) if comps else None
    ax.set_title(f"Fusion: {best['ratio']:.2f}× measured vs {best['predicted']:.2f}× predicted (p={best['dropout_p']:g})"
                 if best else "LN + residual + dropout")
    return fig


def plot_attention(records):
    import matplotlib.pyplot as plt

    df = attention_table(records)
    slopes = attention_slopes(records)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for impl, d in df.groupby("impl"):
        axes[0].loglog(d.seq_len, d.median_s * 1e3, "o-", label=impl)
        d2 = d[d.saved_bytes.notna()]
        if len(d2):
            axes[1].loglog(d2.seq_len, d2.saved_bytes / 2**20, "o-",
                           label=f"{impl} (slope {slopes.get(f'{impl}_saved_bytes_slope', float('nan')):.2f})")
    axes[0].set_xlabel("sequence length (tokens)")
    axes[0].set_ylabel("forward+backward time (ms)")
    axes[0].set_title("Attention time")
    axes[1].set_xlabel("sequence length (tokens)")
    axes[1].set_ylabel("bytes kept for backward (MiB)")
    axes[1].set_title("Saved memory: O(n²) naive vs O(n) SDPA")
    for ax in axes:
        ax.legend(fontsize=8)
    return fig
