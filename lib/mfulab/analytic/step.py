"""Step time and MFU of one training layout, from its parts: the one step model of the course.
It joins the analytic pieces of :mod:`flops`, :mod:`parallel`, :mod:`memory` and :mod:`comm`,
fed by a device's ``devices.yaml`` figures or by a calibration measured here
(:mod:`mfulab.analytic.rates`). Chapter 08's planner (``layouts.plan``) ranks layouts with it and
chapter 09 validates it against published runs.

Per micro-batch and pipeline stage (a device holds L/p layers, 1/t of each; T = b·s tokens):

    matmuls       each GEMM of the layer, forward (m·n·k) and its two backward GEMMs, at
                  t = t₀ + max(2mnk / R∞, bytes / BW)       Hockney's r∞–n½ form (t₀ = n½/R∞)
                  under a roofline cap (Williams et al. 2009): a GEMM whose operands cost more
                  to move than to multiply runs at memory speed; logits on the last stage.
                  R∞ = ``matmul_share_of_mamf`` × the device's MAMF (its best measured GEMM)
    attention     naive (Megatron 2021–22): QKᵀ and A·V as batched GEMMs over the full s×s,
                  with the score matrix through memory; fused: the causal half of those FLOPs,
                  forward + 2.5× backward (FlashAttention-2 recomputes S), at the device's
                  ``flash_attention_share_of_peak`` · peak (devices.yaml: FlashAttention-2's
                  reach, 0.5 on A100 from Dao 2023, 0.35 on H100 from Shah et al. 2024)
    memory-bound  LayerNorms, bias + GeLU / SwiGLU, bias + dropout + add, rotary, softmax and
                  dropout on the scores (naive only), loss in fp32: bytes each reads and
                  writes (Megatron-LM's fused kernels, Narayanan et al. 2021 §4.2) at
                  ``memory_efficiency`` · BW; backward moves ``backward_traffic_factor`` × as
                  many bytes; with sequence parallelism the norms and dropouts touch T/t rows
    recompute     the forward again of what the policy recomputes (``memory.recompute_plan``:
                  ``full``: the layer; ``selective``: the attention core, Korthikanti et al.
                  2022 §4–5 (nothing under a fused kernel: Megatron-LM does not checkpoint
                  it with --use-flash-attn, and its FLOPs count none either); ``mlp``: the
                  MLP branch; ``block:k``/``uniform:k``: Megatron's
                  --recompute-method, whole layers on k or all of a stage's layers), with the
                  forward TP collectives of what it re-runs
    pipeline      interior stages hold L/p layers; with ``uneven_end_stages`` (Llama 3, BLOOM)
                  the first and last hold fewer, and the slowest stage sets the pace
    tp_comm       4 all-reduces per layer (or 4 all-gathers + 4 reduce-scatters with sequence
                  parallelism) of b·s·h, +2 under full recompute (``parallel``); with
                  ``tp_comm_overlap`` (Megatron --tp-comm-overlap) what the GEMMs cannot hide
    optimizer     Adam over this device's parameter shard, ``optimizer_bytes_per_param`` each
    ep_comm       a MoE layer's four expert-parallel all-to-alls (dispatch, combine; forward
                  and backward), ``ep_a2a_exposed`` of them on the critical path
    cp_comm       what the context-parallel ring's K/V exchange leaves exposed past the
                  attention blocks it overlaps
    (MLA, windowed attention, MoE experts, context parallelism and FP8 GEMMs: the formulas are
    in :mod:`step_modern`; memory in :mod:`step_memory`)

The step (Narayanan et al. 2021 §2.2), in five named steps — :func:`check_layout`,
:func:`stage_terms`, :func:`pipeline_terms` (the bubble from
``parallel.pipeline_schedule_costs``), :func:`dp_terms` (the framework's collectives from
``comm.dp_collectives``, each call priced by NCCL's own latency model and algorithm choice,
``comm.nccl_call_s``) and :func:`memory_terms`:

    step = m·t_mb + bubble + pp_p2p + dp_exposed + optimizer + data

Every constant not measured is a field of :class:`Assumptions` with its source; a calibration
replaces R∞, t₀, BW and the intra-node α–β by this machine's figures. A layout the model
does not cover (naive attention with a latent or windowed config, MoE with TP but no sequence
parallelism, an FP8 step without its scaling recipe, ...) is refused, never approximated.
"""

