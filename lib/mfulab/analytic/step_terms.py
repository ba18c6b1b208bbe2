"""The terms of one training step, each a named function of the step model
(:func:`step.step_time` joins them; the module docstring there gives the formulas):
:func:`gemm_s` and :func:`layer_terms` (a layer's GEMMs, attention and memory-bound ops for one
micro-batch), :func:`stage_terms` (the slowest pipeline stage, with its TP collectives),
:func:`pipeline_terms` (the bubble of ``parallel.pipeline_schedule_costs`` and the
point-to-point sends), :func:`dp_terms` (the framework's DP collectives from
``comm.dp_collectives``, each call priced by ``comm.nccl_call_s``); memory is
:func:`step_memory.memory_terms`, and the terms of MoE, latent and windowed attention, context
parallelism and FP8 GEMMs are :mod:`step_modern`'s."""

from __future__ import annotations

import functools
import math

from mfulab.analytic import blocks, comm, flops, memory, parallel, step_modern
from mfulab.analytic.config import TransformerConfig
from mfulab.analytic.rates import Assumptions, Rates, flash_attention_share

# blocks.layer_groups once per config (frozen, hashable): a validation prices ~20,000 steps
_layer_groups = functools.lru_cache(maxsize=256)(blocks.layer_groups)


def gemm_s(
    m: float, n: float, k: float, rates: Rates, *, count: float = 1, bytes_per_elem: float = 2
) -> float:
    """Seconds of ``count`` independent (m × k)·(k × n) products issued as one kernel: one
    launch t₀, then the larger of the arithmetic (2mnk·count / R∞) and the traffic (operands
    and result once through memory, e·(mk + kn + mn)·count / BW)."""
    flops_total = 2.0 * m * n * k * count
    bytes_total = bytes_per_elem * (m * k + k * n + m * n) * count
    return rates.matmul_latency_s + max(
        flops_total / rates.matmul_flops_per_s, bytes_total / rates.memory_bytes_per_s
    )


def _fwd_bwd_gemm_s(m, n, k, rates, e, count=1) -> tuple[float, float]:
    """Forward GEMM and its backward pair (input gradient m×n·n×k, weight gradient k×m·m×n)."""
    forward = gemm_s(m, n, k, rates, count=count, bytes_per_elem=e)
    backward = gemm_s(m, k, n, rates, count=count, bytes_per_elem=e) + gemm_s(
        k, n, m, rates, count=count, bytes_per_elem=e
    )
    return forward, backward


