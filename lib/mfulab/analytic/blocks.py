"""Exact counts for the blocks large models train with now: grouped-query or latent attention
under causal, sliding-window and chunked masks, and dense or mixture-of-experts FFNs.

Every count is per token and per block, in weights (elements) or FLOPs (2 per multiply-add).
A training step runs each matmul three times (forward; backward for the input and the weight:
Kaplan et al. 2020, §2.1), so training FLOPs are 3 × forward FLOPs; a weight touched by a token
costs 6 FLOPs.

- Attention weights: W_q, W_k, W_v, W_o with ``n_kv_heads`` key and value heads (grouped-query
  attention, Ainslie et al. 2023); under MLA (DeepSeek-V2, §2.1, Eqs. 9-19) the down-projections
  to the query and key-value latents, their up-projections, the decoupled rotary key and W_o.
- Attention core: QKᵀ (2·d_qk FLOPs per query, head and attended key) and A·V (2·d_v), where
  d_qk = d_v = head_dim, or under MLA d_qk = qk_nope + qk_rope and d_v = v_head_dim (the
  training form, with keys and values up-projected; the absorbed form is an inference trick).
  A kernel that skips every masked position runs it over :func:`attended_keys` per query; one
  that materialises the full score matrix (naive attention) over all ``seq_len``.
- FFN: a dense block has ``n_mats`` = 3 (SwiGLU: gate, up, down; Shazeer 2020) or 2 (GELU)
  matrices of h × d_ff. A MoE block (Fedus et al. 2022; DeepSeekMoE, Dai et al. 2024) has a
  router (h × n_experts), ``n_experts`` routed and ``n_shared_experts`` shared experts of
  width ``d_ff_expert``; a token touches the router, ``top_k`` routed and every shared expert.
  *Total* weights size the memory; *active* weights price a token (what MFU counts).
"""

from __future__ import annotations

import math

from mfulab.analytic.config import TransformerConfig
from mfulab.errors import ParameterError

MASKS = ("causal", "full")  # causal: skip every masked key exactly; full: all seq_len keys


def n_ffn_mats(cfg: TransformerConfig) -> int:
    """Weight matrices per FFN (or per expert): 3 for SwiGLU (gate, up, down), 2 for GELU."""
    return 3 if cfg.mlp == "swiglu" else 2


def attention_dims(cfg: TransformerConfig) -> tuple[int, int]:
    """(d_qk, d_v) per head: the dimensions QKᵀ and A·V contract over."""
    if cfg.mla is None:
        return cfg.head_dim, cfg.head_dim
    m = cfg.mla
    return m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim


def attention_weight_count(cfg: TransformerConfig) -> int:
    """Matmul weights of one attention block (biases and norms excluded)."""
    h, H = cfg.d_model, cfg.n_heads
    if cfg.mla is None:
        q, Hkv = cfg.head_dim, cfg.n_kv_heads
        return h * H * q + 2 * h * Hkv * q + H * q * h  # W_q, W_k, W_v, W_o
    m = cfg.mla
    d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank is None:
        query = h * H * d_qk  # one full-rank W_q
    else:
        query = h * m.q_lora_rank + m.q_lora_rank * H * d_qk  # W_DQ, then W_UQ with W_QR
    kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim)  # W_DKV and the shared rotary key W_KR
    kv_up = m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim)  # W_UK, W_UV
    out = H * m.v_head_dim * h  # W_O
    return query + kv_down + kv_up + out


def attention_other_params(cfg: TransformerConfig) -> int:
    """Attention parameters outside the matmuls: biases, or MLA's latent RMSNorms."""
    if cfg.mla is not None:
        return cfg.mla.kv_lora_rank + (cfg.mla.q_lora_rank or 0)
    if not cfg.bias:
        return 0
    return cfg.n_heads * cfg.head_dim + 2 * cfg.n_kv_heads * cfg.head_dim + cfg.d_model


def routed_rows_per_token(cfg: TransformerConfig, *, tokens_per_group: int | None = None) -> float:
    """Expert FFN rows a MoE block runs per token: ``top_k`` under dropless routing; with a
    capacity factor, every expert runs its whole buffer of ceil(factor · tokens · top_k /
    n_experts) rows (Switch Transformer §2.1: padded when short, dropped past it), so per token
    n_experts · capacity / tokens. Padding is hardware work, not model work."""
    moe = cfg.moe
    if moe is None:
        raise ParameterError("routed_rows_per_token needs a MoE config")
    if moe.capacity_factor is None or tokens_per_group is None:
        return float(moe.top_k)
    if not isinstance(tokens_per_group, int) or tokens_per_group <= 0:
        raise ParameterError(f"tokens_per_group must be a positive integer, got {tokens_per_group!r}")
    capacity_rows = math.ceil(moe.capacity_factor * tokens_per_group * moe.top_k / moe.n_experts)
    return moe.n_experts * capacity_rows / tokens_per_group


