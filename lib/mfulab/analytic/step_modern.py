"""The step model's terms for what dense GPT blocks lack: latent (MLA) and windowed attention,
mixture-of-experts FFNs with expert parallelism, context parallelism and FP8 GEMMs. The step
model (:mod:`step_terms`) calls these for every config; on a dense global-attention config in
16-bit GEMMs each returns exactly the dense terms.

Per micro-batch and device (T = b·s/cp tokens, t = tp, e bytes per element):

    attention GEMMs  W_q, W_k, W_v (n_kv_heads/t each) and W_o over T rows; under MLA
                     (DeepSeek-V2 §2.1) the down-projections to the latents, replicated on
                     every TP rank (Megatron-Core's MLA keeps them unsplit), their
                     up-projections and W_o split by heads (:func:`attention_gemms`)
    FFN GEMMs        dense: h × d_ff/t. MoE (Fedus et al. 2022; Megatron-Core's grouped GEMM):
                     each device holds n_experts/ep experts, each 1/etp wide, and runs
                     etp · T/t · r · imbalance rows over them, r = routed rows per token
                     (``blocks.routed_rows_per_token``: top_k, or the padded capacity); shared
                     experts as a dense FFN split by t; the router in 16 bits (:func:`ffn_gemms`)
    all-to-all       dispatch and combine forward, and again backward: 4 per MoE layer, each
                     of the T/t · r · h · e bytes a device routes, pairwise over the EP group
                     ((ep − 1)·α + bytes/ep per peer; Thakur et al. 2005 §4), through NVLink
                     to peers in the node and the device's network port to the others
                     (:func:`all_to_all_s`), ``ep_a2a_exposed`` of it on the critical path
    context ring     Megatron-Core's ring attention (Liu et al. 2023): each of cp ranks holds
                     s/cp tokens (two balanced chunks of the causal mask), computes 1/cp of the
                     attention and passes its K and V around the ring, cp − 1 steps forward;
                     backward sends K, V and their gradients (twice the bytes); each step hides
                     under the attention block it overlaps (:func:`context_ring_exposed_s`)
    FP8 GEMMs        the block's linear layers run at R∞ · (FP8 peak / BF16 peak) ·
                     ``fp8_matmul_relative_efficiency`` on 1-byte operands; attention core,
                     router and logits stay in 16 bits (Transformer Engine's recipe); every
                     input, weight and output gradient is cast before its GEMM at
                     :data:`FP8_CAST_BYTES_PER_ELEM` of memory traffic (:func:`fp8_cast_bytes`)
"""

from __future__ import annotations

from dataclasses import replace

from mfulab.analytic import blocks, flops, memory, parallel
from mfulab.analytic.config import TransformerConfig
from mfulab.errors import ParameterError

FP8_DTYPES = ("fp8", "mxfp8")  # GEMM precisions priced here; the rest of the step stays in bf16
FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise")
# Bytes of memory traffic per element cast to FP8 before a GEMM, by scaling recipe (Transformer
# Engine's cast kernels; our count, from what each recipe reads and writes):
#   delayed   (per-tensor, amax from history, Micikevicius et al. 2022 §4.3): read 2 (bf16) +
#             write the row-wise and the transposed column-wise FP8 copy, 1 + 1 = 4
#   current   (per-tensor, amax of this tensor): one more read for the amax, 4 + 2 = 6
#   mxfp8     (OCP MX, 1×32 blocks with an 8-bit scale, the amax inside the cast): 4 + 2/32
#   blockwise (DeepSeek-V3 §3.3.1, 1×128 and 128×128 blocks, 4-byte scales): 4 + 4/128
FP8_CAST_BYTES_PER_ELEM = {"delayed": 4.0, "current": 6.0, "mxfp8": 4.0 + 2 / 32, "blockwise": 4.0 + 4 / 128}


def is_modern(cfg: TransformerConfig, *, cp: int = 1, ep: int = 1, dtype: str = "bf16") -> bool:
    """Whether a step needs this module's terms (anything but a dense, global-attention config
    in 16-bit GEMMs without context or expert parallelism)."""
    return bool(cfg.moe or cfg.mla or cfg.windows or cp > 1 or ep > 1 or dtype in FP8_DTYPES)