# ---------------------------------------------------------------------------- 2. one stage
def layer_terms(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int,
    sequence_parallel: bool,
    attention: str,
    dropout: bool,
    rates: Rates,
    a: Assumptions,
    layer: int = 0,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    fp8: dict | None = None,
) -> dict:
    """Seconds of block ``layer`` for one micro-batch on one device: forward and backward of
    each op class (module docstring of :mod:`step`; its GEMMs, experts, context split and FP8
    casts from :mod:`step_modern`); the forward parts a recompute policy re-runs are returned
    as ``full_forward_s``, ``attention_forward_s`` and ``mlp_forward_s``; ``a2a_bytes``: what
    one all-to-all of its experts moves. ``fp8``: {"rates", "recipe"} for FP8 GEMMs."""
    e, s, h = a.bytes_per_elem, cfg.seq_len, cfg.d_model
    T = micro_batch * s / cp if cp > 1 else micro_batch * s  # tokens of the micro-batch on this rank
    H, Hkv = cfg.n_heads // tp, cfg.n_kv_heads // tp
    ffn = step_modern.ffn_gemms(
        cfg, layer, tokens=T, tp=tp, ep=ep, etp=etp, load_imbalance=a.moe_load_imbalance
    )
    attn = [(m_, n_, k_, 1) for m_, n_, k_ in step_modern.attention_gemms(cfg, tokens=T, tp=tp)]
    lin_rates, lin_e = (fp8["rates"], 1.0) if fp8 else (rates, e)
    mm_f = mm_b = mlp_mm_f = 0.0
    for i, (m_, n_, k_, count) in enumerate(attn + ffn["gemms"]):
        fw, bw = _fwd_bwd_gemm_s(m_, n_, k_, lin_rates, lin_e, count)
        mm_f, mm_b = mm_f + fw, mm_b + bw
        mlp_mm_f += fw if i >= len(attn) else 0.0  # the FFN's up (and gate) and down projections
    if ffn["router"] is not None:  # the router stays in 16 bits
        fw, bw = _fwd_bwd_gemm_s(*ffn["router"], rates, e)
        mm_f, mm_b, mlp_mm_f = mm_f + fw, mm_b + bw, mlp_mm_f + fw

    bw_eff = rates.elementwise_rate()
    heads_in_batch = micro_batch * H
    score_elems = heads_in_batch * s * s
    if attention == "naive":
        q = cfg.head_dim
        qk_f, qk_b = _fwd_bwd_gemm_s(s, s, q, rates, e, count=heads_in_batch)
        av_f, av_b = _fwd_bwd_gemm_s(s, q, s, rates, e, count=heads_in_batch)
        # scale + mask + softmax (read scores, write probabilities) and dropout (read, write, 1-byte
        # mask) forward; backward reads probabilities and gradients and writes gradients for both
        score_fwd_bytes = score_elems * (2 * e + ((2 * e + 1) if dropout else 0))
        score_bwd_bytes = score_elems * (3 * e + ((2 * e + 1) if dropout else 0))
        att_f = qk_f + av_f + score_fwd_bytes / bw_eff
        att_b = qk_b + av_b + score_bwd_bytes / bw_eff
    else:
        kernel = step_modern.attention_kernel_flops(cfg, layer, heads_in_batch=heads_in_batch, cp=cp)
        flash_rate = rates.flash_attention_flops_per_s  # machine_rates: the device's share of its peak
        if flash_rate is None:  # Rates built by hand: no device figure
            flash_rate = flash_attention_share(a)[0] * rates.peak_flops_per_s
        att_f = rates.matmul_latency_s + kernel["forward_flops"] / flash_rate
        att_b = rates.matmul_latency_s + kernel["backward_flops"] / flash_rate

    rows = T / tp if sequence_parallel else T  # rows the norms, dropouts and residuals touch
    norm_bytes = 2 * 2 * rows * h * e  # two norms, each reads and writes its rows
    residual_bytes = 2 * rows * h * ((3 * e + 1) if dropout else 3 * e)  # (bias +) dropout + add
    act_bytes = ffn["act_elems"] * e * (3 if cfg.mlp == "swiglu" else 2)  # bias + GeLU, or SiLU(gate)·up
    if cfg.learned_positions:
        rotary_bytes = 0.0
    elif cfg.mla is not None:  # the decoupled rotary part: every query head, one shared key
        rotary_bytes = 2 * T * (H + 1) * cfg.mla.qk_rope_head_dim * e
    else:
        rotary_bytes = 2 * T * (H + Hkv) * cfg.head_dim * e
    permute_bytes = 2 * 2 * ffn["routed_rows"] * h * e  # tokens to expert order and back, read + write
    elem_f = (norm_bytes + residual_bytes + act_bytes + rotary_bytes + permute_bytes) / bw_eff
    elem_b = a.backward_traffic_factor * elem_f
    if fp8:
        cast_f, cast_b = step_modern.fp8_cast_bytes(
            attn + ffn["gemms"], recipe=fp8["recipe"], bytes_per_elem=a.fp8_cast_bytes_per_elem
        )
        elem_f, elem_b = elem_f + cast_f / bw_eff, elem_b + cast_b / bw_eff
    return {
        "matmul_s": mm_f + mm_b,
        "attention_s": att_f + att_b,
        "memory_bound_s": elem_f + elem_b,
        "forward_s": mm_f + att_f + elem_f,
        "full_forward_s": mm_f + att_f + elem_f,
        # what selective recompute re-runs: the naive core; a fused kernel's is not checkpointed
        # (Megatron-LM under --use-flash-attn), its backward recomputing the scores inside
        "attention_forward_s": att_f if attention == "naive" else 0.0,
        # the MLP branch from its input: its GEMMs, its activation and the second norm
        "mlp_forward_s": mlp_mm_f + (act_bytes + norm_bytes / 2) / bw_eff,
        "activation_forward_s": act_bytes / bw_eff,  # the activation function alone (memory-bound)
        "attention_kernel_f_s": att_f,
        "attention_kernel_b_s": att_b,
        "a2a_bytes": ffn["routed_rows"] * h * e,
    }


