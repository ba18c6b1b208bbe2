"""Study ``recompute``: what activation recomputation saves and costs, measured exactly on
the reference model and planned analytically at the articles' scale.

Policies (``model.GPT(recompute=...)``): ``none``; ``selective`` — the attention core
(Korthikanti et al. 2022); ``mlp`` — norm2 + MLP (the source article's A14 suggestion);
``full`` — every block; ``every_k`` — ``full`` on the first k blocks (Megatron's
``--recompute-num-layers``); ``sac`` — torch's selective activation checkpointing keeping
matmul outputs (where the installed torch has it).

Measurements:
- **Saved bytes for backward, exactly**: a ``saved_tensors_hooks`` pack hook sees every
  tensor autograd keeps; storages are deduplicated and parameters excluded; a
  ``TorchDispatchMode`` names the op that saved each tensor and module hooks its layer.
  Non-reentrant checkpoints keep their inputs without that hook, so ``model`` reports them
  through ``CHECKPOINT_OBSERVERS``. SAC keeps its matmul outputs in its own cache, which
  the hook cannot see: its saved bytes are left out, its peak memory is measured.
- **Peak memory**: a fresh subprocess per point on CPU (``ru_maxrss`` is sticky, so no
  warm-up runs in the measured process), ``torch.cuda.max_memory_allocated`` on GPU.
- **Hardware FLOPs** with ``FlopCounterMode`` over forward + backward, which also counts the
  recomputed forward; naive attention so the counter sees the attention matmuls on CPU.
- **Step time** of forward + backward with the Timer harness.
- **Correctness gate**: every policy's gradients equal those of ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import verdicts as claims_mod
from . import flops, hardware, memory, memprobe
from .verdicts import Claim
from .config import ParameterError, check_param_names, require_positive_int, TransformerConfig, preset

STUDY = "recompute"
POLICIES = ("none", "selective", "mlp", "full", "every_k", "sac")
BENCHMARK_VERSION = {"saved_bytes": 1, "peak_memory": 1, "step_time": 1, "hardware_flops": 1}
PARAMS = {
    "preset": "preset name", "seq_len": "positive int", "micro_batches": "list of positive ints",
    "policies": f"list from {POLICIES}", "every_k": "int in [1, n_layers]", "attn_impl": "naive|sdpa",
    "device": "auto|cpu|cuda", "num_threads": "non-negative int", "memory_budget_mib": "positive number",
    "min_run_time_s": "positive number", "planner_cases": "list of planner case mappings",
}


# ---------------------------------------------------------------------------- parameters
def sac_available() -> bool:
    import torch.utils.checkpoint as ckpt

    return hasattr(ckpt, "create_selective_checkpoint_contexts")


def model_kwargs(policy: str, *, every_k: int, n_layers: int) -> dict:
    """``model.GPT`` keyword arguments for one study policy."""
    if policy not in POLICIES:
        raise ParameterError(f"unknown recompute policy {policy!r}; valid: {', '.join(POLICIES)}")
    if policy == "every_k":
        if not (isinstance(every_k, int) and 1 <= every_k <= n_layers):
            raise ParameterError(f"every_k must be between 1 and n_layers={n_layers}; got {every_k!r}")
        return {"recompute": "full", "recompute_layers": every_k}
    return {"recompute": policy}


def validate(params: dict) -> dict:
    check_param_names(params, PARAMS)
    p = dict(params)
    cfg = preset(p["preset"])
    require_positive_int("seq_len", p["seq_len"])
    if not p["micro_batches"] or any(not (isinstance(b, int) and b > 0) for b in p["micro_batches"]):
        raise ParameterError(f"micro_batches must be a non-empty list of positive integers, got {p['micro_batches']!r}")
    if not p["policies"] or "none" not in p["policies"]:
        raise ParameterError("policies must be a list that includes 'none' (the reference)")
    for policy in p["policies"]:
        model_kwargs(policy, every_k=p["every_k"], n_layers=cfg.n_layers)
    if p["attn_impl"] not in ("naive", "sdpa"):
        raise ParameterError(f"attn_impl must be naive or sdpa; got {p['attn_impl']!r}")
    for name in ("memory_budget_mib", "min_run_time_s"):
        if not (isinstance(p[name], (int, float)) and p[name] > 0):
            raise ParameterError(f"{name} must be a positive number, got {p[name]!r}")
    for case in p["planner_cases"]:
        plan_case(case, dry_run=True)
    p["device"] = hardware.resolve_device(p["device"])
    return p


def saved_tensors(cfg: TransformerConfig, *, policy: str, every_k: int, micro_batch: int, attn_impl: str,
                  device: str = "cpu") -> list[dict]:
    """The deduplicated tensors one forward pass keeps for backward under ``policy``."""
    import torch

    from .model import GPT

    torch.manual_seed(0)
    model = GPT(cfg, attn_impl=attn_impl, **model_kwargs(policy, every_k=every_k, n_layers=cfg.n_layers)).to(device)
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device=device)
    with memprobe.SavedTensorAccountant(model) as acc:
        _, loss = model(idx, idx)
    rows = acc.unique()
    del loss
    for r in rows:
        r.pop("storage")
        r["shape"] = list(r["shape"])
    return rows


def reference_layer_terms(cfg: TransformerConfig, *, micro_batch: int, policy: str, attn_impl: str,
                          bytes_per_elem: int = 4) -> dict:
    """Bytes one layer of the reference model keeps, as Korthikanti's Table 2 form (adapted:
    element size ``bytes_per_elem``, no dropout) plus each term the paper leaves out.

    - ``layernorm_stats``: each LayerNorm that runs un-recomputed keeps mean and rstd (fp32, per token);
    - ``causal_mask``: naive attention keeps its T×T boolean mask for ``masked_fill``'s backward;
    - ``flash_*``: SDPA's flash kernel keeps a per-head log-sum-exp instead of the a·s²
      softmax output; its output shares storage with the projection input (counted once).
    """
    s, b, a, e = cfg.seq_len, micro_batch, cfg.n_heads, bytes_per_elem
    table2 = {"none": "none", "selective": "selective", "mlp": "mlp", "full": "full"}.get(policy)
    if table2 is None:
        raise ParameterError(f"no per-layer analytic form for policy {policy!r}")
    terms = {"korthikanti": memory.activation_bytes_per_layer(cfg, micro_batch=b, recompute=table2,
                                                              bytes_per_elem=e, dropout=False)}
    if policy == "full":
        return terms
    norms_kept = 1 if policy == "mlp" else 2
    terms["layernorm_stats"] = norms_kept * 2 * s * b * 4
    core_kept = policy != "selective"
    if core_kept and attn_impl == "naive":
        terms["causal_mask"] = s * s
    if core_kept and attn_impl == "sdpa":
        terms["flash_logsumexp"] = 4 * b * a * s
        terms["flash_no_scores"] = -e * a * s * s * b
    return terms


# ---------------------------------------------------------------------------- peak memory, time, FLOPs
def _peak_worker(spec: dict) -> dict:
    """Runs in a fresh process: one forward+backward; returns RSS before and at the peak."""
    import gc

    import torch

    from .memprobe import peak_rss_of
    from .model import GPT

    torch.set_num_threads(spec["num_threads"])
    cfg = TransformerConfig(**spec["config"])
    # Lazy imports on the first checkpointed backward (torch.utils.checkpoint, SAC) take tens
    # of MB: trigger them on a one-layer toy model, then reset the peak before measuring.
    toy = TransformerConfig(n_layers=1, d_model=8, n_heads=1, vocab_size=8, seq_len=4)
    toy_kwargs = {**spec["model_kwargs"], **({"recompute_layers": 1} if "recompute_layers" in spec["model_kwargs"] else {})}
    _, toy_loss = GPT(toy, attn_impl=spec["attn_impl"], **toy_kwargs)(torch.zeros(1, 4, dtype=torch.long),
                                                                      torch.zeros(1, 4, dtype=torch.long))
    toy_loss.backward()
    del toy_loss
    torch.manual_seed(0)
    model = GPT(cfg, attn_impl=spec["attn_impl"], **spec["model_kwargs"])
    idx = torch.randint(0, cfg.vocab_size, (spec["micro_batch"], cfg.seq_len))

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    return peak_rss_of(step)


def peak_memory(cfg: TransformerConfig, *, policy: str, every_k: int, micro_batch: int, attn_impl: str,
                device: str, num_threads: int, timeout_s: float = 300) -> dict:
    """Peak memory of one forward+backward: a fresh process's peak RSS on CPU (the delta
    over the RSS just before the forward is what the step added), or CUDA's allocator peak."""
    kwargs = model_kwargs(policy, every_k=every_k, n_layers=cfg.n_layers)
    if device == "cuda":
        import torch

        from .memprobe import cuda_peak_of
        from .model import GPT

        torch.manual_seed(0)
        model = GPT(cfg, attn_impl=attn_impl, **kwargs).cuda()
        idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device="cuda")

        def step():
            _, loss = model(idx, idx)
            loss.backward()

        out = cuda_peak_of(step)
        del model
        return out
    from .memprobe import run_in_fresh_process

    spec = {"config": cfg.to_dict(), "policy": policy, "model_kwargs": kwargs, "micro_batch": micro_batch,
            "attn_impl": attn_impl, "num_threads": num_threads}
    return run_in_fresh_process("mfulab.recompute:_peak_worker", spec, timeout_s=timeout_s)


