"""A14 — which part of a layer to recompute, judged by activation bytes freed per FLOP
recomputed, in the claim's regime (a ~100B model trained with a fused attention kernel) and,
as the contrast, with the non-fused attention Korthikanti et al. (2022) assume.

Per layer, 16-bit activations with dropout (Korthikanti et al. 2022, Sec. 4.1, Table 2),
micro-batch b, sequence s, hidden h, heads a, FLOPs counted 2 per multiply-add:

- **attention core** (QKᵀ, softmax, dropout, A·V; Korthikanti's selective recompute).
  Non-fused: it frees the a·s²·b terms of Table 2, 5·a·s²·b bytes (softmax output 2, dropout
  mask 1, dropout output 2). Fused (FlashAttention, Dao et al. 2022, Sec. 3.1; FlashAttention-2,
  Dao 2023, Alg. 1-2): the kernel never stores the s×s matrices; it keeps its output (the
  projection's input, which Table 2 counts anyway) and one fp32 log-sum-exp per row and head,
  4·a·s·b bytes, and regenerates dropout from the RNG state; that log-sum-exp is all that
  recomputing the core frees. Either way it re-runs QKᵀ and A·V: 4·b·s²·h FLOPs (over the
  full s×s, as Megatron counts them; a causal kernel skips about half).
- **MLP** (norm2 + MLP from the branch input, the article's choice): frees the MLP's
  19·s·b·h bytes (its input 2, the GeLU input 8, the second linear's input 8, the dropout
  mask 1) under either attention, and re-runs both linears: 2·2·s·b·h·d_ff = 16·s·b·h².
- **attention block** (norm1, QKV, core and projection from the block's input): frees the
  attention block's 11·s·b·h plus the core's bytes, and re-runs 8·s·b·h² + 4·b·s²·h FLOPs.
- **MLP activation function** (MindSpeed's ``--recompute-activation-function``, the one MindSpeed
  option that recomputes part of the MLP: Ascend/MindSpeed docs/en/features/
  activation-function-recompute.md): frees the GeLU's output, the second linear's input
  (2·s·b·d_ff bytes, 8·s·b·h at d_ff = 4h), and re-runs no matmul, only the GeLU, memory-bound
  work this yardstick does not count (nor the unfused core's softmax and dropout): per matmul
  FLOP it wins by construction, so its rows judge only what the yardstick can see.

Per FLOP (b cancels): core 5a/4h non-fused, a/(s·h) fused; MLP 19/16h; block (fused)
(11h + 4a)/(h·(8h + 4s)). So with non-fused attention the core frees 20a/19 times more per FLOP
than the MLP (at any s); with a fused kernel the MLP frees 19s/16a times more than the core, and
19·(8h + 4s)/(16·(11h + 4a)) times what the whole block frees: more only above
s = (24h + 64a)/76 (:func:`block_break_even_seq_len`). The layer's forward FLOPs (its matmuls)
are 24·s·b·h² + 4·b·s²·h, of which the MLP's 16·s·b·h²: ``flops_share_of_layer``. Bytes come from
``memory.activation_bytes_per_layer`` (Table 2) and the log-sum-exp term below; GPT-shaped
layers (multi-head attention, GeLU MLP) only. No torch.
"""

from __future__ import annotations

from mfulab.analytic import memory
from mfulab.analytic.config import ATTENTION_KERNELS, RECOMPUTE_PARTIAL, TransformerConfig, check_attention
from mfulab.errors import ParameterError

# FlashAttention(-2) keeps one fp32 log-sum-exp per row and head for its backward (Dao 2023,
# Alg. 1 line 12: L_i = m_i + log(l_i), written to HBM); measured here on torch's CPU flash
# kernel with saved-tensor hooks (notebook 04, section 4).
LSE_BYTES_PER_ROW = memory.LSE_BYTES_PER_ROW  # one fp32 log-sum-exp per query row and head
ATTENTIONS = ATTENTION_KERNELS[::-1]  # the claim's regime (fused) first
PARTS = ("attention core", "attention block", "MLP", "MLP activation function")


