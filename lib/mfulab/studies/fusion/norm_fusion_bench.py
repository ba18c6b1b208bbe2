"""Measurement of claim A7 (torch, headless): LayerNorm + residual + dropout eager vs
``torch.compile`` (vs a hand-written Triton kernel on CUDA) in the memory-bound regime, and
the sub-block's share of one GPT layer's forward, all timed **interleaved** (one call of
``timing.interleaved``: every variant once per round, the rounds paired).

- ``dram``: the sub-block at p = 0 on a [tokens, hidden] tensor sized from this machine's
  cache (``ln_tokens = 0``): x, a, h and y together are ``ln_llc_multiple`` × the larger of
  the last-level cache the system reports and the calibration's ``cache_floor_bytes`` (the
  size the calibration's copy bandwidth is measured beyond), so DRAM serves them (the regime
  the bytes model describes), as far as memory allows.
- ``layer``: the sub-block at the shape of one GPT layer's activations ([batch·seq, hidden]),
  at p = 0 and at p: the difference is dropout's random numbers and their passes, which on
  a CPU cost the same per element at any size (compute, not bytes), so they are not timed
  on the DRAM-sized tensors again.
- One GPT layer (``gpt.Block``, hidden = ``ln_hidden``) timed forward in the same rounds:
  the sub-block's share of the layer, per round, for Amdahl's bound (``layer_share``).
- ``onepass``: a hand-written one-pass C kernel (CPU, fp32; ``onepass``), the fused kernel
  that crosses DRAM once per tensor, where inductor's CPU kernel does not; in DRAM with its
  controls (``onepass.CONTROLS``: the same pass with ordinary stores, and the unfused two passes
  with either store), so that fusion's own effect is timed apart from the stores'.
- The DRAM rounds cycle through ``ln_input_sets`` copies of x and a (every variant of a round
  reads the same copy): where the inputs' pages sit moved the ratios between fresh runs.
- Inductor's generated C++ source is kept as counts (loop nests, passes over the tensor:
  ``kernels.inductor_tensor_passes``), the evidence for why compiled can be slower.
"""

from __future__ import annotations

import math
import os
import time

from mfulab.measure.timing import torch_dtype
from mfulab.studies.fusion import onepass
from mfulab.studies.fusion.bytes_model import ln_residual_dropout_bytes, predicted_fusion_speedup
from mfulab.studies.fusion.compile_bench import cache_state, compile_counters
from mfulab.studies.fusion.kernels import (
    inductor_tensor_passes,
    ln_eager,
    ln_kernel_count,
    triton_ln_residual,
    triton_status,
)
from mfulab.studies.fusion.params import Params

TENSORS_IN_WORKING_SET = 4  # x, a, h, y: what one fused pass must read and write
TENSORS_ALIVE_AT_PEAK = 8  # inputs, eager and compiled outputs, the references of the gates
# (plus x and a again for each further copy of the inputs: ln_shape's input_sets)
MEMORY_SHARE = 0.5  # of the available memory the sub-block's tensors may take