from __future__ import annotations

from dataclasses import fields, replace

from mfulab.analytic import comm, flops, memory, parallel, step_modern
from mfulab.analytic.config import TransformerConfig, check_attention
from mfulab.analytic.rates import Assumptions, machine_rates
from mfulab.analytic.step_memory import memory_terms
from mfulab.analytic.step_terms import dp_group, dp_terms, pipeline_terms, stage_terms
from mfulab.errors import ParameterError

FRAMEWORKS = ("auto", *comm.DP_FRAMEWORKS)
FP8_DTYPES = step_modern.FP8_DTYPES
DTYPES = ("bf16", "fp16", "tf32", "fp32", *FP8_DTYPES)  # the GEMM precisions the model prices
TERMS = (
    "matmul_s",
    "attention_s",
    "memory_bound_s",
    "recompute_s",
    "tp_comm_s",
    "ep_comm_s",
    "cp_comm_s",
    "pp_bubble_s",
    "pp_p2p_s",
    "dp_comm_exposed_s",
    "optimizer_s",
    "data_s",
)
COMPUTE_TERMS = ("matmul_s", "attention_s", "memory_bound_s", "recompute_s")

# the step model's own names; its figures and assumptions live in ``rates`` (``Rates``,
# ``Assumptions``) and its terms in ``step_terms``, imported from there by every caller
__all__ = ["COMPUTE_TERMS", "DTYPES", "FP8_DTYPES", "FRAMEWORKS", "TERMS", "check_layout", "step_time"]


def _check_int(**values):
    for name, value in values.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ParameterError(f"{name} must be a whole number ≥ 1, got {value!r}")


