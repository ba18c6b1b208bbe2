"""Measurement of the ``recompute`` study (torch, headless).

Policies (``gpt.GPT(recompute=...)``, vocabulary ``config.RECOMPUTE_POLICIES``): ``none``;
``selective`` — the attention core (Korthikanti et al. 2022); ``mlp`` — norm2 + MLP (article
A's A14 suggestion); ``full`` — every block; ``every_k`` — ``full`` on the first k blocks
(Megatron's ``--recompute-num-layers``); ``sac`` — torch's selective activation
checkpointing keeping matmul outputs (where the installed torch has it).

Measurements:
- **Saved bytes for backward, exactly**: ``memprobe.SavedTensorAccountant`` sees every tensor
  autograd keeps; storages are deduplicated and parameters excluded; each tensor is named by
  its op and layer. Non-reentrant checkpoints keep their inputs without the pack hook, so
  ``measure.gpt`` reports them through ``CHECKPOINT_OBSERVERS``. SAC keeps its matmul outputs in
  its own cache, which the hook cannot see: its saved bytes are left out, its peak memory is
  measured.
- **Peak memory**: a fresh subprocess per point on CPU (``memprobe.run_in_fresh_process``: the
  peak RSS is sticky, so no warm-up runs in the measured process), ``memprobe.cuda_peak_of``
  on GPU.
- **Hardware FLOPs** with ``FlopCounterMode`` over forward + backward, which also counts the
  recomputed forward; naive attention so the counter sees the attention matmuls on CPU.
- **Step time** of forward + backward, every (policy, micro-batch) point timed interleaved in
  rounds (``timing.interleaved``), so comparisons between policies are paired by round.
- **A14 under both attentions**: the saved bytes of ``none``, ``selective`` and ``mlp`` with
  naive attention and with SDPA (on CPU torch picks its flash kernel, which keeps q, k, v,
  its output and one log-sum-exp per row and head), whatever ``attn_impl`` the rest uses.
- **Correctness gate**: every policy's gradients equal those of ``none``.
- **Precision**: peak memory, gradients and step time run in ``dtype`` (bf16 / fp16: the
  forward under autocast, ``timing.autocast``), each row labelled with it and the TF32 state
  recorded; the exact saved-bytes accounting and the FLOP count stay fp32, the element size
  of the formula they check.
"""

from __future__ import annotations

from mfulab.analytic.config import RECOMPUTE_PARTIAL, TransformerConfig, check_recompute
from mfulab.errors import ParameterError
from mfulab.measure import host, memprobe
from mfulab.measure.timing import autocast, dtype_label, tf32_state
from mfulab.measure.train import forward_backward
from mfulab.studies.recompute.params import ATTN_IMPLS, POLICIES, Params
from mfulab.units import MIB

BENCHMARK_VERSION = {
    "saved_bytes": 1,
    "a14_saved_bytes": 1,
    "peak_memory": 2,
    "step_time": 2,
    "hardware_flops": 1,
}
A14_POLICIES = RECOMPUTE_PARTIAL
PEAK_WORKER = "mfulab.studies.recompute.bench:_peak_worker"


def sac_available() -> bool:
    import torch.utils.checkpoint as ckpt

    return hasattr(ckpt, "create_selective_checkpoint_contexts")


def model_kwargs(policy: str, *, every_k: int, n_layers: int) -> dict:
    """``gpt.GPT`` keyword arguments for one study policy."""
    check_recompute(policy, POLICIES)
    if policy == "every_k":
        if not (isinstance(every_k, int) and 1 <= every_k <= n_layers):
            raise ParameterError(f"every_k must be between 1 and n_layers={n_layers}; got {every_k!r}")
        return {"recompute": "full", "recompute_layers": every_k}
    return {"recompute": policy}


def _build(cfg, policy, every_k, attn_impl, device):
    import torch

    from mfulab.measure.gpt import GPT

    torch.manual_seed(0)
    kwargs = model_kwargs(policy, every_k=every_k, n_layers=cfg.n_layers)
    return GPT(cfg, attn_impl=attn_impl, **kwargs).to(device)


def saved_tensors(
    cfg: TransformerConfig,
    *,
    policy: str,
    every_k: int,
    micro_batch: int,
    attn_impl: str,
    device: str = "cpu",
) -> list[dict]:
    """The deduplicated tensors one forward pass keeps for backward under ``policy``."""
    import torch

    model = _build(cfg, policy, every_k, attn_impl, device)
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device=device)
    with memprobe.SavedTensorAccountant(model) as acc:
        _, loss = model(idx, idx)
    rows = acc.unique()
    del loss
    for r in rows:
        r.pop("storage")
        r["shape"] = list(r["shape"])
    return rows