def available_memory_bytes() -> int:
    """Memory a new allocation can take: the kernel's MemAvailable (free pages plus the page cache
    it can reclaim), not the free pages alone, which a page cache filled by the run before shrinks
    (a fresh run sized its tensors at 1.5 GB after another study, at 4 GB otherwise)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def ln_shape(
    p: Params, llc_bytes: int | None, dtype_bytes: int, device: str, cache_floor_bytes: int = 0
) -> dict:
    """Tokens of the sub-block: ``p.ln_tokens``, or enough for x, a, h, y to reach
    ``ln_llc_multiple`` × the cache (rounded up to 64 rows), capped so that the tensors alive
    at the peak fit in :data:`MEMORY_SHARE` of the available memory. The cache is the larger
    of ``llc_bytes`` (what the system reports) and ``cache_floor_bytes`` (a VM's sysfs can
    report one CCX's L3 while its copies stay partly cache-served far beyond it)."""
    row_bytes = p.ln_hidden * dtype_bytes
    note = None
    cache_bytes = max(llc_bytes or 0, cache_floor_bytes) or None
    if p.ln_tokens:
        tokens = p.ln_tokens
    else:
        if not cache_bytes:
            raise RuntimeError("ln_tokens = 0 needs the last-level cache size from the calibration")
        tokens = 64 * math.ceil(p.ln_llc_multiple * cache_bytes / (TENSORS_IN_WORKING_SET * row_bytes) / 64)
        if device == "cpu":
            alive = TENSORS_ALIVE_AT_PEAK + 2 * (p.ln_input_sets - 1)
            fit = int(MEMORY_SHARE * available_memory_bytes() / (alive * row_bytes)) // 64 * 64
            if fit < tokens:
                note = f"memory allows {fit} of the {tokens} tokens asked for"
                tokens = fit
    working_set = TENSORS_IN_WORKING_SET * tokens * row_bytes
    return {
        "tokens": tokens,
        "working_set_bytes": working_set,
        "last_level_cache_bytes": llc_bytes,
        "cache_floor_bytes": cache_floor_bytes,
        "cache_bytes": cache_bytes,
        "working_set_llc_multiple": working_set / cache_bytes if cache_bytes else None,
        "note": note,
    }


def _gate(fn, args, ref, dropout_p: float, tol: float) -> bool:
    """Same outputs as eager at p = 0; at p > 0 (another RNG) the dropped fraction of a."""
    import torch

    x = args[0]
    h, y = fn(*args)
    if dropout_p == 0.0:
        return bool(
            torch.allclose(h.float(), ref[0].float(), atol=tol, rtol=tol)
            and torch.allclose(y.float(), ref[1].float(), atol=tol, rtol=tol)
        )
    return abs(float(((h - x) == 0).float().mean()) - dropout_p) < 0.02


def measure_ln_fusion(p: Params, llc_bytes: int | None = None, cache_floor_bytes: int = 0) -> dict:
    """The sub-block (eager / compiled / Triton) at p = 0 and p, and one GPT layer forward,
    timed interleaved; correctness gates, kernel counts, generated-code passes."""
    import torch
    from torch._inductor.utils import run_and_get_code

    from mfulab.analytic.config import TransformerConfig
    from mfulab.measure.gpt import Block
    from mfulab.measure.timing import interleaved

    device, dt = p.device, torch_dtype(p.dtype)
    e = torch.empty(0, dtype=dt).element_size()
    shape = ln_shape(p, llc_bytes, e, device, cache_floor_bytes)
    n_tok, hid, P = shape["tokens"], p.ln_hidden, float(p.dropout_p)
    layer_tokens = p.layer_batch * p.layer_seq_len
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=gen).to(device, dt)

    w, b = rand(hid), rand(hid)
    big = (rand(n_tok, hid), rand(n_tok, hid), w, b)
    # further copies of x and a at other pages: the DRAM rounds cycle through them
    big_sets = [big] + [(big[0].clone(), big[1].clone(), w, b) for _ in range(p.ln_input_sets - 1)]
    small = (rand(layer_tokens, hid), rand(layer_tokens, hid), w, b)
    cfg = TransformerConfig(
        n_layers=1, d_model=hid, n_heads=p.layer_heads, vocab_size=256, seq_len=p.layer_seq_len, name="layer"
    )
    torch.manual_seed(0)
    block = Block(cfg).to(device, dt).eval()
    layer_in = rand(p.layer_batch, p.layer_seq_len, hid)

    before = compile_counters()
    t0 = time.perf_counter()
    compiled = torch.compile(ln_eager, dynamic=False)  # one static graph per shape and p
    generated = {}
    for q in (0.0, P):  # the generated source, read at the layer's shape (same loops at any size)
        _, codes = run_and_get_code(compiled, *small, q)
        generated[f"p={q:g}"] = inductor_tensor_passes(codes[-1], layer_tokens * hid) if codes else None
    compiled(*big, 0.0)
    compile_s = time.perf_counter() - t0
    compile_cache = {k: v - before[k] for k, v in compile_counters().items()}

    ok, why = triton_status(device)
    impls = {"eager": ln_eager, "compiled": compiled}
    if ok:
        impls["triton"] = triton_ln_residual()
    one_pass, one_pass_why = onepass.build(device, p.dtype)
    if one_pass is not None:  # the hand-written one-pass kernel (CPU, fp32): A7's mechanism
        impls["onepass"] = one_pass
        for control in onepass.CONTROLS:  # and its controls, in DRAM at p = 0
            impls[control] = onepass.build(device, p.dtype, impl=control)[0]
    tol = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 1e-2}[p.dtype]
    refs = {"dram": ln_eager(*big, 0.0), "layer": ln_eager(*small, 0.0)}
    inputs = {"dram": big, "layer": small}
    # DRAM: the sub-block at p = 0 (memory-bound); layer shape: p = 0 and p (dropout's RNG
    # costs the same per element at any size: compute, not bytes, on a CPU)
    # DRAM at p too for the C pair that differs in passes only (the article's three kernels)
    cases = [("dram", 0.0), ("dram", P)] + [("layer", q) for q in (0.0, P)]
    variants, rows = {}, []
    for where, q in cases:
        for name, fn in impls.items():
            timed = (
                (q == 0 and name != "threepass_plain") or (q > 0 and name in onepass.DROPOUT_CONTROLS)
                if where == "dram"
                else name not in ("triton", *onepass.CONTROLS)
            )  # the three passes are the article's with dropout: at p = 0 they are not its kernels
            if not timed:
                continue
            label = f"{where}: {name} p={q:g}"
            args = (*inputs[where], q)
            if where == "dram":  # a variant's call i reads copy i mod ln_input_sets (one call a
                # round where a call outlasts interleaved's block: the round's variants share a copy)
                calls = [0]

                def call(fn=fn, q=q, calls=calls):
                    calls[0] += 1
                    return fn(*big_sets[calls[0] % len(big_sets)], q)

                variants[label] = call
            else:
                variants[label] = lambda fn=fn, args=args: fn(*args)
            kernels = (
                ln_kernel_count(lambda fn=fn, q=q: fn(*small, q), device, layer_tokens * hid)
                if name not in onepass.VARIANTS
                else onepass.kernel_count(name)  # C calls: the profiler sees no aten op in them
            )
            tokens = n_tok if where == "dram" else layer_tokens
            rows.append(
                {
                    "shape": where,
                    "tokens": tokens,
                    "impl": name,
                    "dropout_p": q,
                    "label": label,
                    "correct": _gate(fn, args, refs[where], q, tol),
                    "min_bytes": ln_residual_dropout_bytes(
                        tokens=tokens, hidden=hid, dtype_bytes=e, fused=name != "eager", dropout=q > 0
                    ),
                    "kernels": kernels["count"],
                    "kernel_kind": kernels["what"],
                    "kernel_names": kernels["names"],
                    "small_kernels": kernels.get("small", []),
                }
            )

    def layer_forward():
        with torch.no_grad():
            block(layer_in)

    variants["layer forward"] = layer_forward
    # the roofs in the same rounds: a VM's copy bandwidth and matmul rate move between sessions,
    # and a stored calibration may be another host's (norm_fusion.roofs)
    roofs = roof_controls(big_sets, small[0], device, dt)
    variants.update({label: fn for label, (fn, _) in roofs.items()})
    del refs
    timings = interleaved(
        variants, rounds=p.ln_rounds, device=device, warmup=1, desc="LN sub-block and layer"
    )
    for r in rows:
        r.update(timings[r["label"]].to_dict(with_samples=True))
        r["achieved_bytes_per_s"] = r["min_bytes"] / r["median_s"]
    streamed_share = {}
    for name, fn in impls.items():
        if name in onepass.VARIANTS:
            fn(*big, 0.0)
            streamed_share[name] = fn.streamed_share
    roof_gate(roofs)  # drops the checked tensors from the meta before it enters the records
    roof_rows = {
        label: {**meta, **timings[label].to_dict(with_samples=True)} for label, (_, meta) in roofs.items()
    }
    layer = {
        "batch": p.layer_batch,
        "seq_len": p.layer_seq_len,
        "hidden": hid,
        "heads": p.layer_heads,
        "tokens": layer_tokens,
        "forward": timings["layer forward"].to_dict(with_samples=True),
    }
    return {
        "tokens": n_tok,
        "hidden": hid,
        "dtype": p.dtype,
        "dtype_bytes": e,
        "dropout_p": P,
        **{k: v for k, v in shape.items() if k != "tokens"},
        "compile_s": compile_s,
        "compile_cache": {
            **compile_cache,
            "state": cache_state(hits=compile_cache["cache_hits"], misses=compile_cache["cache_misses"]),
        },
        "triton_skipped": None if ok else why,
        "onepass_skipped": one_pass_why,
        # per C variant, the share of the DRAM-sized call's row stores that streamed past the cache
        # (non-temporal stores: no line read before it is written); records before 2026-12-07 carry
        # the one-pass kernel's alone as onepass_streamed_share (onepass.write_allocate reads both)
        "streamed_share": streamed_share,
        "input_sets": len(big_sets),
        "onepass_streaming_store_bits": one_pass.streaming_store_bits if one_pass is not None else None,
        "generated": generated,
        "predicted": {f"p={q:g}": predicted_fusion_speedup(dtype_bytes=e, dropout=q > 0) for q in (0.0, P)},
        "rows": rows,
        "layer": layer,
        "roofs": roof_rows,
        "rounds": p.ln_rounds,
    }