def attention_gemms(cfg: TransformerConfig, *, tokens: float, tp: int) -> list[tuple]:
    """(m, n, k) of each attention projection on one TP rank for ``tokens`` rows."""
    T, h, H = tokens, cfg.d_model, cfg.n_heads // tp
    if cfg.mla is None:
        q, Hkv = cfg.head_dim, cfg.n_kv_heads // tp
        return [(T, (H + 2 * Hkv) * q, h), (T, h, H * q)]
    m = cfg.mla
    d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank is None:
        query = [(T, H * d_qk, h)]
    else:
        query = [(T, m.q_lora_rank, h), (T, H * d_qk, m.q_lora_rank)]
    kv = [
        (T, m.kv_lora_rank + m.qk_rope_head_dim, h),
        (T, H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
    ]
    return [*query, *kv, (T, h, H * m.v_head_dim)]


def ffn_gemms(
    cfg: TransformerConfig,
    layer: int,
    *,
    tokens: float,
    tp: int,
    ep: int = 1,
    etp: int = 1,
    load_imbalance: float = 1.0,
) -> dict:
    """Block ``layer``'s FFN on one device: ``gemms`` [(m, n, k, count)] (a grouped GEMM runs
    the device's experts as one kernel), ``router`` (m, n, k) or None, ``act_elems`` (elements
    entering the down projections), ``routed_rows`` (rows the device's tokens send to experts:
    what the all-to-all moves) and ``local_tokens`` (tokens the device routes)."""
    T, h, n_up = tokens, cfg.d_model, blocks.n_ffn_mats(cfg) - 1
    if not cfg.layer_is_moe(layer):
        f = cfg.d_ff // tp
        return {
            "gemms": [(T, n_up * f, h, 1), (T, h, f, 1)],
            "router": None,
            "act_elems": T * f,
            "routed_rows": 0.0,
            "local_tokens": T,
        }
    moe = cfg.moe
    local_tokens = T / tp  # sequence parallelism: each TP rank routes its own rows
    rows_per_token = blocks.routed_rows_per_token(cfg, tokens_per_group=max(1, round(local_tokens)))
    routed_rows = local_tokens * rows_per_token
    n_local = moe.n_experts // ep
    f_e = moe.d_ff_expert // etp
    rows_per_expert = etp * routed_rows * load_imbalance / n_local
    gemms = [(rows_per_expert, n_up * f_e, h, n_local), (rows_per_expert, h, f_e, n_local)]
    act = n_local * rows_per_expert * f_e
    if moe.n_shared_experts:
        f_s = moe.n_shared_experts * moe.d_ff_expert // tp
        gemms += [(T, n_up * f_s, h, 1), (T, h, f_s, 1)]
        act += T * f_s
    return {
        "gemms": gemms,
        "router": (local_tokens, moe.n_experts, h),
        "act_elems": act,
        "routed_rows": routed_rows,
        "local_tokens": local_tokens,
    }


def tp_collectives_share(cfg: TransformerConfig, *, etp: int = 1) -> float:
    """The share of a dense layer's TP collectives (``parallel.tp_comm_elements_per_layer``: the
    attention's half and the MLP's half) the mean layer issues: a MoE layer whose experts are not
    tensor-parallel (etp = 1) and that has no shared expert routes its sequence-parallel rows by
    all-to-all, so its FFN half is gone (Megatron-Core's all-to-all token dispatcher)."""
    if cfg.moe is None or etp > 1 or cfg.moe.n_shared_experts:
        return 1.0
    moe_layers = sum(1 for i in range(cfg.n_layers) if cfg.layer_is_moe(i))
    return 1.0 - 0.5 * moe_layers / cfg.n_layers


def fp8_cast_bytes(gemms, *, recipe: str, bytes_per_elem: float | None = None) -> tuple[float, float]:
    """(forward, backward) bytes of the FP8 casts around ``gemms`` [(m, n, k, count)]: input
    m·k and weight k·n forward, output gradient m·n backward (:data:`FP8_CAST_BYTES_PER_ELEM`,
    or ``bytes_per_elem``). The weights are cast every micro-batch, as torchao's Float8Linear
    does; Transformer Engine keeps them from the first micro-batch, so for Megatron runs this
    overstates the casts by the weights' share."""
    if recipe not in FP8_RECIPES:
        raise ParameterError(f"fp8_recipe must be one of {', '.join(FP8_RECIPES)}; got {recipe!r}")
    per_elem = FP8_CAST_BYTES_PER_ELEM[recipe] if bytes_per_elem is None else bytes_per_elem
    forward = sum(c * (m * k + k * n) for m, n, k, c in gemms) * per_elem
    backward = sum(c * m * n for m, n, k, c in gemms) * per_elem
    return forward, backward


def fp8_rates(rates, *, device: str, relative_efficiency: float):
    """``rates`` with R∞ of an FP8 GEMM: the 16-bit R∞ × (dense FP8 peak / dense BF16 peak of
    ``device``, ``devices.yaml``) × ``relative_efficiency``."""
    from mfulab.analytic.devices import peak_flops_per_s

    if device is None:
        raise ParameterError("FP8 GEMMs are priced from a device's datasheet peaks: name a device")
    ratio = peak_flops_per_s(device, "fp8") / peak_flops_per_s(device, "bf16")
    return replace(rates, matmul_flops_per_s=rates.matmul_flops_per_s * ratio * relative_efficiency)


def fp8_source(a, recipe: str) -> str:
    """Where an FP8 step's GEMM rate and cast traffic come from (``step_time``'s ``sources``)."""
    cast = a.fp8_cast_bytes_per_elem or FP8_CAST_BYTES_PER_ELEM[recipe]
    return (
        f"linear GEMMs at R∞ × dense fp8/bf16 peak × fp8_matmul_relative_efficiency "
        f"{a.fp8_matmul_relative_efficiency}; {recipe} scaling casts {cast:.3g} bytes per element"
    )


def all_to_all_s(nbytes: float, *, ep: int, etp: int, devices_per_node: int, rates, alpha_s: float) -> float:
    """Seconds of one all-to-all of the expert-parallel group (``parallel.all_to_all_call_s``):
    its ep ranks sit etp apart (Megatron-Core's expert rank order), so a node holds
    devices_per_node / etp of them; NVLink to those, each device's network port to the rest."""
    if ep <= 1:
        return 0.0
    in_node = max(1, min(ep, devices_per_node // etp))
    # rates.link by span: two ranks of one node, and a group wider than a node (one port each)
    inter = rates.link(devices_per_node + 1, devices_per_node).bytes_per_s if in_node < ep else None
    return parallel.all_to_all_call_s(
        nbytes,
        ep,
        alpha_s=alpha_s,
        link_bytes_per_s=rates.link(2, devices_per_node).bytes_per_s,
        ranks_per_node=in_node,
        inter_link_bytes_per_s=inter,
    )


def context_ring_exposed_s(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int,
    cp: int,
    link,
    bytes_per_elem: float,
    attention_forward_s: float,
    attention_backward_s: float,
) -> float:
    """Seconds per layer and micro-batch the context-parallel ring leaves exposed: cp − 1 steps
    forward, each sending this rank's K and V (b · s/cp rows of n_kv/t heads, or all heads' up-
    projected keys and values under MLA) while 1/cp of the attention runs, and backward the same
    with the gradients too."""
    if cp <= 1:
        return 0.0
    d_qk, d_v = blocks.attention_dims(cfg)
    kv_heads = (cfg.n_heads if cfg.mla is not None else cfg.n_kv_heads) // tp
    kv_bytes = micro_batch * cfg.seq_len / cp * kv_heads * (d_qk + d_v) * bytes_per_elem
    step_fwd_s = link.alpha_s + kv_bytes / link.bytes_per_s
    step_bwd_s = link.alpha_s + 2 * kv_bytes / link.bytes_per_s
    fwd = (cp - 1) * max(0.0, step_fwd_s - attention_forward_s / cp)
    bwd = (cp - 1) * max(0.0, step_bwd_s - attention_backward_s / cp)
    return fwd + bwd


def attention_kernel_flops(cfg: TransformerConfig, layer: int, *, heads_in_batch: int, cp: int = 1) -> dict:
    """A fused causal kernel's forward and backward FLOPs on one rank (``flops.fused_attention_
    flops`` at the mean of d_qk and d_v), scaled by the keys the layer's window leaves over the
    causal s/2, and split over ``cp`` ranks."""
    d_qk, d_v = blocks.attention_dims(cfg)
    s = cfg.seq_len
    kernel = flops.fused_attention_flops(heads_in_batch=heads_in_batch, seq_len=s, head_dim=(d_qk + d_v) / 2)
    window = cfg.layer_window(layer)
    share = 1.0 if window is None else blocks.attended_keys(s, window, cfg.window_kind) / (s / 2)
    return {k: v * share / cp for k, v in kernel.items()}


def expert_weight_count(cfg: TransformerConfig) -> int:
    """Routed experts' matmul weights over the model (sharded by expert parallelism)."""
    if cfg.moe is None:
        return 0
    n_moe = sum(1 for i in range(cfg.n_layers) if cfg.layer_is_moe(i))
    return n_moe * cfg.moe.n_experts * blocks.n_ffn_mats(cfg) * cfg.d_model * cfg.moe.d_ff_expert


def params_per_device(cfg: TransformerConfig, layout: dict) -> dict:
    """Parameters one device holds: ``dense`` (all but the routed experts, / (tp·pp)) and
    ``expert`` (routed experts, / (ep·etp·pp)), and the group sizes ZeRO shards each over:
    ``dense_dp`` = dp·cp, ``expert_dp`` = tp·cp·dp / (ep·etp) (Megatron-Core's expert-data-
    parallel group)."""
    experts = expert_weight_count(cfg)
    tp, pp, cp, dp = layout["tp"], layout["pp"], layout.get("cp", 1), layout["dp"]
    ep, etp = layout.get("ep", 1), layout.get("etp", 1)
    return {
        "dense": (flops.param_count(cfg) - experts) / (tp * pp),
        "expert": experts / (ep * etp * pp),
        "dense_dp": dp * cp,
        "expert_dp": max(1, tp * cp * dp // (ep * etp)),
    }


def dense_equivalent(cfg: TransformerConfig, *, cp: int = 1) -> TransformerConfig:
    """A dense, global-attention config whose activations stand in for ``cfg``'s on one
    context-parallel rank (an approximation for the memory estimate only): s/cp tokens, every
    head its own key-value head under MLA, and an FFN as wide as the rows a token's experts
    run (top_k routed + shared experts of width d_ff_expert)."""
    d_ff = cfg.d_ff
    if cfg.moe is not None:
        d_ff = (cfg.moe.top_k + cfg.moe.n_shared_experts) * cfg.moe.d_ff_expert
    if cfg.seq_len % cp:
        raise ParameterError(f"cp = {cp} does not divide seq_len = {cfg.seq_len}")
    n_kv = cfg.n_heads if cfg.mla is not None else cfg.n_kv_heads
    return cfg.with_(moe=None, mla=None, windows=None, d_ff=d_ff, n_kv_heads=n_kv, seq_len=cfg.seq_len // cp)


def model_states_bytes(cfg: TransformerConfig, layout: dict) -> float:
    """Weights, gradients and optimizer states on one device (``memory.model_state_bytes_per_
    device``), the dense part sharded over dp·cp and the experts over the expert-data-parallel
    group."""
    shard = params_per_device(cfg, layout)
    zero = layout["zero_stage"]
    total = memory.model_state_bytes_per_device(shard["dense"], n_devices=shard["dense_dp"], zero_stage=zero)
    if shard["expert"]:
        total += memory.model_state_bytes_per_device(
            shard["expert"], n_devices=shard["expert_dp"], zero_stage=zero
        )
    return total


def check_modern_layout(
    cfg: TransformerConfig,
    *,
    tp: int,
    cp: int,
    ep: int,
    etp: int,
    sequence_parallel: bool,
    attention: str,
    n_devices: int,
    pp: int,
    dtype: str,
    fp8_recipe: str | None,
) -> None:
    """Refuse a context-, expert-parallel or FP8 layout that cannot run or is not modelled."""
    if (cfg.mla or cfg.windows or cp > 1) and attention != "fused":
        raise ParameterError(
            "latent, windowed and context-parallel attention are modelled with a fused kernel only"
        )
    if cp > 1 and cfg.seq_len % (2 * cp):
        raise ParameterError(
            f"context parallelism splits each sequence into 2·cp = {2 * cp} chunks; "
            f"seq_len {cfg.seq_len} does not divide"
        )
    if cfg.moe is None and (ep > 1 or etp > 1):
        raise ParameterError("expert parallelism needs a MoE config")
    if cfg.moe is not None:
        if cfg.moe.n_experts % ep:
            raise ParameterError(f"ep = {ep} does not divide {cfg.moe.n_experts} experts")
        if cfg.moe.d_ff_expert % etp:
            raise ParameterError(f"etp = {etp} does not divide d_ff_expert = {cfg.moe.d_ff_expert}")
        if (n_devices // pp) % (ep * etp):
            raise ParameterError(
                f"ep·etp = {ep * etp} does not divide the {n_devices // pp} devices of a stage"
            )
        if tp > 1 and not sequence_parallel:
            raise ParameterError(
                "MoE layers with tp > 1 need sequence parallelism (Megatron-Core requires it)"
            )
    if dtype in FP8_DTYPES and fp8_recipe not in FP8_RECIPES:
        raise ParameterError(
            f"an FP8 step names its scaling recipe ({', '.join(FP8_RECIPES)}); got {fp8_recipe!r}"
        )
    if dtype not in FP8_DTYPES and fp8_recipe is not None:
        raise ParameterError(f"fp8_recipe {fp8_recipe!r} given for a {dtype} step")
    if cfg.mla is not None and cfg.n_heads % tp:
        raise ParameterError(f"tp = {tp} does not divide {cfg.n_heads} heads")