def _build(cfg, policy, every_k, attn_impl, device):
    import torch

    from .model import GPT

    torch.manual_seed(0)
    return GPT(cfg, attn_impl=attn_impl, **model_kwargs(policy, every_k=every_k, n_layers=cfg.n_layers)).to(device)


def hardware_flops_per_token(cfg: TransformerConfig, *, policy: str, every_k: int, device: str) -> float:
    """FLOPs actually executed per token in forward + backward, recomputation included."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = _build(cfg, policy, every_k, "naive", device)
    idx = torch.randint(0, cfg.vocab_size, (1, cfg.seq_len), device=device)
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    return counter.get_total_flops() / cfg.seq_len


def gradients(cfg: TransformerConfig, *, policy: str, every_k: int, attn_impl: str, device: str, micro_batch: int):
    import torch

    model = _build(cfg, policy, every_k, attn_impl, device)
    gen = torch.Generator().manual_seed(3)
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), generator=gen).to(device)
    _, loss = model(idx, idx)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def step_time(cfg: TransformerConfig, *, policy: str, every_k: int, attn_impl: str, device: str, micro_batch: int,
              min_run_time_s: float, num_threads: int):
    import torch

    from .timing import time_fn

    model = _build(cfg, policy, every_k, attn_impl, device)
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device=device)

    def step():
        model.zero_grad(set_to_none=True)
        _, loss = model(idx, idx)
        loss.backward()

    return time_fn(step, label=f"{policy}@{micro_batch}", device=device, num_threads=num_threads, warmup=2,
                   min_run_time_s=min_run_time_s)


# ---------------------------------------------------------------------------- measure
def measure(params: dict) -> dict:
    import torch

    from .timing import progress

    p = validate(params)
    if p["num_threads"]:
        torch.set_num_threads(p["num_threads"])
    threads = torch.get_num_threads()
    device = p["device"]
    cfg = preset(p["preset"]).with_(seq_len=p["seq_len"])
    policies = [q for q in p["policies"] if q != "sac" or sac_available()]
    skipped = {"sac": "torch.utils.checkpoint has no create_selective_checkpoint_contexts"} \
        if "sac" in p["policies"] and not sac_available() else {}
    base_mb = min(p["micro_batches"])
    rec = {"study": STUDY, "params": p, "device": device, "num_threads": threads, "config": cfg.to_dict(),
           "device_name": torch.cuda.get_device_name(0) if device == "cuda" else hardware.cpu_model(),
           "policies": policies, "skipped": skipped, "base_micro_batch": base_mb,
           "benchmark_version": BENCHMARK_VERSION}
    rec["saved"] = {q: saved_tensors(cfg, policy=q, every_k=p["every_k"], micro_batch=base_mb,
                                     attn_impl=p["attn_impl"], device=device) for q in policies}
    rec["hardware_flops_per_token"] = {q: hardware_flops_per_token(cfg, policy=q, every_k=p["every_k"], device=device)
                                       for q in policies}
    ref = gradients(cfg, policy="none", every_k=p["every_k"], attn_impl=p["attn_impl"], device=device,
                    micro_batch=base_mb)
    rec["gradient_max_abs_diff"] = {}
    for q in policies:
        g = gradients(cfg, policy=q, every_k=p["every_k"], attn_impl=p["attn_impl"], device=device, micro_batch=base_mb)
        rec["gradient_max_abs_diff"][q] = max(float((g[n] - ref[n]).abs().max()) for n in ref)
    rec["peak"] = []
    points = [(q, mb) for q in policies for mb in sorted(p["micro_batches"])]
    for q, mb in progress(points, "peak memory (fresh processes)"):
        rec["peak"].append({"policy": q, "micro_batch": mb,
                            **peak_memory(cfg, policy=q, every_k=p["every_k"], micro_batch=mb, attn_impl=p["attn_impl"],
                                          device=device, num_threads=threads)})
    budget = p["memory_budget_mib"] * 2**20
    rec["chosen_micro_batch"] = {}
    for q in policies:
        fitting = [r["micro_batch"] for r in rec["peak"] if r["policy"] == q and r["step_added_bytes"] <= budget]
        rec["chosen_micro_batch"][q] = max(fitting) if fitting else None
    timing_points = sorted({(q, base_mb) for q in policies}
                           | {(q, mb) for q, mb in rec["chosen_micro_batch"].items() if mb is not None})
    rec["timing"] = []
    for q, mb in progress(timing_points, "step time"):
        t = step_time(cfg, policy=q, every_k=p["every_k"], attn_impl=p["attn_impl"], device=device, micro_batch=mb,
                      min_run_time_s=p["min_run_time_s"], num_threads=threads)
        rec["timing"].append({"policy": q, "micro_batch": mb, **t.to_dict(with_samples=True)})
    return rec


# ---------------------------------------------------------------------------- planner (analytic)
@dataclass(frozen=True)
class ThroughputModel:
    """The planner's stated throughput assumption: a device reaches
    ``peak_utilisation × x / (x + half_saturation_tokens)`` of its peak on hardware FLOPs,
    where x is the tokens in one micro-batch (small micro-batches under-fill the device);
    1F1B pipelining idles (pp − 1)/(m + pp − 1) of the step for m micro-batches per replica."""

    peak_utilisation: float = 0.55
    half_saturation_tokens: float = 2048

    def utilisation(self, tokens_per_micro_batch: float) -> float:
        x = tokens_per_micro_batch
        return self.peak_utilisation * x / (x + self.half_saturation_tokens)


PLAN_KEYS = {"name", "preset", "device_memory_gib", "peak_flops_per_s", "tp", "pp", "dp", "zero_stage",
             "global_batch", "micro_batches", "policies"}


def _parse_plan_policy(policy: str, n_layers: int) -> tuple[str, int | None]:
    if policy.startswith("every_k:"):
        k = int(policy.split(":", 1)[1])
        if not 1 <= k <= n_layers:
            raise ParameterError(f"{policy}: k must be between 1 and n_layers={n_layers}")
        return "full", k
    if policy not in ("none", "selective", "mlp", "full"):
        raise ParameterError(f"planner policy must be none, selective, mlp, full or every_k:<k>; got {policy!r}")
    return policy, None


def _hardware_flops_per_token(cfg, policy, layers):
    """palm-convention hardware FLOPs per token for a planner policy."""
    model = flops.flops_per_token(cfg, convention="palm")
    if policy == "mlp":  # one more forward of every MLP: 2 FLOPs per weight
        n_mats = 3 if cfg.mlp == "swiglu" else 2
        return model + cfg.n_layers * 2 * n_mats * cfg.d_model * cfg.d_ff
    hw = flops.flops_per_token(cfg, convention="palm", recompute=policy)
    fraction = 1.0 if layers is None else layers / cfg.n_layers
    return model + fraction * (hw - model)


def plan_case(case: dict, *, throughput: ThroughputModel = ThroughputModel(), dry_run: bool = False):
    """Every (policy, micro-batch) of one planner case: memory per device, whether it fits,
    the shortfall, and the predicted tokens/s, MFU and HFU under ``throughput``."""
    import pandas as pd

    missing = PLAN_KEYS - set(case)
    if missing:
        raise ParameterError(f"planner case {case.get('name', '?')!r} misses {', '.join(sorted(missing))}")
    cfg = preset(case["preset"])
    for policy in case["policies"]:
        _parse_plan_policy(policy, cfg.n_layers)
    for key in ("device_memory_gib", "peak_flops_per_s", "tp", "pp", "dp", "global_batch"):
        if not (isinstance(case[key], (int, float)) and case[key] > 0):
            raise ParameterError(f"planner case {case['name']!r}: {key} must be a positive number, got {case[key]!r}")
    if dry_run:
        return None
    devices = case["tp"] * case["pp"] * case["dp"]
    model_fpt = flops.flops_per_token(cfg, convention="palm")
    rows = []
    for policy in case["policies"]:
        base, layers = _parse_plan_policy(policy, cfg.n_layers)
        hw_fpt = _hardware_flops_per_token(cfg, base, layers)
        for mb in case["micro_batches"]:
            m = case["global_batch"] / (case["dp"] * mb)
            if m < 1 or m != int(m):
                continue  # the global batch does not split into whole micro-batches
            mem = memory.memory_per_device(cfg, micro_batch=mb, tp=case["tp"], pp=case["pp"], dp=case["dp"],
                                           zero_stage=case["zero_stage"], recompute=base, recompute_layers=layers,
                                           sequence_parallel=case.get("sequence_parallel", False))
            capacity = case["device_memory_gib"] * 2**30
            fits = mem["total_bytes"] <= capacity
            tokens_per_step = case["global_batch"] * cfg.seq_len
            bubble = (case["pp"] - 1) / (m + case["pp"] - 1)
            achieved = devices * case["peak_flops_per_s"] * throughput.utilisation(mb * cfg.seq_len)
            step_s = tokens_per_step * hw_fpt / achieved / (1 - bubble)
            tps = tokens_per_step / step_s
            rows.append({"case": case["name"], "device_memory_gib": case["device_memory_gib"], "policy": policy,
                         "micro_batch": mb,
                         "total_gib": mem["total_bytes"] / 2**30, "model_states_gib": mem["model_states_bytes"] / 2**30,
                         "activations_gib": mem["activations_bytes"] / 2**30, "fits": fits,
                         "shortfall_gib": max(0.0, (mem["total_bytes"] - capacity) / 2**30),
                         "step_s": step_s if fits else None, "tokens_per_s": tps if fits else None,
                         "mfu": model_fpt * tps / (devices * case["peak_flops_per_s"]) if fits else None,
                         "hfu": hw_fpt * tps / (devices * case["peak_flops_per_s"]) if fits else None})
    return pd.DataFrame(rows)


def zero_comparison(preset_name: str, *, tp: int, dp_values, device_memory_gib: float):
    """A12: per-device model-state memory and data-parallel traffic, ZeRO-2 vs ZeRO-3."""
    import pandas as pd

    n = flops.param_count(preset(preset_name)) / tp
    rows = []
    for dp in dp_values:
        z2 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=2)
        z3 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=3)
        rows.append({"preset": preset_name, "tp": tp, "dp": dp, "zero2_gib": z2 / 2**30, "zero3_gib": z3 / 2**30,
                     "saved_gib": (z2 - z3) / 2**30, "saved_share_of_card": (z2 - z3) / (device_memory_gib * 2**30),
                     "zero2_traffic_gib": memory.zero_traffic_bytes_per_step(n, zero_stage=2) / 2**30,
                     "zero3_traffic_gib": memory.zero_traffic_bytes_per_step(n, zero_stage=3) / 2**30})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- analysis of records
def _cfg(records) -> TransformerConfig:
    return TransformerConfig(**records["config"])


def saved_table(records):
    """Every saved tensor (deduplicated) per policy, with layer, module and op."""
    import pandas as pd

    frames = [pd.DataFrame(rows).assign(policy=q) for q, rows in records["saved"].items()]
    return pd.concat(frames, ignore_index=True)


def layer_model_vs_measured(records):
    """Per-layer saved bytes: measured, Korthikanti's form (adapted), and with every named
    residual term; relative errors of both."""
    import pandas as pd

    cfg, p = _cfg(records), records["params"]
    df = saved_table(records)
    rows = []
    for q in records["policies"]:
        per_layer = df[(df.policy == q) & df.layer.notna()].groupby("layer").bytes.sum()
        for layer, measured in per_layer.items():
            layer_policy = ("full" if layer < p["every_k"] else "none") if q == "every_k" else q
            if layer_policy == "sac":
                continue
            terms = reference_layer_terms(cfg, micro_batch=records["base_micro_batch"], policy=layer_policy,
                                          attn_impl=p["attn_impl"])
            explained = sum(terms.values())
            rows.append({"policy": q, "layer": int(layer), "measured_bytes": int(measured),
                         "korthikanti_bytes": terms["korthikanti"], "explained_bytes": explained,
                         "korthikanti_rel_error": terms["korthikanti"] / measured - 1,
                         "explained_rel_error": explained / measured - 1,
                         "residual_terms": ", ".join(f"{k} {v:+.0f} B" for k, v in terms.items() if k != "korthikanti")})
    return pd.DataFrame(rows)


def policy_summary(records):
    """One row per policy: saved bytes, peak memory, FLOPs, step time, gradient gate."""
    import pandas as pd

    df = saved_table(records)
    base_mb = records["base_micro_batch"]
    tokens = base_mb * records["config"]["seq_len"]
    fl_none = records["hardware_flops_per_token"]["none"]
    rows = []
    for q in records["policies"]:
        peak = next(r for r in records["peak"] if r["policy"] == q and r["micro_batch"] == base_mb)
        t = next(r for r in records["timing"] if r["policy"] == q and r["micro_batch"] == base_mb)
        rows.append({"policy": q, "saved_bytes_total": int(df[df.policy == q].bytes.sum()),
                     "saved_bytes_layers": int(df[(df.policy == q) & df.layer.notna()].bytes.sum()),
                     "peak_step_added_bytes": peak["step_added_bytes"],
                     "hardware_flops_per_token": records["hardware_flops_per_token"][q],
                     "recompute_flops_share": records["hardware_flops_per_token"][q] / fl_none - 1,
                     "step_s": t["median_s"], "step_q1_s": t["q1_s"], "step_q3_s": t["q3_s"], "step_n": t["n"],
                     "tokens_per_s": tokens / t["median_s"],
                     "gradient_max_abs_diff": records["gradient_max_abs_diff"][q]})
    out = pd.DataFrame(rows)
    if "sac" in records["policies"]:
        out.loc[out.policy == "sac", ["saved_bytes_total", "saved_bytes_layers"]] = None
    return out


def _per_token_timing(records, policy, micro_batch):
    from .timing import summarize

    t = next(r for r in records["timing"] if r["policy"] == policy and r["micro_batch"] == micro_batch)
    tokens = micro_batch * records["config"]["seq_len"]
    return summarize([x / tokens for x in t["times_s"]], label=f"{policy}@{micro_batch}")


def budget_table(records):
    """B7: each policy at the largest micro-batch that fits the memory budget; tokens/s, MFU
    and HFU relative to ``none`` at its own largest micro-batch (ratios with intervals)."""
    import pandas as pd

    from .timing import compare_timings

    none_mb = records["chosen_micro_batch"]["none"]
    ref = _per_token_timing(records, "none", none_mb) if none_mb else None
    fl_none = records["hardware_flops_per_token"]["none"]
    rows = []
    for q in records["policies"]:
        mb = records["chosen_micro_batch"][q]
        if mb is None:
            rows.append({"policy": q, "micro_batch": None, "fits": False, "tokens_per_s": None,
                         "tokens_per_s_vs_none": None, "ratio_lo": None, "ratio_hi": None, "verdict": None,
                         "mfu_vs_none": None, "hfu_vs_none": None})
            continue
        t = _per_token_timing(records, q, mb)
        c = compare_timings(ref, t) if ref else None
        hw_ratio = records["hardware_flops_per_token"][q] / fl_none
        rows.append({"policy": q, "micro_batch": mb, "fits": True, "tokens_per_s": 1 / t.median_s,
                     "tokens_per_s_vs_none": c.ratio if c else None, "ratio_lo": c.ratio_lo if c else None,
                     "ratio_hi": c.ratio_hi if c else None, "verdict": c.verdict if c else None,
                     # MFU ∝ model FLOPs × tokens/s (model FLOPs are the same for every policy);
                     # HFU ∝ hardware FLOPs × tokens/s
                     "mfu_vs_none": c.ratio if c else None, "hfu_vs_none": c.ratio * hw_ratio if c else None})
    return pd.DataFrame(rows)


def budget_note(records) -> str | None:
    """A clear message when the memory budget leaves some policy (or every one) without a
    micro-batch, naming the parameter and what the smallest measured step needed."""
    missing = [q for q, mb in records["chosen_micro_batch"].items() if mb is None]
    if not missing:
        return None
    need = {q: min(r["step_added_bytes"] for r in records["peak"] if r["policy"] == q) for q in missing}
    detail = ", ".join(f"{q} needs {b / 2**20:.0f} MiB at micro-batch {records['base_micro_batch']}"
                       for q, b in need.items())
    scope = "no policy" if len(missing) == len(records["chosen_micro_batch"]) else "some policies"
    return (f"memory_budget_mib={records['params']['memory_budget_mib']} leaves {scope} without a micro-batch "
            f"that fits ({detail}); raise memory_budget_mib or lower micro_batches")


def a14_table(records):
    """Memory saved per recomputed FLOP: attention core (selective) vs MLP, measured here and
    analytic for the article's 13B shape."""
    import pandas as pd

    rows = []
    s = policy_summary(records).set_index("policy")
    tokens = records["base_micro_batch"] * records["config"]["seq_len"]
    for q in ("selective", "mlp"):
        if q not in s.index:
            continue
        saved = s.loc["none", "saved_bytes_layers"] - s.loc[q, "saved_bytes_layers"]
        extra = (s.loc[q, "hardware_flops_per_token"] - s.loc["none", "hardware_flops_per_token"]) * tokens
        rows.append({"where": f"measured ({records['config']['name']}, {records['params']['attn_impl']} attention)",
                     "policy": q, "bytes_saved": saved, "flops_recomputed": extra,
                     "bytes_per_recomputed_flop": saved / extra if extra else None})
    cfg = preset("article-13b")
    for q in ("selective", "mlp"):
        kept = memory.activation_bytes_per_layer(cfg, micro_batch=1, recompute=q)
        saved = memory.activation_bytes_per_layer(cfg, micro_batch=1) - kept
        extra = (_hardware_flops_per_token(cfg, q, None) - flops.flops_per_token(cfg, convention="palm")) \
            * cfg.seq_len / cfg.n_layers
        rows.append({"where": "analytic, article-13b layer (bf16, dropout, s=4096)", "policy": q,
                     "bytes_saved": saved, "flops_recomputed": extra, "bytes_per_recomputed_flop": saved / extra})
    return pd.DataFrame(rows)


