"""Measurement of the ``fusion`` study (torch, headless): this device's matmul ceiling and
copy bandwidth (the calibration), LayerNorm + residual + dropout eager vs compiled (vs
Triton on CUDA) and one layer's forward (``norm_fusion_bench``), attention variants vs sequence
length and the kernel SDPA picks, the reference model's training step eager vs
``torch.compile`` (interleaved, ``compile_bench``), and matmul ceilings per dtype. ``measure`` returns plain
records (JSON) that ``analysis`` reads, here or on another machine. The kernels are in
``kernels``."""

from __future__ import annotations

from mfulab.measure import host
from mfulab.measure.gpt import naive_causal_attention
from mfulab.measure.timing import torch_dtype
from mfulab.studies.fusion.bytes_model import naive_attention_bytes, naive_attention_max_seq_len
from mfulab.studies.fusion.compile_bench import measure_model_compile
from mfulab.studies.fusion.kernels import (
    attn_inputs,
    compile_status,
    profile_kernel_count,
    sdpa_backend,
    sdpa_causal_attention,
    sdpa_dispatch_cases,
)
from mfulab.studies.fusion.norm_fusion_bench import measure_launch_overhead, measure_ln_fusion
from mfulab.studies.fusion.params import Params
from mfulab.studies.fusion.pointwise_chain import measure_pointwise_chain
from mfulab.units import MIB

BENCHMARK_VERSION = {
    "ln_fusion": 5,  # 5: the three-pass control with dropout, the roofs in the same rounds
    "attention": 2,
    "model_compile": 4,
    "matmul_dtypes": 1,
    "launch": 1,
    "pointwise_chain": 1,
}
PEAK_WORKER = "mfulab.studies.fusion.kernels:attn_peak_worker"


def _peak_added(p: Params, name: str, seq_len: int, step, device: str, num_threads: int) -> dict:
    """Memory one forward+backward adds at its peak: the CUDA allocator's peak, or a fresh
    process's peak RSS on CPU (not for the compiled variant: a fresh process would recompile)."""
    from mfulab.measure import memprobe

    if device == "cuda":
        return memprobe.cuda_peak_of(step)
    if name == "naive compiled":
        return {"step_added_bytes": None, "method": "not measured (a fresh process would recompile)"}
    shape = {"attn_batch": p.attn_batch, "attn_heads": p.attn_heads, "attn_head_dim": p.attn_head_dim}
    return memprobe.run_in_fresh_process(
        PEAK_WORKER, {**shape, "dtype": p.dtype, "impl": name, "seq_len": seq_len, "num_threads": num_threads}
    )


def measure_attention(p: Params) -> dict:
    """Attention variants vs sequence length: time (fwd+bwd), exact saved bytes, peak memory,
    backend, kernel counts; outputs and gradients agree across variants."""
    import torch

    from mfulab.measure.memprobe import SavedTensorAccountant
    from mfulab.measure.timing import progress, time_fn

    device, dt = p.device, torch_dtype(p.dtype)
    e = torch.empty(0, dtype=dt).element_size()
    limit = p.naive_memory_limit_mib * MIB
    compiled_naive = torch.compile(naive_causal_attention)
    rows, skipped = [], []
    backend = None
    tol = {"fp32": 2e-4, "bf16": 5e-2, "fp16": 1e-2}[p.dtype]
    for T in progress(p.attn_seq_lens, "attention"):
        variants = {"sdpa": sdpa_causal_attention, "naive": naive_causal_attention}
        if T in p.compile_attention_seq_lens:
            variants["naive compiled"] = compiled_naive
        predicted_naive = naive_attention_bytes(
            batch=p.attn_batch, heads=p.attn_heads, seq_len=T, dtype_bytes=e
        )
        ref = None
        for name, fn in variants.items():
            if name.startswith("naive") and predicted_naive > limit:
                skipped.append(
                    {
                        "seq_len": T,
                        "impl": name,
                        "why": f"naive attention needs about "
                        f"{predicted_naive / MIB:.0f} MiB (scores, softmax and their gradients) > "
                        f"naive_memory_limit_mib={p.naive_memory_limit_mib}",
                    }
                )
                continue
            q, k, v = attn_inputs(p.attn_batch, p.attn_heads, p.attn_head_dim, T, device, dt)
            if name == "sdpa" and backend is None:
                backend = sdpa_backend(q, k, v)
            o = fn(q, k, v)
            o.sum().backward()
            grads = [t.grad.clone() for t in (q, k, v)]
            if ref is None:
                ref = (o.detach(), grads)
                agree = True
            else:
                agree = bool(
                    torch.allclose(o.detach().float(), ref[0].float(), atol=tol, rtol=tol)
                    and all(
                        torch.allclose(g.float(), r.float(), atol=tol, rtol=tol)
                        for g, r in zip(grads, ref[1])
                    )
                )

            def step(fn=fn, q=q, k=k, v=v):
                for t in (q, k, v):
                    t.grad = None
                fn(q, k, v).sum().backward()

            t = time_fn(step, label=f"{name} T={T}", device=device, min_run_time_s=p.min_run_time_s, warmup=2)
            saved = None  # exact bytes kept for backward, inputs q, k, v excluded (held as "parameters")
            if name != "naive compiled":  # hooks and dispatch modes would change what is compiled
                holder = torch.nn.ParameterList([torch.nn.Parameter(t) for t in (q, k, v)])
                with SavedTensorAccountant(holder) as acc:
                    out_t = fn(*holder)
                saved = sum(r["bytes"] for r in acc.unique())
                del out_t
            for t_ in (q, k, v):  # the previous step's gradients must not inflate the baseline
                t_.grad = None
            del o, grads
            peak = _peak_added(p, name, T, step, device, torch.get_num_threads())
            rows.append(
                {
                    "seq_len": T,
                    "impl": name,
                    "agrees_with_sdpa": agree,
                    **t.to_dict(with_samples=True),
                    "saved_bytes": saved,
                    "peak_added_bytes": peak["step_added_bytes"],
                    "peak_method": peak["method"],
                    "kernels": profile_kernel_count(step, device)["count"],
                }
            )
    crossover = naive_attention_max_seq_len(
        batch=p.attn_batch, heads=p.attn_heads, dtype_bytes=e, limit_bytes=limit
    )
    cases = sdpa_dispatch_cases(p.attn_batch, p.attn_heads, p.attn_head_dim, min(p.attn_seq_lens), device, dt)
    return {
        "rows": rows,
        "skipped": skipped,
        "backend": backend,
        "dispatch_cases": cases,
        "head_dim": p.attn_head_dim,
        "cuda_capability": list(torch.cuda.get_device_capability()) if device == "cuda" else None,
        "dtype": p.dtype,
        "dtype_bytes": e,
        "naive_max_seq_len": crossover,
    }