def layer_terms(cfg: TransformerConfig, *, attention: str, micro_batch: int = 1) -> list[dict]:
    """Bytes freed and forward FLOPs re-run, per layer, by recomputing each part of
    :data:`PARTS` under ``attention`` (fused | naive), with each part's share of what the
    layer keeps without recompute."""
    check_attention(attention)
    if cfg.mlp != "gelu" or cfg.n_kv_heads != cfg.n_heads:
        raise ParameterError(f"{cfg.name}: the A14 arithmetic covers GPT-shaped layers (MHA, GeLU MLP)")
    s, b, h, a, e = cfg.seq_len, micro_batch, cfg.d_model, cfg.n_heads, 2
    sbh = s * b * h
    table2 = {
        q: memory.activation_bytes_per_layer(cfg, micro_batch=b, recompute=q) for q in RECOMPUTE_PARTIAL
    }
    scores_bytes = table2["none"] - table2["selective"]  # 5·a·s²·b: softmax, dropout mask and output
    lse_bytes = LSE_BYTES_PER_ROW * a * s * b
    core_bytes = scores_bytes if attention == "naive" else lse_bytes
    mlp_bytes = table2["none"] - table2["mlp"]  # 19·s·b·h
    norms_bytes = 2 * e * sbh  # the two LayerNorm inputs
    attention_sbh_bytes = table2["selective"] - mlp_bytes - norms_bytes  # 11·s·b·h
    layer_bytes = table2["selective"] + core_bytes  # what the layer keeps without recompute

    core_flops = 2 * 2 * b * s * s * h  # QKᵀ and A·V
    mlp_flops = 2 * 2 * sbh * cfg.d_ff  # up and down projections
    projection_flops = 2 * sbh * 4 * h  # Q, K, V and output projections
    gelu_elements = s * b * cfg.d_ff
    parts = {
        "attention core": (core_bytes, core_flops),
        "attention block": (attention_sbh_bytes + core_bytes, projection_flops + core_flops),
        "MLP": (mlp_bytes, mlp_flops),
        # the GeLU's output (the second linear's input); its input stays: no matmul re-runs
        "MLP activation function": (e * gelu_elements, 0),
    }
    layer_flops = projection_flops + core_flops + mlp_flops  # the layer's forward matmuls
    return [
        {
            "config": cfg.name,
            "seq_len": s,
            "attention": attention,
            "part": part,
            "bytes_freed": freed,
            "share_of_layer_bytes": freed / layer_bytes,
            "flops_recomputed": flops_,
            "flops_share_of_layer": flops_ / layer_flops,
            "bytes_per_recomputed_flop": freed / flops_ if flops_ else float("inf"),
        }
        for part, (freed, flops_) in parts.items()
    ]


def analytic_table(configs, *, seq_lens=None):
    """:func:`layer_terms` for every config of ``configs`` (at its own sequence length, and at
    each of ``seq_lens`` when given), under both attentions: one row per part."""
    import pandas as pd

    rows = []
    for cfg in configs:
        for s in [cfg.seq_len] if seq_lens is None else seq_lens:
            for attention in ATTENTIONS:
                rows += layer_terms(cfg.with_(seq_len=s), attention=attention)
    return pd.DataFrame(rows)


def verdict_table(long):
    """One row per (config, sequence length, attention): bytes freed per million recomputed
    FLOPs of each part, and how many times more the MLP frees per FLOP than the attention core
    and than the whole attention block (> 1: the article's choice frees more per FLOP)."""
    wide = long.pivot_table(
        index=["config", "seq_len", "attention"], columns="part", values="bytes_per_recomputed_flop"
    )
    out = pd_frame({f"{p} B/MFLOP": wide[p] * 1e6 for p in PARTS[:3]})  # the GeLU: no matmul
    out["MLP ÷ core"] = wide["MLP"] / wide["attention core"]
    out["MLP ÷ block"] = wide["MLP"] / wide["attention block"]
    out.columns.name = None
    order = {c: i for i, c in enumerate(dict.fromkeys(long.config))}
    return (
        out.reset_index()
        .sort_values(
            ["config", "seq_len", "attention"], key=lambda c: c.map(order) if c.name == "config" else c
        )
        .reset_index(drop=True)
    )