def claims(records, plans, zero_df) -> list[Claim]:
    out = []
    summary = policy_summary(records).set_index("policy")
    base_mb = records["base_micro_batch"]
    if "full" in summary.index:
        from .timing import compare_timings

        c = compare_timings(_per_token_timing(records, "none", base_mb), _per_token_timing(records, "full", base_mb))
        slower = c.verdict == "slower"
        out.append(Claim(
            "B7", "full recompute lowers MFU (50% → 40% in the article) at the same batch",
            f"step time full vs none at micro-batch {base_mb}; recomputed FLOPs from FlopCounterMode",
            "confirmed" if slower else "inconclusive on this machine" if c.verdict == "inconclusive" else "refuted",
            f"MFU(full)/MFU(none) = {c.ratio:.2f} [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] (95% bootstrap); full recomputes "
            f"{summary.loc['full', 'recompute_flops_share']:.0%} extra FLOPs, so at equal hardware efficiency MFU falls "
            f"to {1 / (1 + summary.loc['full', 'recompute_flops_share']):.0%} of its value (50% → "
            f"{50 / (1 + summary.loc['full', 'recompute_flops_share']):.0f}%)"))
        bt = budget_table(records).set_index("policy")
        if bt.loc["none", "fits"] and bt.loc["full", "fits"]:
            row = bt.loc["full"]
            same_direction = (row.mfu_vs_none - 1) * (row.tokens_per_s_vs_none - 1) >= 0
            out.append(Claim(
                "B7", "with the memory freed for a larger batch, tokens/s can rise while MFU falls",
                f"largest micro-batch within {records['params']['memory_budget_mib']} MiB per policy "
                f"(none: {int(bt.loc['none', 'micro_batch'])}, full: {int(row.micro_batch)}); tokens/s and MFU",
                "refuted" if same_direction else "confirmed",
                f"tokens/s full/none = {row.tokens_per_s_vs_none:.2f} [{row.ratio_lo:.2f}, {row.ratio_hi:.2f}] "
                f"({row.verdict}); MFU moves by exactly the same factor ({row.mfu_vs_none:.2f}) because model FLOPs per "
                f"token do not change with recompute: MFU and tokens/s cannot move in opposite directions; only HFU "
                f"({row.hfu_vs_none:.2f}×) carries the recomputation"))
    a14 = a14_table(records)
    measured = a14[a14["where"].str.startswith("measured")].set_index("policy")
    analytic = a14[a14["where"].str.startswith("analytic")].set_index("policy")
    if {"selective", "mlp"} <= set(measured.index):
        sel, mlp = measured.loc["selective", "bytes_per_recomputed_flop"], measured.loc["mlp", "bytes_per_recomputed_flop"]
        out.append(Claim(
            "A14", "selective recompute should recompute the MLP and keep the attention activations",
            "activation bytes saved per recomputed FLOP, attention core vs MLP (exact saved bytes, FlopCounterMode)",
            "refuted" if sel > mlp else "confirmed",
            f"measured: attention core {sel:.3g} B/FLOP vs MLP {mlp:.3g} B/FLOP ({sel / mlp:.0f}×); article-13b analytic: "
            f"{analytic.loc['selective', 'bytes_per_recomputed_flop']:.3g} vs {analytic.loc['mlp', 'bytes_per_recomputed_flop']:.3g} "
            f"B/FLOP ({analytic.loc['selective', 'bytes_per_recomputed_flop'] / analytic.loc['mlp', 'bytes_per_recomputed_flop']:.0f}×); "
            "with a flash kernel the a·s² tensors are never stored and the attention-core advantage disappears"))
    a17 = plans[plans.case.str.startswith("A17")]
    if len(a17):
        def pick(policy):
            r = a17[(a17.policy == policy) & (a17.micro_batch == 1)]
            return r.iloc[0] if len(r) else None
        k12, none = pick("every_k:12"), pick("none")
        if k12 is not None and none is not None:
            out.append(Claim(
                "A17", "13B, TP=8, 40 layers, seq 4096, micro-batch 1, ZeRO-2, recompute 12 of 40 layers fits in 64 GB",
                "memory model (Korthikanti Table 2 + ZeRO) for the stated setup, dp = 4 (32 cards, the A4 setting)",
                "analytic only",
                f"{k12.total_gib:.1f} GiB with 12 layers recomputed ({'fits' if k12.fits else 'does not fit'}); "
                f"{none.total_gib:.1f} GiB with no recompute ({'fits' if none.fits else 'does not fit'}); "
                f"model states {none.model_states_gib:.1f} GiB; predicted tokens/s without recompute "
                f"{(none.tokens_per_s or 0) / (k12.tokens_per_s or 1):.2f}× the 12-layer setting"))
    if len(zero_df):
        r = zero_df.iloc[0]
        out.append(Claim(
            "A12", "ZeRO-3 saves memory over ZeRO-2 at the cost of extra parameter all-gathers",
            "ZeRO model-state formulas and per-step traffic (Rajbhandari et al. 2020)", "analytic only",
            f"{r.preset}, TP={r.tp}, dp={r.dp}: ZeRO-2 {r.zero2_gib:.1f} GiB vs ZeRO-3 {r.zero3_gib:.1f} GiB per device "
            f"(saves {r.saved_gib:.1f} GiB, {r.saved_share_of_card:.0%} of the card); traffic {r.zero2_traffic_gib:.1f} → "
            f"{r.zero3_traffic_gib:.1f} GiB per step (+50%)"))
    return out