def roof_controls(big_sets, layer_x, device: str, dt) -> dict:
    """label -> (call, meta) of the two roofs timed in the sub-block's rounds: the calibration's
    copy (``dst.copy_(src)``, read + write counted, ``timing.memory_bandwidth``) of one DRAM-sized
    tensor, cycling through the input copies like the sub-block; and the layer's MLP matmul
    ([tokens, h] x [h, 4h]), the rate the layer's own GEMMs reach in the same minutes."""
    import torch

    src = [s[0] for s in big_sets]
    dst = torch.empty_like(src[0])
    calls = [0]

    def copy():
        calls[0] += 1
        return dst.copy_(src[calls[0] % len(src)])

    tokens, hidden = layer_x.shape
    weight = torch.randn(hidden, 4 * hidden, device=device, dtype=dt) / hidden**0.5
    out = torch.empty(tokens, 4 * hidden, device=device, dtype=dt)
    copy_meta = {"kind": "copy", "moved_bytes": 2.0 * dst.numel() * dst.element_size(), "check": (dst, src)}
    matmul_meta = {
        "kind": "matmul",
        "flops": 2.0 * tokens * hidden * 4 * hidden,
        "shape": [tokens, hidden, 4 * hidden],
        "check": (out, layer_x, weight),
    }
    return {
        "roof: copy": (copy, copy_meta),
        "roof: layer matmul": (lambda: torch.matmul(layer_x, weight, out=out), matmul_meta),
    }