def block_break_even_seq_len(cfg: TransformerConfig) -> float:
    """The sequence length above which, with a fused kernel, recomputing the MLP frees more bytes
    per FLOP than recomputing the whole attention block: 19·(8h + 4s) = 16·(11h + 4a), so
    s = (24h + 64a)/76 (see the module docstring)."""
    return (24 * cfg.d_model + 64 * cfg.n_heads) / 76


REASON_PARTS = ("MLP", "MLP activation function", "attention block", "attention core")


def reasons_table(long):
    """The reasons A14 gives, per (config, attention): the share of the layer's forward FLOPs
    (matmuls) that recomputing the MLP, the attention core and the whole attention block re-runs
    ("MLP cheap to redo, attention costly"), and the share of the layer's activation bytes each
    frees ("attention activations large")."""
    idx = ["config", "seq_len", "attention"]
    flops_ = long.pivot_table(index=idx, columns="part", values="flops_share_of_layer")
    bytes_ = long.pivot_table(index=idx, columns="part", values="share_of_layer_bytes")
    out = pd_frame(
        {
            **{f"{p} FLOP share": flops_[p] for p in REASON_PARTS},
            **{f"{p} byte share": bytes_[p] for p in REASON_PARTS},
        }
    )
    out.columns.name = None
    order = {c: i for i, c in enumerate(dict.fromkeys(long.config))}
    return (
        out.reset_index()
        .sort_values(idx, key=lambda c: c.map(order) if c.name == "config" else c)
        .reset_index(drop=True)
    )


def pd_frame(columns: dict):
    import pandas as pd

    return pd.DataFrame(columns)


def measured_table(records):
    """Bytes freed per recomputed FLOP on the reference model, for every attention the records
    hold (``a14_saved``: exact saved bytes per policy): ``selective`` (the attention core) and
    ``mlp``. One FLOP basis for every row: the region's matmuls run once more in full
    (``flops_recomputed``: 4·b·s²·h per layer for the core, 2·2·b·s·h·d_ff for the MLP), the
    same basis as :func:`layer_terms`. ``flops_counted`` is what FlopCounterMode saw torch's
    non-reentrant checkpoint re-run (``hardware_flops_per_token``, naive attention): it stops
    once backward has its tensors, so the region's last matmul (A·V, the down projection) is
    skipped and it counts half; the fused core is left blank (the counter does not see the CPU
    flash kernel)."""
    import pandas as pd

    if not records.get("a14_saved"):
        return pd.DataFrame()
    cfg = records["config"]
    b, s, h, layers = records["base_micro_batch"], cfg["seq_len"], cfg["d_model"], cfg["n_layers"]
    tokens = b * s
    counted = records["hardware_flops_per_token"]
    full_rerun_flops = {
        "selective": layers * 2 * 2 * b * s * s * h,  # QKᵀ and A·V
        "mlp": layers * 2 * 2 * b * s * h * cfg["d_ff"],  # up and down projections
    }
    rows = []
    for impl, saved in records.get("a14_saved", {}).items():
        layer_bytes = {
            q: sum(r["bytes"] for r in rows_ if r["layer"] is not None) for q, rows_ in saved.items()
        }
        for q in ("selective", "mlp"):
            if q not in layer_bytes or q not in counted:
                continue
            seen = not (impl == "sdpa" and q == "selective")
            freed = layer_bytes["none"] - layer_bytes[q]
            rows.append(
                {
                    "attention": impl,
                    "policy": q,
                    "bytes_freed": freed,
                    "share_of_layer_bytes": freed / layer_bytes["none"],
                    "flops_recomputed": full_rerun_flops[q],
                    "flops_counted": (counted[q] - counted["none"]) * tokens if seen else None,
                    "bytes_per_recomputed_flop": freed / full_rerun_flops[q],
                }
            )
    return pd.DataFrame(rows)


def kernel_saves(records):
    """What the fused (SDPA) attention of layer 0 keeps for backward, measured with
    saved-tensor hooks: op, shape, dtype and bytes per tensor."""
    import pandas as pd

    rows = records.get("a14_saved", {}).get("sdpa", {}).get("none", [])
    keep = [
        {k: r[k] for k in ("module", "op", "shape", "dtype", "bytes")}
        for r in rows
        if r["layer"] == 0 and r["module"].endswith(".attn")
    ]
    return pd.DataFrame(keep, columns=["module", "op", "shape", "dtype", "bytes"])