def headline_metrics(records, plans, zero_df) -> dict:
    s = policy_summary(records)
    return {
        "device": records["device"], "device_name": records["device_name"], "preset": records["params"]["preset"],
        "attn_impl": records["params"]["attn_impl"], "base_micro_batch": records["base_micro_batch"],
        "policies": s.to_dict(orient="records"),
        "budget": budget_table(records).to_dict(orient="records"),
        "chosen_micro_batch": records["chosen_micro_batch"],
        "layer_model_max_abs_rel_error_korthikanti": float(layer_model_vs_measured(records).korthikanti_rel_error.abs().max()),
        "layer_model_max_abs_rel_error_explained": float(layer_model_vs_measured(records).explained_rel_error.abs().max()),
        "gradient_max_abs_diff": records["gradient_max_abs_diff"],
        "skipped_policies": records["skipped"],
        "claims": claims_mod.records(claims(records, plans, zero_df)),
    }


# ---------------------------------------------------------------------------- figures
def plot_saved_by_op(records):
    """Bytes kept for backward by one layer under ``none``, by module and op."""
    import matplotlib.pyplot as plt

    df = saved_table(records)
    layer0 = df[(df.policy == "none") & (df.layer == 0)].copy()
    layer0["what"] = layer0.module.str.replace("blocks.0.", "", regex=False) + " · " + layer0.op
    g = layer0.groupby("what").bytes.sum().sort_values()
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(g) + 1.2))
    ax.barh(g.index, g.values / 2**20)
    ax.set_xlabel("bytes kept for backward (MiB)")
    top = g.index[-1]
    ax.set_title(f"One layer keeps {g.sum() / 2**20:.1f} MiB; the largest tensor: {top}")
    return fig