def _edge_terms(
    cfg: TransformerConfig, *, micro_batch: int, tp: int, cp: int = 1, rates: Rates, a: Assumptions
) -> dict:
    """The first stage's embedding and the last stage's logits and loss, per micro-batch (of
    this rank's b·s/cp tokens)."""
    e, T, h, V = a.bytes_per_elem, micro_batch * cfg.seq_len // cp, cfg.d_model, cfg.vocab_size
    fw, bw = _fwd_bwd_gemm_s(T, V / tp, h, rates, e)
    loss_bytes = T * V / tp * a.loss_bytes_per_logit
    embedding_bytes = (1 + a.backward_traffic_factor) * 2 * T * h * e  # lookup, and its scatter-add
    return {
        "logits_matmul_s": fw + bw,
        "logits_forward_s": fw,
        "loss_s": loss_bytes / rates.elementwise_rate(),
        "embedding_s": embedding_bytes / rates.elementwise_rate(),
    }


def stage_terms(
    cfg: TransformerConfig,
    layout: dict,
    *,
    rates: Rates,
    a: Assumptions,
    recompute: str,
    attention: str,
    dropout: bool,
    tp_comm_overlap: bool = False,
) -> dict:
    """Seconds of one micro-batch on the slowest pipeline stage, by term (compute terms, and
    the TP collectives exposed: all of them, or with ``tp_comm_overlap`` what
    ``tp_overlap_share`` of the layer's GEMM time cannot hide), plus its ``forward_s``."""
    tp, b, sp = layout["tp"], layout["micro_batch"], layout["sequence_parallel"]
    cp, ep, etp = layout.get("cp", 1), layout.get("ep", 1), layout.get("etp", 1)
    per_node = layout["devices_per_node"]
    kw = dict(
        micro_batch=b, tp=tp, sequence_parallel=sp, attention=attention, dropout=dropout, rates=rates, a=a
    )
    # layers alike in FFN kind and window price alike (blocks.layer_groups): a stage runs the mean
    groups = _layer_groups(cfg)
    by_group = [
        (n, layer_terms(cfg, layer=first, cp=cp, ep=ep, etp=etp, fp8=layout.get("fp8"), **kw))
        for first, n in groups
    ]
    if len(by_group) == 1:
        layer = by_group[0][1]
    else:
        layer = {k: sum(n * t[k] for n, t in by_group) / cfg.n_layers for k in by_group[0][1]}
    # expert parallelism: dispatch + combine forward and backward, 4 all-to-alls per MoE layer
    a2a_alpha_s = (rates.intra if ep * etp <= per_node else rates.inter).alpha_s
    a2a_s = step_modern.all_to_all_s(
        layer["a2a_bytes"], ep=ep, etp=etp, devices_per_node=per_node, rates=rates, alpha_s=a2a_alpha_s
    )
    layer["ep_comm_s"] = a.ep_a2a_exposed * 4 * a2a_s
    layer["cp_comm_s"] = step_modern.context_ring_exposed_s(
        cfg,
        micro_batch=b,
        tp=tp,
        cp=cp,
        link=rates.link(tp * cp, per_node) if cp > 1 else None,
        bytes_per_elem=a.bytes_per_elem,
        attention_forward_s=layer["attention_kernel_f_s"],
        attention_backward_s=layer["attention_kernel_b_s"],
    )
    edge = _edge_terms(cfg, micro_batch=b, tp=tp, cp=cp, rates=rates, a=a)
    # the recompute plan (memory.recompute_plan): the Table 2 form's forward again, on every layer
    # or on the checkpointed ones; recomputing a layer repeats its forward TP collectives too
    plan = memory.recompute_plan(recompute, cfg.n_layers)
    form_forward_s = {
        "none": 0.0,
        "selective": layer["attention_forward_s"],
        "mlp": layer["mlp_forward_s"],
        "full": layer["full_forward_s"],
    }[plan.table2]
    repeated_tp_share = {"none": 0.0, "selective": 0.0, "mlp": 0.25, "full": 0.5}[plan.table2]
    tp_link = rates.link(tp, layout["devices_per_node"])
    tp_base_s = parallel.tp_comm_time_per_layer(
        cfg,
        micro_batch=b,
        tp=tp,
        alpha_s=tp_link.alpha_s,
        link_bytes_per_s=tp_link.bytes_per_s,
        sequence_parallel=sp,
        bytes_per_elem=a.bytes_per_elem,
        seq_len=cfg.seq_len // cp,
    ) * step_modern.tp_collectives_share(cfg, etp=etp)

    def exposed_tp_s(collectives_s: float) -> float:
        if not tp_comm_overlap:
            return collectives_s
        return max(0.0, collectives_s - a.tp_overlap_share * layer["matmul_s"])

    tp_plain_s = exposed_tp_s(tp_base_s)
    tp_recomputed_s = exposed_tp_s(tp_base_s * (1 + repeated_tp_share))
    names = ("matmul_s", "attention_s", "memory_bound_s", "forward_s", "ep_comm_s", "cp_comm_s")
    per_layer = {k: layer[k] for k in names}

    def stage(n_layers: float, *, first: bool, last: bool) -> dict:
        out = {k: n_layers * v for k, v in per_layer.items()}
        share = plan.form_share(n_layers)
        out["recompute_s"] = n_layers * share * form_forward_s
        out["ep_comm_s"] *= 1 + (share / 2 if plan.table2 == "full" else 0.0)  # the forward's 2 of 4 again
        out["tp_comm_s"] = n_layers * ((1 - share) * tp_plain_s + share * tp_recomputed_s)
        out["matmul_s"] += edge["logits_matmul_s"] if last else 0.0
        out["memory_bound_s"] += (edge["loss_s"] if last else 0.0) + (edge["embedding_s"] if first else 0.0)
        out["forward_s"] += edge["logits_forward_s"] if last else 0.0
        return out

    pp = layout["pp"]
    if pp == 1:
        stages = [stage(cfg.n_layers, first=True, last=True)]
    else:
        ends = layout["end_layers"]
        stages = [stage(ends, first=True, last=False), stage(ends, first=False, last=True)]
        stages += [stage(layout["interior_layers"], first=False, last=False)] if pp > 2 else []
    return max(stages, key=lambda st: sum(v for k, v in st.items() if k != "forward_s"))