def measure(p: Params) -> dict:
    """Everything the study measures on this device (see the module docstring)."""
    import os

    import torch

    from mfulab.measure import calibration

    p = p.prepared()
    # a persistent inductor cache: the second run of this study skips most compilation
    cache = os.path.abspath(os.path.join("scratch", "inductor-cache"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True  # generated C++ kernels appear in the profiler
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    device = p.device
    ok, why = compile_status(device)
    if not ok:  # before minutes of measurement: every part of the study compares against compiled
        raise RuntimeError(
            f"{why}. The fusion study compares eager with torch.compile throughout (A7, A8, B5); fix "
            "the compiler toolchain (a C++ compiler on CPU; a Triton matching torch on CUDA) and rerun."
        )
    rec = {
        "study": "fusion",
        "params": p.to_dict(),
        "device": device,
        "num_threads": torch.get_num_threads(),
        "device_name": host.device_name(device),
        "torch": torch.__version__,
        "benchmark_version": BENCHMARK_VERSION,
    }
    # B4's matmul ceilings per dtype (TF32 exists only on NVIDIA tensor cores), the roofline's
    # ceiling and bandwidth: this machine's calibration, shared with every study
    dtypes = ["fp32", "tf32", "bf16"] if device == "cuda" else ["fp32", "bf16"]
    parts = [f"matmul:{d}" for d in dict.fromkeys([p.dtype, *dtypes])] + ["bandwidth"]
    cal = calibration.get(p.calibration, device=device, parts=parts, num_threads=torch.get_num_threads())
    rec["ceiling"], rec["bandwidth"], rec["calibration"] = (
        cal[f"matmul:{p.dtype}"],
        cal["bandwidth"],
        cal["_meta"],
    )
    rec["matmul_dtypes"] = {d: cal[f"matmul:{d}"] for d in dtypes}
    rec["cpu_isa"] = host.cpu_isa()  # B4 on a CPU: whether bf16 GEMMs have hardware (AVX512_BF16, AMX)
    setting = calibration.SETTINGS[calibration.setting_for(p.calibration, device)]
    rec["ln"] = measure_ln_fusion(
        p, cal["bandwidth"].get("last_level_cache_bytes"), setting.get("cache_floor_bytes", 0)
    )
    rec["launch"] = measure_launch_overhead(device)
    # B5's fuser and graph breaks on a pointwise chain, at the LN sub-block's DRAM shape
    if p.pointwise_chain:
        rec["pointwise_chain"] = measure_pointwise_chain(
            rec["ln"]["tokens"], p.ln_hidden, device=device, dtype=torch_dtype(p.dtype), rounds=p.ln_rounds
        )
    # B3's "enable_flash_sdp(True) forces flash": the SDPA backend switches as this torch starts
    backends = torch.backends.cuda
    rec["sdp_backends_enabled"] = {
        "flash": backends.flash_sdp_enabled(),
        "mem_efficient": backends.mem_efficient_sdp_enabled(),
        "math": backends.math_sdp_enabled(),
    }
    rec["attention"] = measure_attention(p)
    rec["compile"] = measure_model_compile(p)
    return rec