def ffn_weight_counts(cfg: TransformerConfig, layer: int, *, tokens_per_group: int | None = None) -> dict:
    """Matmul weights of block ``layer``'s FFN: ``total`` (memory) and ``active`` (what one
    token's matmuls touch, router included; with ``tokens_per_group`` and a capacity factor, the
    rows each expert's padded buffer runs, :func:`routed_rows_per_token`)."""
    h, n_mats = cfg.d_model, n_ffn_mats(cfg)
    if not cfg.layer_is_moe(layer):
        dense = n_mats * h * cfg.d_ff
        return {"total": dense, "active": dense}
    moe = cfg.moe
    expert = n_mats * h * moe.d_ff_expert
    router = h * moe.n_experts
    routed_rows = routed_rows_per_token(cfg, tokens_per_group=tokens_per_group)
    total = router + (moe.n_experts + moe.n_shared_experts) * expert
    active = router + (routed_rows + moe.n_shared_experts) * expert
    return {"total": total, "active": active}


def ffn_other_params(cfg: TransformerConfig, layer: int) -> int:
    """FFN biases (dense GPT blocks only; a MoE config has none)."""
    if cfg.layer_is_moe(layer) or not cfg.bias:
        return 0
    return (n_ffn_mats(cfg) - 1) * cfg.d_ff + cfg.d_model


def attended_keys(seq_len: int, window: int | None = None, kind: str = "sliding") -> float:
    """Mean keys a query attends under a causal mask over ``seq_len`` positions: (T + 1)/2
    globally; with a sliding window w, the mean of min(i, w) over positions i = 1..T; chunked
    into blocks of w, the causal mean inside each block (a last, shorter block counts as is)."""
    if not isinstance(seq_len, int) or seq_len <= 0:
        raise ParameterError(f"seq_len must be a positive integer, got {seq_len!r}")
    T = seq_len
    if window is None or window >= T:
        return (T + 1) / 2
    w = window
    if kind == "sliding":
        ramp_keys = w * (w - 1) / 2  # positions 1..w-1 see i keys
        return (ramp_keys + (T - w + 1) * w) / T
    if kind == "chunked":
        full_blocks, rest = divmod(T, w)
        return (full_blocks * w * (w + 1) / 2 + rest * (rest + 1) / 2) / T
    raise ParameterError(f"window kind must be 'sliding' or 'chunked', got {kind!r}")


def attention_core_fwd_flops_per_token(
    cfg: TransformerConfig, layer: int, *, mask: str = "causal", seq_len: int | None = None
) -> float:
    """Forward FLOPs of QKᵀ and A·V per token in block ``layer``: 2·H·(d_qk + d_v) per attended
    key; ``mask`` "causal" counts the keys the layer's mask leaves (:func:`attended_keys`),
    "full" every key of the sequence (what naive attention multiplies, masked or not)."""
    if mask not in MASKS:
        raise ParameterError(f"mask must be one of {', '.join(MASKS)}; got {mask!r}")
    T = cfg.seq_len if seq_len is None else seq_len
    d_qk, d_v = attention_dims(cfg)
    keys = T if mask == "full" else attended_keys(T, cfg.layer_window(layer), cfg.window_kind)
    return 2.0 * cfg.n_heads * (d_qk + d_v) * keys


def layer_groups(cfg: TransformerConfig) -> list[tuple[int, int]]:
    """(a representative layer, how many layers share its counts): layers alike in FFN kind and
    attention window have equal counts, so a sum over layers prices each kind once (a planner
    prices thousands of layouts of 80-layer models)."""
    counts: dict[tuple, list[int]] = {}
    for layer in range(cfg.n_layers):
        key = (cfg.layer_is_moe(layer), cfg.layer_window(layer))
        counts.setdefault(key, [layer, 0])[1] += 1
    return [(first, n) for first, n in counts.values()]


def block_counts(
    cfg: TransformerConfig,
    layer: int,
    *,
    mask: str = "causal",
    seq_len: int | None = None,
    tokens_per_group: int | None = None,
) -> dict:
    """One block's counts: ``total_params`` and ``active_params`` (every parameter, norms and
    biases included), ``matmul_weights_active`` and the training FLOPs per token of its
    weight matmuls (6 per active weight) and attention core (3 × forward)."""
    ffn = ffn_weight_counts(cfg, layer, tokens_per_group=tokens_per_group)
    attn_weights = attention_weight_count(cfg)
    norms = 2 * cfg.d_model * (2 if cfg.norm == "layernorm" and cfg.bias else 1)
    other = attention_other_params(cfg) + ffn_other_params(cfg, layer) + norms
    core_fwd_flops = attention_core_fwd_flops_per_token(cfg, layer, mask=mask, seq_len=seq_len)
    matmul_weights_active = attn_weights + ffn["active"]
    return {
        "total_params": attn_weights + ffn["total"] + other,
        "active_params": attn_weights + ffn["active"] + other,
        "matmul_weights_active": matmul_weights_active,
        "weight_flops": 6.0 * matmul_weights_active,
        "attention_core_flops": 3.0 * core_fwd_flops,
    }