# ---------------------------------------------------------------------------- peak memory
def _peak_worker(spec: dict) -> dict:
    """Runs in a fresh process: one forward+backward; returns RSS before and at the peak."""
    import torch

    from mfulab.measure.gpt import GPT

    torch.set_num_threads(spec["num_threads"])
    cfg = TransformerConfig(**spec["config"])
    # Lazy imports on the first checkpointed backward (torch.utils.checkpoint, SAC) take tens
    # of MB: trigger them on a one-layer toy model, then reset the peak before measuring.
    toy = TransformerConfig(n_layers=1, d_model=8, n_heads=1, vocab_size=8, seq_len=4)
    toy_kwargs = {
        **spec["model_kwargs"],
        **({"recompute_layers": 1} if "recompute_layers" in spec["model_kwargs"] else {}),
    }
    toy_idx = torch.zeros(1, 4, dtype=torch.long)
    _, toy_loss = GPT(toy, attn_impl=spec["attn_impl"], **toy_kwargs)(toy_idx, toy_idx)
    toy_loss.backward()
    del toy_loss
    torch.manual_seed(0)
    model = GPT(cfg, attn_impl=spec["attn_impl"], **spec["model_kwargs"])
    idx = torch.randint(0, cfg.vocab_size, (spec["micro_batch"], cfg.seq_len))
    return memprobe.peak_rss_of(forward_backward(model, idx, dtype=spec["dtype"]))


def peak_memory(
    cfg: TransformerConfig,
    *,
    policy: str,
    every_k: int,
    micro_batch: int,
    attn_impl: str,
    device: str,
    num_threads: int,
    dtype: str = "fp32",
    timeout_s: float = 300,
) -> dict:
    """Peak memory of one forward+backward: a fresh process's peak RSS on CPU (the delta
    over the RSS just before the forward is what the step added), or CUDA's allocator peak."""
    kwargs = model_kwargs(policy, every_k=every_k, n_layers=cfg.n_layers)
    if device == "cuda":
        import torch

        model = _build(cfg, policy, every_k, attn_impl, "cuda")
        idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device="cuda")
        out = memprobe.cuda_peak_of(forward_backward(model, idx, dtype=dtype))
        del model
        return out
    spec = {
        "config": cfg.to_dict(),
        "policy": policy,
        "model_kwargs": kwargs,
        "micro_batch": micro_batch,
        "attn_impl": attn_impl,
        "num_threads": num_threads,
        "dtype": dtype,
    }
    return memprobe.run_in_fresh_process(PEAK_WORKER, spec, timeout_s=timeout_s)


# ---------------------------------------------------------------------------- FLOPs, gradients, time
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


def gradients(
    cfg: TransformerConfig,
    *,
    policy: str,
    every_k: int,
    attn_impl: str,
    device: str,
    micro_batch: int,
    dtype: str = "fp32",
):
    import torch

    model = _build(cfg, policy, every_k, attn_impl, device)
    gen = torch.Generator().manual_seed(3)
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), generator=gen).to(device)
    with autocast(device, dtype):
        _, loss = model(idx, idx)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def step_times(
    cfg: TransformerConfig,
    points,
    *,
    every_k: int,
    attn_impl: str,
    device: str,
    rounds: int,
    num_threads: int,
    dtype: str = "fp32",
) -> dict:
    """Forward + backward time of every (policy, micro-batch) in ``points``, timed
    interleaved (``timing.interleaved``: each round runs every point once, in a shuffled
    order), so that drift hits every policy alike and the rounds pair up in comparisons."""
    import torch

    from mfulab.measure.timing import interleaved

    steps, models = {}, {}  # one model per policy: its micro-batches share it (fewer resident on a GPU)
    for policy, micro_batch in points:
        if policy not in models:
            models[policy] = _build(cfg, policy, every_k, attn_impl, device)
        model = models[policy]
        idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device=device)
        steps[f"{policy}@{micro_batch}"] = forward_backward(model, idx, dtype=dtype)
    return interleaved(
        steps, rounds=rounds, device=device, num_threads=num_threads, warmup=1, desc="step time (interleaved)"
    )


# ---------------------------------------------------------------------------- measure
def search_micro_batches(policies, micro_batches, max_micro_batch, fits, progress=lambda xs, _: xs) -> dict:
    """Call ``fits(policy, micro_batch)`` (which measures a point) on every policy at every
    micro-batch of the grid; then each policy whose largest grid micro-batch still fits doubles
    it until it no longer fits or would pass ``max_micro_batch``. Returns, per policy, whether
    the largest micro-batch tried still fits (the search limit, not the memory, stopped it)."""
    fits_at_top = {}
    points = [(q, mb) for q in policies for mb in sorted(micro_batches)]
    for q, mb in progress(points, "peak memory (fresh processes)"):
        fits_at_top[q] = fits(q, mb)
    mb = max(micro_batches)
    while mb * 2 <= max_micro_batch and any(fits_at_top.values()):
        mb *= 2
        for q in [q for q, ok in fits_at_top.items() if ok]:
            fits_at_top[q] = fits(q, mb)
    return fits_at_top


