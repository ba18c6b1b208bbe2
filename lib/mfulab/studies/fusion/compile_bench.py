"""Measurement of claim B5 (torch, headless): the reference model's training step eager vs
``torch.compile``, and compiled with a forced graph break in every block, timed interleaved.

What each number is:

- ``first_call_s``: the first call of each variant in this process: dynamo's capture and
  AOTAutograd always run, inductor's generated kernels come from its on-disk cache
  (``TORCHINDUCTOR_CACHE_DIR``) when an earlier run left them there. ``cache_hits`` and
  ``cache_misses`` (inductor's FX-graph cache, counted by ``torch._dynamo.utils.counters``)
  say which it was: all hits is a *warm-cache* compile, not what a user pays the first time.
- ``cold``: with ``compile_cold_process``, the same first call in a fresh process with an
  empty temporary cache directory: the cold compile (code generation and the C++ or Triton
  compiler for every kernel). Off on the CPU profiles, to keep the run short.
- The graph-break variant: a forward pre-hook on every block's MLP calls
  ``torch._dynamo.graph_break()``. Dynamo does not guard on module hooks by default
  (``torch._dynamo.config.skip_nnmodule_hook_guards``), so a second model of the same code
  would silently reuse the first one's compiled graph and never run its hooks; the
  measurement therefore guards on hooks, and records the graphs each variant compiled, the
  breaks taken per step (hook calls) and any recompilation during the timed rounds
  (``torch._dynamo.explain`` is not used: it re-traces, and its break count also counts the
  frames a break creates, 3 or 4 for a 2-block model).
"""

from __future__ import annotations

import time

from mfulab.analytic.config import preset
from mfulab.measure.train import forward_backward
from mfulab.studies.fusion.kernels import compile_status
from mfulab.studies.fusion.params import Params

COLD_WORKER = "mfulab.studies.fusion.compile_bench:cold_compile_worker"


def compile_counters() -> dict:
    """Dynamo graphs compiled so far and inductor FX-graph cache hits / misses (process-wide)."""
    from torch._dynamo.utils import counters

    return {
        "graphs_compiled": counters["stats"]["unique_graphs"],
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"],
    }


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def _hits_misses(counted: dict) -> dict:
    return {"hits": counted["cache_hits"], "misses": counted["cache_misses"]}


def cache_state(hits: int, misses: int) -> str:
    """ "warm" (every inductor graph from the on-disk cache), "cold" (none), "partly warm"."""
    if misses == 0 and hits > 0:
        return "warm"
    if hits == 0 and misses > 0:
        return "cold"
    return "partly warm" if hits and misses else "no inductor graph"


def _model(cfg, device: str, *, graph_break: bool, calls: list):
    import torch

    from mfulab.measure.gpt import GPT

    torch.manual_seed(0)
    m = GPT(cfg, attn_impl="sdpa").to(device)
    if graph_break:

        def force_break(mod, args):
            calls[0] += 1  # a side effect: counts the breaks really taken
            torch._dynamo.graph_break()

        for block in m.blocks:
            block.mlp.register_forward_pre_hook(force_break)
    return m