# ---------------------------------------------------------------------------- 3. the pipeline
def pipeline_terms(
    cfg: TransformerConfig, layout: dict, *, t_mb_s: float, rates: Rates, a: Assumptions
) -> dict:
    """The bubble (``parallel.pipeline_schedule_costs``: (p − 1)/(v·m) of the m micro-batch
    slots of the slowest stage) and the point-to-point sends of one stage per step
    (``parallel.pipeline_p2p_elements_per_step``, scatter/gather: 1/t of each), exposed by
    ``pp_p2p_exposed``."""
    pp, vpp, m, tp, dp = (layout[k] for k in ("pp", "vpp", "m", "tp", "dp"))
    costs = parallel.pipeline_schedule_costs(p=pp, m=m, v=vpp, schedule=layout["schedule"])
    out = {"pp_bubble_s": costs["bubble_fraction"] * m * t_mb_s, "pp_p2p_s": 0.0, "schedule_costs": costs}
    if pp > 1:
        per_node, cp = layout["devices_per_node"], layout.get("cp", 1)
        link = rates.link(tp * cp * dp * pp, per_node) if tp * cp * dp < per_node else rates.inter
        elements = parallel.pipeline_p2p_elements_per_step(
            cfg, micro_batch=layout["micro_batch"], m=m, v=vpp, seq_len=cfg.seq_len // cp
        )
        messages = 2 * m * vpp
        out["pp_p2p_s"] = a.pp_p2p_exposed * (
            messages * link.alpha_s + elements / tp * a.bytes_per_elem / link.bytes_per_s
        )
    return out