def plot_model_vs_measured(records):
    import matplotlib.pyplot as plt
    import seaborn as sns

    lm = layer_model_vs_measured(records)
    per = lm.groupby("policy")[["measured_bytes", "korthikanti_bytes", "explained_bytes"]].mean() / 2**20
    per = per.reindex([q for q in records["policies"] if q in per.index])
    long = per.reset_index().melt(id_vars="policy", var_name="source", value_name="MiB")
    long["source"] = long.source.map({"measured_bytes": "measured (saved-tensor hooks)",
                                      "korthikanti_bytes": "Korthikanti Table 2 (adapted)",
                                      "explained_bytes": "Table 2 + named residual terms"})
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.barplot(data=long, x="policy", y="MiB", hue="source", ax=ax)
    ax.set_ylabel("bytes kept per layer (MiB)")
    ax.set_xlabel("recompute policy")
    worst = lm.korthikanti_rel_error.abs().max()
    ax.set_title(f"Table 2 predicts every policy within {worst:.1%} of the exact count")
    ax.legend(fontsize=8)
    return fig


def plot_pareto(records):
    import matplotlib.pyplot as plt

    s = policy_summary(records)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for row in s.itertuples():
        ax.errorbar(row.peak_step_added_bytes / 2**20, row.step_s,
                    yerr=[[row.step_s - row.step_q1_s], [row.step_q3_s - row.step_s]], fmt="o", capsize=3)
        ax.annotate(row.policy, (row.peak_step_added_bytes / 2**20, row.step_s), textcoords="offset points",
                    xytext=(5, 5), fontsize=9)
    ax.set_xlabel(f"memory added by one step, micro-batch {records['base_micro_batch']} (MiB)")
    ax.set_ylabel("forward+backward time (s, median, IQR bars)")
    full = s.set_index("policy")
    title = "Memory vs time per policy"
    if "full" in full.index:
        title = (f"Full recompute: {full.loc['full', 'peak_step_added_bytes'] / full.loc['none', 'peak_step_added_bytes']:.0%}"
                 f" of the memory for {full.loc['full', 'step_s'] / full.loc['none', 'step_s']:.2f}× the time")
    ax.set_title(title)
    return fig