def cold_compile_worker(spec: dict) -> dict:
    """Fresh process, empty temporary inductor cache: the first (compiling) call of one
    compiled variant, with the cache counters that show it was cold."""
    import os
    import shutil
    import tempfile

    cache = tempfile.mkdtemp(prefix="inductor-cold-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # read when inductor first needs it
    try:
        import torch

        torch.set_num_threads(spec["num_threads"])
        cfg = preset(spec["preset"]).with_(seq_len=spec["seq_len"])
        idx = torch.randint(0, cfg.vocab_size, (spec["micro_batch"], cfg.seq_len), device=spec["device"])
        calls = [0]
        with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
            m = torch.compile(_model(cfg, spec["device"], graph_break=spec["graph_break"], calls=calls))
            before = compile_counters()
            t0 = time.perf_counter()
            forward_backward(m, idx, dtype=spec.get("dtype", "fp32"))()
            if spec["device"] == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
        return {"first_call_s": first, **_delta(compile_counters(), before)}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def compile_modes(device: str) -> tuple[list[str], dict]:
    """The ``torch.compile`` modes B5 times here, and those skipped with their reason: ``default``
    everywhere (the study checked it before measuring); on CUDA also ``reduce-overhead`` (CUDA
    graphs), if ``kernels.compile_status`` can build and run it."""
    modes, skipped = ["default"], {}
    if device == "cuda":
        ok, why = compile_status(device, "reduce-overhead")
        if ok:
            modes.append("reduce-overhead")
        else:
            skipped["compiled (reduce-overhead)"] = why
    return modes, skipped


def measure_model_compile(p: Params) -> dict:
    """B5: the reference model's training step, eager vs torch.compile (and with a forced
    graph break per block), timed interleaved after each variant's first (compiling) call;
    per variant: dynamo graphs compiled, inductor cache hits / misses, breaks taken per step
    (module docstring)."""
    import torch

    from mfulab.measure import memprobe
    from mfulab.measure.timing import compare_timings, dtype_label, interleaved, tf32_state

    device = p.device
    cfg = preset(p.compile_preset).with_(seq_len=p.compile_seq_len)
    idx = torch.randint(0, cfg.vocab_size, (p.compile_micro_batch, cfg.seq_len), device=device)
    calls = {}
    variants = {"eager": (_model(cfg, device, graph_break=False, calls=[0]), None)}
    modes, skipped = compile_modes(device)
    out = {
        "preset": cfg.name,
        "seq_len": cfg.seq_len,
        "micro_batch": p.compile_micro_batch,
        "dtype": dtype_label(p.dtype),
        "tf32_matmul": tf32_state(device),
        "skipped": skipped,
        "rows": [],
    }
    # guard on module hooks: otherwise the graph-break model reuses the default model's graph
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        for mode in modes:
            m = _model(cfg, device, graph_break=False, calls=[0])
            variants[f"compiled ({mode})"] = (torch.compile(m, mode=mode), m)
        if p.compile_graph_break:
            calls["compiled, graph break per block"] = [0]
            m = _model(cfg, device, graph_break=True, calls=calls["compiled, graph break per block"])
            variants["compiled, graph break per block"] = (torch.compile(m), m)
        steps, first, counted = {}, {}, {}
        for name, (model, _) in variants.items():
            steps[name] = forward_backward(model, idx, dtype=p.dtype)
            before = compile_counters()
            t0 = time.perf_counter()
            steps[name]()
            if device == "cuda":
                torch.cuda.synchronize()
            first[name] = time.perf_counter() - t0
            counted[name] = _delta(compile_counters(), before)
        before_timing = compile_counters()["graphs_compiled"]
        timings = interleaved(
            steps, rounds=p.compile_rounds, device=device, desc="training step eager / compiled"
        )
        out["recompiled_during_timing"] = compile_counters()["graphs_compiled"] - before_timing
        for name, c in calls.items():  # breaks taken in one more step
            c[0] = 0
            steps[name]()
            counted[name]["breaks_taken_per_step"] = c[0]
    for name in variants:
        cold = {}
        if p.compile_cold_process and name != "eager":
            spec = {
                "preset": p.compile_preset,
                "seq_len": p.compile_seq_len,
                "micro_batch": p.compile_micro_batch,
                "device": device,
                "num_threads": torch.get_num_threads(),
                "graph_break": "graph break" in name,
                "dtype": p.dtype,
            }
            if "reduce-overhead" not in name:
                cold = memprobe.run_in_fresh_process(COLD_WORKER, spec, timeout_s=1800)
        out["rows"].append(
            {
                "variant": name,
                "dtype": out["dtype"],
                "first_call_s": first[name],
                **({} if name == "eager" else counted[name]),
                "cache": None if name == "eager" else cache_state(**_hits_misses(counted[name])),
                "cold_first_call_s": cold.get("first_call_s"),
                "cold_cache_misses": cold.get("cache_misses"),
                **timings[name].to_dict(with_samples=True),
            }
        )
    out["comparisons"] = [
        compare_timings(timings["eager"], timings[n]).to_dict() for n in timings if n != "eager"
    ]
    return out
