"""Step time and MFU of one training layout, from its parts: the predictor that joins the
analytic pieces of :mod:`flops`, :mod:`parallel`, :mod:`memory` and :mod:`comm`, fed by a
device's datasheet or by a calibration measured here (:mod:`predict_rates`).

Per micro-batch and pipeline stage (a device holds L/p layers, 1/t of each; T = b·s tokens):

    matmuls       each GEMM of the layer, forward (m·n·k) and its two backward GEMMs, at
                  t = t₀ + max(2mnk / R∞, bytes / BW)       Hockney's r∞–n½ form (t₀ = n½/R∞)
                  under a roofline cap (Williams et al. 2009): a GEMM whose operands cost more
                  to move than to multiply runs at memory speed; logits on the last stage
    attention     unfused (Megatron 2021–22): QKᵀ and A·V as batched GEMMs over the full s×s,
                  with the score matrix through memory; flash: the causal half of those FLOPs,
                  forward + 2.5× backward (FlashAttention-2 recomputes S), at
                  ``flash_attention_efficiency`` · peak (Dao 2023)
    memory-bound  LayerNorms, bias + GeLU / SwiGLU, bias + dropout + add, rotary, softmax and
                  dropout on the scores (unfused only), loss in fp32: bytes each reads and
                  writes (Megatron-LM's fused kernels, Narayanan et al. 2021 §4.2) at
                  ``memory_efficiency`` · BW; backward moves ``backward_traffic_factor`` × as
                  many bytes; with sequence parallelism the norms and dropouts touch T/t rows
    recompute     the forward again of what the policy recomputes (``full``: the layer;
                  ``selective``: the attention core; Korthikanti et al. 2022 §4–5)
    pipeline      interior stages hold L/p layers; with ``uneven_end_stages`` (Llama 3, BLOOM)
                  the first and last hold fewer, and the slowest stage sets the pace
    tp_comm       4 all-reduces per layer (or 4 all-gathers + 4 reduce-scatters with sequence
                  parallelism) of b·s·h, exposed, +2 under full recompute (``parallel``)
    optimizer     Adam over this device's parameter shard, ``optimizer_bytes_per_param`` each

The step (Narayanan et al. 2021 §2.2): m micro-batches of the slowest stage (first: embedding;
last: logits and loss), the 1F1B bubble (p − 1)/v of those slots, the point-to-point messages,
the data-parallel reduction minus what backward hides (``overlap``; ZeRO traffic from
``memory.zero_traffic_bytes_per_step``), the optimizer and the data wait:

    step = m·t_mb + (p − 1)/v · t_mb + pp_p2p + dp_exposed + optimizer + data

Every constant not measured is a field of :class:`Assumptions` with its source; a calibration
replaces R∞, t₀, BW and the intra-node α–β by this machine's figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields, replace

from . import flops, memory, parallel
from .config import ParameterError, TransformerConfig
from .predict_rates import Assumptions, Rates, machine_rates

RECOMPUTES = ("none", "selective", "full")
ATTENTIONS = ("unfused", "flash")
TERMS = (
    "matmul_s",
    "attention_s",
    "memory_bound_s",
    "recompute_s",
    "tp_comm_s",
    "pp_bubble_s",
    "pp_p2p_s",
    "dp_comm_exposed_s",
    "optimizer_s",
    "data_s",
)

__all__ = ["ATTENTIONS", "Assumptions", "RECOMPUTES", "TERMS", "step_time", "gemm_s"]


def _check_int(**values):
    for name, value in values.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ParameterError(f"{name} must be a whole number ≥ 1, got {value!r}")


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
) -> dict:
    """Seconds of one layer for one micro-batch on one device: forward and backward of each
    op class (module docstring); the forward parts a recompute policy re-runs are returned
    as ``full_forward_s`` and ``attention_forward_s``."""
    e, s, h = a.bytes_per_elem, cfg.seq_len, cfg.d_model
    T = micro_batch * s  # tokens of the micro-batch
    q, H, Hkv, f = cfg.head_dim, cfg.n_heads // tp, cfg.n_kv_heads // tp, cfg.d_ff // tp
    n_up = 2 if cfg.mlp == "swiglu" else 1
    gemms = [(T, (H + 2 * Hkv) * q, h), (T, h, H * q), (T, n_up * f, h), (T, h, f)]
    mm_f = mm_b = 0.0
    for m_, n_, k_ in gemms:
        fw, bw = _fwd_bwd_gemm_s(m_, n_, k_, rates, e)
        mm_f, mm_b = mm_f + fw, mm_b + bw

    bw_eff = rates.memory_bytes_per_s
    heads_in_batch = micro_batch * H
    score_elems = heads_in_batch * s * s
    if attention == "unfused":
        qk_f, qk_b = _fwd_bwd_gemm_s(s, s, q, rates, e, count=heads_in_batch)
        av_f, av_b = _fwd_bwd_gemm_s(s, q, s, rates, e, count=heads_in_batch)
        # scale + mask + softmax (read scores, write probabilities) and dropout (read, write, 1-byte
        # mask) forward; backward reads probabilities and gradients and writes gradients for both
        score_fwd_bytes = score_elems * (2 * e + ((2 * e + 1) if dropout else 0))
        score_bwd_bytes = score_elems * (3 * e + ((2 * e + 1) if dropout else 0))
        att_f = qk_f + av_f + score_fwd_bytes / bw_eff
        att_b = qk_b + av_b + score_bwd_bytes / bw_eff
    else:
        causal_fwd_flops = 0.5 * 4.0 * heads_in_batch * s * s * q  # QKᵀ and A·V, causal half
        flash_rate = a.flash_attention_efficiency * rates.peak_flops_per_s
        att_f = rates.matmul_latency_s + causal_fwd_flops / flash_rate
        att_b = rates.matmul_latency_s + 2.5 * causal_fwd_flops / flash_rate

    rows = T / tp if sequence_parallel else T  # rows the norms, dropouts and residuals touch
    norm_bytes = 2 * 2 * rows * h * e  # two norms, each reads and writes its rows
    residual_bytes = 2 * rows * h * ((3 * e + 1) if dropout else 3 * e)  # (bias +) dropout + add
    act_bytes = T * f * e * (3 if cfg.mlp == "swiglu" else 2)  # bias + GeLU, or SiLU(gate)·up
    rotary_bytes = 0.0 if cfg.learned_positions else 2 * T * (H + Hkv) * q * e
    elem_f = (norm_bytes + residual_bytes + act_bytes + rotary_bytes) / bw_eff
    elem_b = a.backward_traffic_factor * elem_f
    return {
        "matmul_s": mm_f + mm_b,
        "attention_s": att_f + att_b,
        "memory_bound_s": elem_f + elem_b,
        "full_forward_s": mm_f + att_f + elem_f,
        "attention_forward_s": att_f if attention == "unfused" else 0.0,  # flash recomputes inside
    }


def _edge_terms(cfg: TransformerConfig, *, micro_batch: int, tp: int, rates: Rates, a: Assumptions) -> dict:
    """The first stage's embedding and the last stage's logits and loss, per micro-batch."""
    e, T, h, V = a.bytes_per_elem, micro_batch * cfg.seq_len, cfg.d_model, cfg.vocab_size
    fw, bw = _fwd_bwd_gemm_s(T, V / tp, h, rates, e)
    loss_bytes = T * V / tp * a.loss_bytes_per_logit
    embedding_bytes = (1 + a.backward_traffic_factor) * 2 * T * h * e  # lookup, and its scatter-add
    return {
        "logits_matmul_s": fw + bw,
        "loss_s": loss_bytes / rates.memory_bytes_per_s,
        "embedding_s": embedding_bytes / rates.memory_bytes_per_s,
    }


def dp_time_s(n_params: float, *, dp: int, zero_stage: int, m: int, link, a: Assumptions) -> float:
    """Seconds of one step's data-parallel collectives for a ``n_params`` shard (Rajbhandari et
    al. 2020; the calls :func:`memory.zero_traffic_bytes_per_step` counts): ZeRO 0 all-reduces
    the gradients once; 1 reduce-scatters them and all-gathers the parameters once; 2
    reduce-scatters every micro-batch; 3 also all-gathers the parameters in every forward and
    backward. Gradients move at ``grad_bytes_per_elem``, parameters at ``bytes_per_elem``; each
    device sends (dp − 1)/dp of a buffer per pass (2 passes for an all-reduce). Every call of
    ``dp_bucket_bytes`` pays its latency: an all-reduce the faster of a ring (2(n − 1)·α) and a
    tree (2·log2 n·α), as NCCL chooses (the buckets study's rule); a reduce-scatter or all-gather
    a ring's (n − 1)·α, since NCCL runs those on rings only."""
    if dp == 1:
        return 0.0
    reduce_passes, gathers = {0: (2, 0), 1: (1, 1), 2: (m, 1), 3: (m, 2 * m)}[zero_stage]
    grad_bytes, param_bytes = n_params * a.grad_bytes_per_elem, n_params * a.bytes_per_elem
    sent_bytes = (dp - 1) / dp * (reduce_passes * grad_bytes + gathers * param_bytes)
    if zero_stage == 0:  # all-reduces of the gradient buckets
        calls = max(1.0, grad_bytes / a.dp_bucket_bytes)
        latency_s = calls * min(2 * (dp - 1), 2 * math.log2(dp)) * link.alpha_s
    else:  # reduce-scatters and all-gathers, bucket by bucket
        calls = max(float(reduce_passes), reduce_passes * grad_bytes / a.dp_bucket_bytes) + max(
            float(gathers), gathers * param_bytes / a.dp_bucket_bytes
        )
        latency_s = calls * (dp - 1) * link.alpha_s
    return latency_s + sent_bytes / link.bytes_per_s


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
    device: str | None,
    devices_per_node: int = 8,
    calibration=None,
    overlap: bool = True,
    attention: str = "flash",
    dropout: bool = False,
    dtype: str = "bf16",
    uneven_end_stages: bool = False,
    assumptions: Assumptions | None = None,
    **overrides,
) -> dict:
    """Predicted step of one layout: ``step_s``, ``tokens_per_s``, MFU and HFU under the PaLM
    and Megatron conventions (``mfu_palm``, ``hfu_palm``, ``mfu_megatron``, ``hfu_megatron``),
    achieved model TFLOP/s per device, the breakdown :data:`TERMS` (seconds per step, summing
    to ``step_s``), memory per device and whether it fits, and ``sources``: where each machine
    figure came from. ``device`` names a ``devices.yaml`` entry; ``calibration`` a
    ``results/<machine>/calibration`` folder; ``overrides`` set fields of :class:`Assumptions`.
    Raises :class:`ParameterError` for a layout that cannot exist."""
    _check_int(n_devices=n_devices, tp=tp, pp=pp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch)
    _check_int(devices_per_node=devices_per_node)
    if recompute not in RECOMPUTES:
        raise ParameterError(f"recompute must be one of {', '.join(RECOMPUTES)}; got {recompute!r}")
    if attention not in ATTENTIONS:
        raise ParameterError(f"attention must be one of {', '.join(ATTENTIONS)}; got {attention!r}")
    unknown = set(overrides) - {f.name for f in fields(Assumptions)}
    if unknown:
        raise ParameterError(
            f"unknown assumption(s) {sorted(unknown)}; known: {[f.name for f in fields(Assumptions)]}"
        )
    a = replace(assumptions or Assumptions(), **overrides)
    if n_devices % (tp * pp):
        raise ParameterError(f"tp·pp = {tp * pp} does not divide {n_devices} devices")
    dp = n_devices // (tp * pp)
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
    if sequence_parallel and tp == 1:
        sequence_parallel = False  # nothing to split
    rates = machine_rates(device, dtype=dtype, calibration=calibration, assumptions=a)
    cluster_nodes = n_devices > devices_per_node
    if cluster_nodes and n_devices % devices_per_node:
        raise ParameterError(f"{n_devices} devices do not fill nodes of {devices_per_node}")

    layer = layer_terms(
        cfg,
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sequence_parallel,
        attention=attention,
        dropout=dropout,
        rates=rates,
        a=a,
    )
    edge = _edge_terms(cfg, micro_batch=micro_batch, tp=tp, rates=rates, a=a)
    recompute_layer_s = {
        "none": 0.0,
        "selective": layer["attention_forward_s"],
        "full": layer["full_forward_s"],
    }[recompute]
    tp_link = rates.link(tp, devices_per_node)
    tp_layer_s = parallel.tp_comm_time_per_layer(
        cfg,
        micro_batch=micro_batch,
        tp=tp,
        alpha_s=tp_link.alpha_s,
        link_bytes_per_s=tp_link.bytes_per_s,
        sequence_parallel=sequence_parallel,
        bytes_per_elem=a.bytes_per_elem,
    ) * (1.5 if recompute == "full" else 1.0)
    per_layer = {
        "matmul_s": layer["matmul_s"],
        "attention_s": layer["attention_s"],
        "memory_bound_s": layer["memory_bound_s"],
        "recompute_s": recompute_layer_s,
        "tp_comm_s": tp_layer_s,
    }

    def stage(n_layers: float, *, first: bool, last: bool) -> dict:
        """One micro-batch on a stage of ``n_layers`` layers, with the embedding (first) and
        the logits and loss (last)."""
        out = {k: n_layers * v for k, v in per_layer.items()}
        out["matmul_s"] += edge["logits_matmul_s"] if last else 0.0
        out["memory_bound_s"] += (edge["loss_s"] if last else 0.0) + (edge["embedding_s"] if first else 0.0)
        return out

    if pp == 1:
        stages = [stage(cfg.n_layers, first=True, last=True)]
    else:
        stages = [stage(end_layers, first=True, last=False), stage(end_layers, first=False, last=True)]
        stages += [stage(interior_layers, first=False, last=False)] if pp > 2 else []
    per_mb = max(stages, key=lambda st: sum(st.values()))  # the slowest stage sets the pace
    t_mb = sum(per_mb.values())
    terms = {k: m * v for k, v in per_mb.items()}
    terms["pp_bubble_s"] = (pp - 1) / vpp * t_mb

    terms["pp_p2p_s"] = 0.0
    if pp > 1:
        p2p_link = rates.link(tp * dp * pp, devices_per_node) if tp * dp < devices_per_node else rates.inter
        message_bytes = micro_batch * cfg.seq_len * cfg.d_model / tp * a.bytes_per_elem  # scatter/gather
        messages = 2 * m * vpp
        terms["pp_p2p_s"] = (
            a.pp_p2p_exposed * messages * (p2p_link.alpha_s + message_bytes / p2p_link.bytes_per_s)
        )

    n_params_shard = flops.param_count(cfg) / (tp * pp)
    dp_comm_s = dp_time_s(
        n_params_shard,
        dp=dp,
        zero_stage=zero_stage,
        m=m,
        link=rates.link(tp * dp, devices_per_node, ranks_per_node=max(1, min(dp, devices_per_node // tp))),
        a=a,
    )
    compute_step_s = sum(terms[k] for k in ("matmul_s", "attention_s", "memory_bound_s", "recompute_s"))
    # DP traffic hides under backward only (2/3 of the compute: backward = 2 × forward): the
    # last micro-batch's at ZeRO 0–1 (one reduction per step), every micro-batch's at ZeRO 2–3
    backward_s = (2 / 3) * compute_step_s
    hideable_s = backward_s / m if zero_stage <= 1 else backward_s
    hidden_s = min(dp_comm_s, a.dp_overlap * hideable_s) if overlap else 0.0
    terms["dp_comm_exposed_s"] = dp_comm_s - hidden_s
    shard_params = n_params_shard / (dp if zero_stage >= 1 else 1)
    terms["optimizer_s"] = a.optimizer_bytes_per_param * shard_params / rates.memory_bytes_per_s
    terms["data_s"] = a.data_s
    step_s = sum(terms[k] for k in TERMS)

    tokens = global_batch * cfg.seq_len
    peak_total = n_devices * rates.peak_flops_per_s * step_s

    def util(convention, policy):
        return flops.flops_per_token(cfg, convention=convention, recompute=policy) * tokens / peak_total

    # a flash kernel keeps no s×s scores for backward: the activations of selective recompute
    memory_policy = "selective" if attention == "flash" and recompute == "none" else recompute
    mem = memory.memory_per_device(
        cfg,
        micro_batch=micro_batch,
        tp=tp,
        pp=pp,
        dp=dp,
        zero_stage=zero_stage,
        sequence_parallel=sequence_parallel,
        recompute=memory_policy,
        bytes_per_elem=a.bytes_per_elem,
        dropout=dropout,
    )
    costs = parallel.pipeline_schedule_costs(p=pp, m=m, v=vpp, schedule=schedule)
    memory_bytes = mem["model_states_bytes"] + mem["activations_bytes"] * costs["activation_layers_factor"]
    memory_bytes += mem["logits_bytes"]
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
        "dp_comm_s": dp_comm_s,
        "layout": {"tp": tp, "pp": pp, "vpp": vpp, "dp": dp, "micro_batch": micro_batch, "m": m},
        "schedule": schedule,
        "memory_gib": memory_bytes / 2**30,
        "device_memory_gib": None
        if rates.memory_capacity_bytes is None
        else rates.memory_capacity_bytes / 2**30,
        "fits": None
        if rates.memory_capacity_bytes is None
        else memory_bytes <= (1 - a.memory_margin) * rates.memory_capacity_bytes,
        "peak_flops_per_s": rates.peak_flops_per_s,
        "sources": rates.sources,
        "assumptions": asdict(a),
    }