# ---------------------------------------------------------------------------- 4. data parallelism
def dp_group(layout: dict, *, rates: Rates, a: Assumptions, size: int | None = None, stride: int = 1) -> dict:
    """The data-parallel group one device reduces its gradients in, as NCCL sees it: ``dp``
    ranks over ``n_nodes`` nodes (Megatron's rank order: TP innermost, so a node holds
    devices_per_node / tp members of one DP group), the per-direction bandwidth of its slowest
    link (between nodes, one network port per member of the group in a node) and the latency
    keywords of :func:`comm.nccl_call_s`. ``size`` and ``stride``: a subgroup of the DP ranks
    (HSDP's shard group: ``size`` g, stride 1; its replica group: dp/g ranks, stride g)."""
    tp, per_node = layout["tp"], layout["devices_per_node"]
    dp = layout["dp"] if size is None else size
    ranks_per_node = max(1, min(dp, (per_node // tp) // stride))
    span = tp * stride * dp  # consecutive devices the group's members sit among
    link = rates.link(span, per_node, ranks_per_node=ranks_per_node)
    n_nodes = dp // ranks_per_node if span > per_node else 1  # nodes the group itself spans
    latencies = {**a.nccl_latencies(), "intra_step_s": rates.intra.alpha_s}
    latencies["inter_step_s"] = rates.inter.alpha_s if n_nodes > 1 else rates.intra.alpha_s
    return {"dp": dp, "n_nodes": n_nodes, "link_bytes_per_s": link.bytes_per_s, "latencies": latencies}


def dp_call_s(op: str, nbytes: float, group: dict, *, ring_only: bool = False) -> tuple[float, str]:
    """Seconds of one DP collective of ``nbytes`` in ``group`` (:func:`dp_group`) and the
    algorithm NCCL picks for it (:func:`comm.nccl_call_s`)."""
    return comm.nccl_call_s(
        op,
        nbytes,
        group["dp"],
        group["n_nodes"],
        link_bytes_per_s=group["link_bytes_per_s"],
        ring_only=ring_only,
        **group["latencies"],
    )


def dp_terms(
    cfg: TransformerConfig,
    layout: dict,
    *,
    rates: Rates,
    a: Assumptions,
    forward_s: float,
    backward_s: float,
    overlap: bool = True,
    overlap_param_gather: bool = False,
) -> dict:
    """The data-parallel collectives of one step (``comm.dp_collectives``: what the framework
    issues, call by call), each call priced by NCCL's latency model and algorithm choice
    (``comm.nccl_call_s``) over the DP group's link, and what stays exposed. A call hides under
    the compute of its phase (``forward_s``, ``backward_s``: the whole step's, per stage) times
    ``dp_overlap``; the last call of each phase cannot hide (the pipeline's drain). Without
    ``overlap`` nothing hides; the parameter all-gather after the optimizer hides only with
    ``overlap_param_gather`` (Megatron), under the first micro-batch's forward."""
    tp, pp, m = (layout[k] for k in ("tp", "pp", "m"))
    # context-parallel ranks reduce gradients with their data-parallel peers (dp·cp ranks); the
    # routed experts in their own expert-data-parallel group (step_modern.params_per_device)
    shard = step_modern.params_per_device(cfg, layout) if cfg.moe is not None else None
    dp = layout["dp"] * layout.get("cp", 1)
    expert_dp = shard["expert_dp"] if shard else 1
    if dp == 1 and expert_dp == 1:
        return {"dp_comm_s": 0.0, "dp_comm_exposed_s": 0.0, "dp_calls": 0, "dp_algorithms": ""}
    n_params_shard = shard["dense"] if shard else flops.param_count(cfg) / (tp * pp)
    layout = {**layout, "dp": dp}
    ddp_tensors = None  # DDP buckets whole tensors: the stage's own, in the order they become ready
    if layout["framework"] == "ddp":
        blocks = math.ceil(layout["interior_layers"])
        ddp_tensors = [k for _, k in parallel.stage_grad_tensors(cfg, tp=tp, pp=pp, blocks=blocks)]
    calls = (
        []
        if dp == 1
        else comm.dp_collectives(
            n_params_shard,
            dp=dp,
            zero_stage=layout["zero_stage"],
            micro_batches=m,
            framework=layout["framework"],
            units=math.ceil(layout["interior_layers"]) + 1,  # one unit per block, and the embedding/head root
            grad_bytes_per_elem=a.grad_bytes_per_elem,
            param_bytes_per_elem=a.bytes_per_elem,
            overlap=overlap,
            ddp_bucket_bytes=a.ddp_bucket_bytes,
            deepspeed_bucket_elems=a.deepspeed_bucket_elems,
            deepspeed_prefetch_elems=a.deepspeed_prefetch_elems,
            tensor_elems=ddp_tensors,
            shard_group=layout.get("shard_group"),
        )
    )
    if expert_dp > 1:
        expert_calls = comm.dp_collectives(
            shard["expert"],
            dp=expert_dp,
            zero_stage=layout["zero_stage"],
            micro_batches=m,
            framework=layout["framework"],
            units=math.ceil(layout["interior_layers"]) + 1,
            grad_bytes_per_elem=a.grad_bytes_per_elem,
            param_bytes_per_elem=a.bytes_per_elem,
            overlap=overlap,
        )
        calls += [{**c, "group": "expert"} for c in expert_calls]
    g = layout.get("shard_group") or dp
    groups = {"dp": dp_group(layout, rates=rates, a=a)}
    if expert_dp > 1:  # expert-data-parallel ranks sit ep·etp apart
        spread = {**layout, "tp": layout.get("ep", 1) * layout.get("etp", 1), "dp": expert_dp}
        groups["expert"] = dp_group(spread, rates=rates, a=a)
    if g < dp:  # HSDP: the shard group inside, its replicas across
        groups["shard"] = dp_group(layout, rates=rates, a=a, size=g)
        groups["replica"] = dp_group(layout, rates=rates, a=a, size=dp // g, stride=g)
    hideable = {
        "last_backward": backward_s / m,
        "backward": backward_s,
        "forward": forward_s,
        "after_step": forward_s / m if overlap_param_gather else 0.0,
    }
    by_phase: dict = {}
    algorithms = set()
    n_calls = 0
    for c in calls:
        one_s, algorithm = dp_call_s(c["op"], c["bytes_per_call"], groups[c.get("group", "dp")])
        algorithms.add(f"{c['op']}:{algorithm}")
        n_calls += c["calls"]
        phase = by_phase.setdefault(c["phase"], {"total_s": 0.0, "last_call_s": 0.0})
        phase["total_s"] += c["calls"] * one_s
        phase["last_call_s"] = max(phase["last_call_s"], one_s)
    total_s = exposed_s = 0.0
    for name, ph in by_phase.items():
        total_s += ph["total_s"]
        if not overlap or hideable[name] == 0.0:
            exposed_s += ph["total_s"]
        else:
            exposed_s += max(ph["last_call_s"], ph["total_s"] - a.dp_overlap * hideable[name])
    return {
        "dp_comm_s": total_s,
        "dp_comm_exposed_s": min(exposed_s, total_s),
        "dp_calls": n_calls,
        "dp_algorithms": ", ".join(sorted(algorithms)),
    }