def measure(p: Params) -> dict:
    """Everything the study measures on this device (see the module docstring)."""
    import torch

    from mfulab.measure.timing import progress

    p = p.prepared()
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    threads = torch.get_num_threads()
    device, cfg, every_k, attn = p.device, p.model_config(), p.every_k, p.attn_impl
    policies = [q for q in p.policies if q != "sac" or sac_available()]
    skipped = (
        {"sac": "torch.utils.checkpoint has no create_selective_checkpoint_contexts"}
        if "sac" in p.policies and not sac_available()
        else {}
    )
    base_mb = min(p.micro_batches)
    rec = {
        "study": "recompute",
        "params": p.to_dict(),
        "device": device,
        "num_threads": threads,
        "config": cfg.to_dict(),
        "device_name": host.device_name(device),
        "policies": policies,
        "skipped": skipped,
        "base_micro_batch": base_mb,
        "dtype": dtype_label(p.dtype),
        "accounting_dtype": "fp32",
        "tf32_matmul": tf32_state(device),
        "benchmark_version": BENCHMARK_VERSION,
    }
    rec["saved"] = {
        q: saved_tensors(cfg, policy=q, every_k=every_k, micro_batch=base_mb, attn_impl=attn, device=device)
        for q in policies
    }
    rec["a14_saved"] = {
        impl: {
            q: rec["saved"][q]
            if impl == attn
            else saved_tensors(
                cfg, policy=q, every_k=every_k, micro_batch=base_mb, attn_impl=impl, device=device
            )
            for q in A14_POLICIES
            if q in policies
        }
        for impl in ATTN_IMPLS
    }
    rec["hardware_flops_per_token"] = {
        q: hardware_flops_per_token(cfg, policy=q, every_k=every_k, device=device) for q in policies
    }
    grad_kw = dict(every_k=every_k, attn_impl=attn, device=device, micro_batch=base_mb, dtype=p.dtype)
    ref = gradients(cfg, policy="none", **grad_kw)
    rec["gradient_max_abs_diff"] = {}
    for q in policies:
        g = gradients(cfg, policy=q, **grad_kw)
        rec["gradient_max_abs_diff"][q] = max(float((g[n] - ref[n]).abs().max()) for n in ref)
        del g
    del ref  # two models' gradients, not to stay resident through the peaks and the timing
    budget = p.memory_budget_mib * MIB

    def measure_peak(q, mb):
        kw = dict(every_k=every_k, micro_batch=mb, attn_impl=attn, device=device, num_threads=threads)
        row = {"policy": q, "micro_batch": mb, "dtype": rec["dtype"]}
        row.update(peak_memory(cfg, policy=q, dtype=p.dtype, **kw))
        rec["peak"].append(row)
        return row["step_added_bytes"] is not None and row["step_added_bytes"] <= budget  # None: OOM

    rec["peak"] = []
    limit_reached = search_micro_batches(
        policies, p.micro_batches, p.max_micro_batch, measure_peak, progress=progress
    )
    rec["chosen_micro_batch"], rec["micro_batch_limit_reached"] = {}, {}
    for q in policies:
        fitting = [
            r["micro_batch"]
            for r in rec["peak"]
            if r["policy"] == q and r["step_added_bytes"] is not None and r["step_added_bytes"] <= budget
        ]
        rec["chosen_micro_batch"][q] = max(fitting) if fitting else None
        rec["micro_batch_limit_reached"][q] = limit_reached[q]
    timing_points = sorted(
        {(q, base_mb) for q in policies}
        | {(q, mb) for q, mb in rec["chosen_micro_batch"].items() if mb is not None}
    )
    timed = step_times(
        cfg,
        timing_points,
        every_k=every_k,
        attn_impl=attn,
        device=device,
        rounds=p.timing_rounds,
        num_threads=threads,
        dtype=p.dtype,
    )
    rec["timing"] = [
        {
            "policy": q,
            "micro_batch": mb,
            "dtype": rec["dtype"],
            **timed[f"{q}@{mb}"].to_dict(with_samples=True),
        }
        for q, mb in timing_points
    ]
    if p.b7_rounds and "full" in policies:
        # B7 at the same batch: full against none alone, more rounds than the whole grid affords
        b7 = step_times(
            cfg,
            [("none", base_mb), ("full", base_mb)],
            every_k=every_k,
            attn_impl=attn,
            device=device,
            rounds=p.b7_rounds,
            num_threads=threads,
            dtype=p.dtype,
        )
        rec["b7_timing"] = [
            {
                "policy": q,
                "micro_batch": base_mb,
                "dtype": rec["dtype"],
                **b7[f"{q}@{base_mb}"].to_dict(with_samples=True),
            }
            for q in ("none", "full")
        ]
    return rec