# ---------------------------------------------------------------------------- 1. the layout
def check_layout(
    cfg: TransformerConfig,
    *,
    n_devices: int,
    tp: int = 1,
    pp: int = 1,
    vpp: int = 1,
    micro_batch: int = 1,
    global_batch: int,
    recompute: str = "none",
    attention: str = "fused",
    sequence_parallel: bool = False,
    zero_stage: int = 0,
    framework: str = "auto",
    devices_per_node: int = 8,
    uneven_end_stages: bool = False,
    context_parallel: int = 1,
    expert_parallel: int = 1,
    expert_tensor_parallel: int = 1,
    dtype: str = "bf16",
    fp8_recipe: str | None = None,
    shard_group: int | None = None,
) -> dict:
    """The layout a step runs, or :class:`ParameterError` with the reason it cannot exist or
    is not modelled: dp = n/(tp·pp), m = B/(dp·b) micro-batches, the layers of an interior and
    of an end stage, the pipeline schedule (``parallel.check_pipeline``), the DP framework
    (``auto``: Megatron's for ZeRO 0–1, DeepSpeed's for 2, FSDP's for 3); dp = n/(tp·pp·cp)
    with context parallelism, and expert parallelism checked by
    ``step_modern.check_modern_layout``."""
    _check_int(n_devices=n_devices, tp=tp, pp=pp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch)
    _check_int(devices_per_node=devices_per_node, context_parallel=context_parallel)
    _check_int(expert_parallel=expert_parallel, expert_tensor_parallel=expert_tensor_parallel)
    if dtype not in DTYPES:
        raise ParameterError(f"the step model prices GEMMs in {', '.join(DTYPES)}; {dtype!r} is not modelled")
    cp, ep, etp = context_parallel, expert_parallel, expert_tensor_parallel
    step_modern.check_modern_layout(
        cfg,
        tp=tp,
        cp=cp,
        ep=ep,
        etp=etp,
        sequence_parallel=sequence_parallel,
        attention=attention,
        n_devices=n_devices,
        pp=pp,
        dtype=dtype,
        fp8_recipe=fp8_recipe,
    )
    memory.recompute_plan(recompute, cfg.n_layers)  # refuses a policy it does not model
    check_attention(attention)
    if framework not in FRAMEWORKS:
        raise ParameterError(f"framework must be one of {', '.join(FRAMEWORKS)}; got {framework!r}")
    if zero_stage not in (0, 1, 2, 3):
        raise ParameterError(f"zero_stage must be 0, 1, 2 or 3; got {zero_stage!r}")
    if framework == "auto":
        framework = {0: "megatron", 1: "megatron", 2: "deepspeed", 3: "fsdp"}[zero_stage]
    if zero_stage not in comm.DP_ZERO_STAGES[framework]:
        raise ParameterError(
            f"{framework} runs ZeRO stage {' or '.join(map(str, comm.DP_ZERO_STAGES[framework]))}, "
            f"not {zero_stage}"
        )
    if framework == "deepspeed" and zero_stage >= 2 and pp > 1:
        raise ParameterError(
            "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 with pipeline parallelism "
            "(deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__; deepspeedai/DeepSpeed@03f6f75)"
        )
    if n_devices % (tp * pp * cp):
        raise ParameterError(f"tp·pp·cp = {tp * pp * cp} does not divide {n_devices} devices")
    dp = n_devices // (tp * pp * cp)
    comm.check_shard_group(shard_group, dp=dp, framework=framework)
    if cfg.n_heads % tp or cfg.n_kv_heads % tp or cfg.d_ff % tp:
        raise ParameterError(
            f"tp = {tp} does not divide the {cfg.n_heads} heads, {cfg.n_kv_heads} key-value heads and "
            f"d_ff = {cfg.d_ff} of {cfg.name}"
        )
    if global_batch % (dp * micro_batch):
        raise ParameterError(
            f"global batch {global_batch} does not split into dp = {dp} replicas × micro-batches of "
            f"{micro_batch}"
        )
    m = global_batch // (dp * micro_batch)
    interior_layers = -(-cfg.n_layers // pp)  # the most any stage holds
    if uneven_end_stages and pp > 2:  # the two end stages share what the interior ones leave
        end_layers = (cfg.n_layers - (pp - 2) * interior_layers) / 2
        if end_layers <= 0:
            raise ParameterError(f"{cfg.n_layers} layers leave nothing for the end stages of {pp} stages")
    elif cfg.n_layers % pp:
        raise ParameterError(
            f"{cfg.n_layers} layers do not split over pp = {pp} stages (uneven_end_stages=True puts "
            "fewer on the first and last)"
        )
    else:
        end_layers = interior_layers
    schedule = parallel.check_pipeline(p=pp, m=m, v=vpp, n_layers=interior_layers * pp)
    if n_devices > devices_per_node and n_devices % devices_per_node:
        raise ParameterError(f"{n_devices} devices do not fill nodes of {devices_per_node}")
    return {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "dp": dp,
        "micro_batch": micro_batch,
        "m": m,
        "interior_layers": interior_layers,
        "end_layers": end_layers,
        "schedule": schedule,
        "sequence_parallel": bool(sequence_parallel and tp > 1),
        "zero_stage": zero_stage,
        "framework": framework,
        "devices_per_node": devices_per_node,
        "n_devices": n_devices,
        "shard_group": shard_group,  # HSDP: ZeRO shards over these ranks, replicated across the rest
        "cp": cp,
        "ep": ep,
        "etp": etp,
        "dtype": dtype,
        "fp8_recipe": fp8_recipe,
    }


# ---------------------------------------------------------------------------- the step
def step_time(
    cfg: TransformerConfig,
    *,
    n_devices: int,
    tp: int = 1,
    pp: int = 1,
    vpp: int = 1,
    micro_batch: int = 1,
    global_batch: int,
    recompute: str = "none",
    sequence_parallel: bool = False,
    zero_stage: int = 0,
    framework: str = "auto",
    device: str | None,
    devices_per_node: int = 8,
    calibration=None,
    overlap: bool = True,
    overlap_param_gather: bool = False,
    tp_comm_overlap: bool = False,
    attention: str = "fused",
    dropout: bool = False,
    dtype: str = "bf16",
    uneven_end_stages: bool = False,
    context_parallel: int = 1,
    expert_parallel: int = 1,
    expert_tensor_parallel: int = 1,
    fp8_recipe: str | None = None,
    shard_group: int | None = None,
    assumptions: Assumptions | None = None,
    **overrides,
) -> dict:
    """Predicted step of one layout: ``step_s``, ``tokens_per_s``, MFU and HFU under the PaLM
    and Megatron conventions (``mfu_palm``, ``hfu_palm``, ``mfu_megatron``, ``hfu_megatron``),
    achieved model TFLOP/s per device, the breakdown :data:`TERMS` (seconds per step, summing
    to ``step_s``; ``forward_s`` and ``backward_s`` split its compute terms by pass), memory per
    device and whether it fits, ``dp_group`` (the DP group NCCL reduces in:
    ``step_terms.dp_group``), and ``sources``: where each machine
    figure came from. ``device`` names a ``devices.yaml`` entry; ``calibration`` a
    ``results/<machine>/calibration`` folder; ``overrides`` set fields of :class:`Assumptions`.
    The five steps are :func:`check_layout`, :func:`stage_terms`, :func:`pipeline_terms`,
    :func:`dp_terms` and :func:`memory_terms`. Raises :class:`ParameterError` for a layout that
    cannot exist or that the model does not cover."""
    unknown = set(overrides) - {f.name for f in fields(Assumptions)}
    if unknown:
        raise ParameterError(
            f"unknown assumption(s) {sorted(unknown)}; known: {[f.name for f in fields(Assumptions)]}"
        )
    a = replace(assumptions or Assumptions(), **overrides)
    layout = check_layout(
        cfg,
        n_devices=n_devices,
        tp=tp,
        pp=pp,
        vpp=vpp,
        micro_batch=micro_batch,
        global_batch=global_batch,
        recompute=recompute,
        attention=attention,
        sequence_parallel=sequence_parallel,
        zero_stage=zero_stage,
        framework=framework,
        devices_per_node=devices_per_node,
        uneven_end_stages=uneven_end_stages,
        context_parallel=context_parallel,
        expert_parallel=expert_parallel,
        expert_tensor_parallel=expert_tensor_parallel,
        dtype=dtype,
        fp8_recipe=fp8_recipe,
        shard_group=shard_group,
    )
    fp8 = dtype in step_modern.FP8_DTYPES
    base_dtype = "bf16" if fp8 else dtype  # an FP8 step keeps its other work in bf16
    a = replace(a, grad_bytes_per_elem=a.grad_reduce_bytes_per_elem(layout["framework"], base_dtype))
    rates = machine_rates(device, dtype=base_dtype, calibration=calibration, assumptions=a)
    if fp8:
        gemm_rates = step_modern.fp8_rates(
            rates, device=device, relative_efficiency=a.fp8_matmul_relative_efficiency
        )
        layout["fp8"] = {"rates": gemm_rates, "recipe": fp8_recipe}
    m = layout["m"]

    per_mb = stage_terms(
        cfg,
        layout,
        rates=rates,
        a=a,
        recompute=recompute,
        attention=attention,
        dropout=dropout,
        tp_comm_overlap=tp_comm_overlap,
    )
    forward_mb_s = per_mb.pop("forward_s")
    t_mb = sum(per_mb.values())
    terms = {k: m * v for k, v in per_mb.items()}
    pipe = pipeline_terms(cfg, layout, t_mb_s=t_mb, rates=rates, a=a)
    terms["pp_bubble_s"], terms["pp_p2p_s"] = pipe["pp_bubble_s"], pipe["pp_p2p_s"]

    compute_step_s = sum(terms[k] for k in COMPUTE_TERMS)
    forward_s = m * forward_mb_s
    dp = dp_terms(
        cfg,
        layout,
        rates=rates,
        a=a,
        forward_s=forward_s,
        backward_s=compute_step_s - forward_s,
        overlap=overlap,
        overlap_param_gather=overlap_param_gather,
    )
    terms["dp_comm_exposed_s"] = dp["dp_comm_exposed_s"]
    if step_modern.is_modern(cfg, cp=context_parallel, ep=expert_parallel):
        shard = step_modern.params_per_device(cfg, layout)
        sharded = zero_stage >= 1
        shard_params = shard["dense"] / (shard["dense_dp"] if sharded else 1)
        shard_params += shard["expert"] / (shard["expert_dp"] if sharded else 1)
    else:
        n_params_shard = flops.param_count(cfg) / (tp * pp)
        shard_params = n_params_shard / ((shard_group or layout["dp"]) if zero_stage >= 1 else 1)
    terms["optimizer_s"] = a.optimizer_bytes_per_param * shard_params / rates.memory_bytes_per_s
    terms["data_s"] = a.data_s
    step_s = sum(terms[k] for k in TERMS)

    tokens = global_batch * cfg.seq_len
    peak_total = n_devices * rates.peak_flops_per_s * step_s

    plan = memory.recompute_plan(recompute, cfg.n_layers)
    recomputed_share = plan.form_share(layout["interior_layers"])

    classic = cfg.moe is None and cfg.mla is None and cfg.windows is None

    def util(convention, policy):
        if convention == "megatron" and not classic:
            return None  # Korthikanti's formula is for dense GPT blocks (flops.megatron_flops_per_token)
        form, share = (plan.table2, recomputed_share) if policy != "none" else ("none", 0.0)
        if form == "selective" and attention == "fused":
            # a fused kernel keeps no attention core to re-run: Megatron-LM skips the checkpointed core
            # attention under --use-flash-attn (megatron/legacy/model/transformer.py at 00caa53,
            # ParallelAttention.forward), as step_terms prices it (no seconds): no FLOPs either
            form, share = "none", 0.0
        hardware = flops.recompute_flops_per_token(cfg, convention=convention, form=form, share=share)
        return hardware * tokens / peak_total

    mem = memory_terms(
        cfg, layout, rates=rates, a=a, recompute=recompute, attention=attention, dropout=dropout
    )
    return {
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu_palm": util("palm", "none"),
        "hfu_palm": util("palm", recompute),
        "mfu_megatron": util("megatron", "none"),
        "hfu_megatron": util("megatron", recompute),
        "model_tflops_per_device": flops.flops_per_token(cfg, convention="palm")
        * tokens
        / (n_devices * step_s)
        / 1e12,
        **terms,
        "forward_s": forward_s,
        "backward_s": compute_step_s - forward_s,
        "dp_comm_s": dp["dp_comm_s"],
        "dp_calls": dp["dp_calls"],
        "dp_algorithms": dp["dp_algorithms"],
        "dp_group": dp_group(layout, rates=rates, a=a) if layout["dp"] > 1 else None,
        "framework": layout["framework"],
        "layout": {k: layout[k] for k in ("tp", "pp", "vpp", "dp", "micro_batch", "m")},
        "schedule": layout["schedule"],
        **mem,
        "peak_flops_per_s": rates.peak_flops_per_s,
        "sources": rates.sources
        if not fp8
        else {**rates.sources, "fp8": step_modern.fp8_source(a, fp8_recipe)},
        # every field is a scalar: a shallow copy is asdict's result without its deep copies
        # (a planner prices thousands of layouts)
        "assumptions": {f.name: getattr(a, f.name) for f in fields(a)},
    }