def roof_gate(roofs: dict) -> None:
    """The correctness gate beside the roofs' speed: the copy equals one of its sources, the
    matmul its float64 reference; the tensors are dropped from the meta once checked."""
    import torch

    for label, (_, meta) in roofs.items():
        check = meta.pop("check")
        if meta["kind"] == "copy":
            ok = any(torch.equal(check[0], s) for s in check[1])
        else:  # relative to the reference's norm: bf16/fp16 GEMMs round each product
            out, x, w = check
            ref = x.double() @ w.double()
            tol = 1e-4 if out.dtype == torch.float32 else 3e-2
            ok = bool((out.double() - ref).norm() <= tol * ref.norm())
        if not ok:
            raise RuntimeError(f"{label} produced a wrong result")


LAUNCH_OPS_PER_CALL = 100  # tiny ops per timed call: one op's dispatch is far below the timer's resolution


def measure_launch_overhead(device: str) -> dict:
    """The article's second fusion mechanism on this device: the cost of one kernel launch, timed
    as back-to-back eager adds of one-element tensors (the op's work is nil, its dispatch and, on
    a GPU, its launch are what is left); ``per_op_s`` is the median of the timed blocks divided by
    the ops per call, with the quartiles. On CUDA the call synchronises once at its end, so the
    figure is the host's issue rate, which is what a launch-bound stream runs at."""
    import torch

    from mfulab.measure.timing import time_fn

    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)

    def many():
        x = a
        for _ in range(LAUNCH_OPS_PER_CALL):
            x = torch.add(x, b)
        return x

    t = time_fn(many, label="tiny eager adds", device=device, min_run_time_s=0.3)
    ok = float(many().item()) == 1.0 + LAUNCH_OPS_PER_CALL  # the gate: the adds ran
    return {
        "ops_per_call": LAUNCH_OPS_PER_CALL,
        "per_op_s": t.median_s / LAUNCH_OPS_PER_CALL,
        "per_op_q1_s": t.q1_s / LAUNCH_OPS_PER_CALL,
        "per_op_q3_s": t.q3_s / LAUNCH_OPS_PER_CALL,
        "correct": ok,
    }