def plot_budget(records):
    import matplotlib.pyplot as plt
    import seaborn as sns

    bt = budget_table(records)
    bt = bt[bt.fits & bt.tokens_per_s_vs_none.notna()]
    long = bt.melt(id_vars=["policy"], value_vars=["tokens_per_s_vs_none", "mfu_vs_none", "hfu_vs_none"],
                   var_name="metric", value_name="ratio")
    long["metric"] = long.metric.map({"tokens_per_s_vs_none": "tokens/s", "mfu_vs_none": "MFU", "hfu_vs_none": "HFU"})
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.barplot(data=long, x="policy", y="ratio", hue="metric", ax=ax)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("relative to 'none' at its own largest batch (×)")
    ax.set_xlabel(f"policy (each at its largest micro-batch within {records['params']['memory_budget_mib']} MiB)")
    ax.set_title("MFU and tokens/s move together; only HFU counts the recomputation")
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, -0.18), ncol=3)
    return fig


def plot_plans(plans):
    import matplotlib.pyplot as plt
    import seaborn as sns

    best = plans.sort_values("micro_batch").groupby(["case", "policy"]).first().reset_index()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    order = list(dict.fromkeys(best.case))
    sns.barplot(data=best, x="case", y="total_gib", hue="policy", order=order, ax=ax)
    for i, case in enumerate(order):
        capacity = best[best.case == case].device_memory_gib.iloc[0]
        ax.hlines(capacity, i - 0.45, i + 0.45, colors="black", linestyles="--", linewidth=1,
                  label="device memory" if i == 0 else None)
    ax.legend(fontsize=8)
    ax.set_ylabel("memory per device at the smallest micro-batch (GiB)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=15)
    ax.set_title("Which policies fit: planner memory per device vs the card (dashed)")
    return fig
