"""Parameter counts, FLOPs per token under every named convention, MFU and HFU.

Conventions (never mixed silently; every table names the one it used):

- ``6n``       6·N FLOPs per token: 2N forward + 4N backward for the weight matmuls
               (Kaplan et al. 2020, Sec. 2.1: C ≈ 6N, their N the non-embedding parameters and
               the context term of their Eq. 2.2 dropped; here N counts every parameter). No
               attention term.
- ``palm``     6·N + 12·L·H·Q·T (Chowdhery et al. 2022, PaLM, Appendix B): adds the
               attention score and value matmuls (QKᵀ and A·V), counted over the full T×T.
- ``causal``   6·N + 6·L·H·Q·T: PaLM's attention term halved, since a causal mask makes
               half of the T×T scores zero (what flash-style kernels skip).
- ``megatron`` 72·l·h²·(1 + s/(6h) + V/(12·l·h)) per token: Korthikanti et al. 2022,
               "Reducing Activation Recomputation in Large Transformer Models"
               (arXiv:2205.05198), App. A, model FLOPs per iteration 72·B·s·l·h²(1 + s/6h + V/12hl)
               divided by the B·s tokens of the iteration. Assumes a GPT block (4h MLP,
               multi-head attention); it ignores ``n_params`` and uses the shape only.

Hardware FLOPs (the HFU numerator) add what recomputation runs a second time:

- ``full`` recompute re-runs every layer's forward: +2N (``6n``, ``palm``, ``causal``) and
  +4·L·H·Q·T (+2·L·H·Q·T causal) for the attention matmuls; Megatron: the source formula
  96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration (Narayanan et al. 2021, "Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Eq. 3), which is
  exactly the model FLOPs + one more forward of every layer, 24·l·h²(1 + s/6h) per token
  (logits not recomputed): source and physical count agree.
- ``selective`` recompute re-runs only the attention core (QKᵀ, softmax, dropout, A·V;
  Korthikanti et al. 2022, Sec. 4.2): +4·L·H·Q·T (``palm``), +2·L·H·Q·T (``causal``),
  nothing under ``6n`` (which has no attention term). Megatron: Korthikanti et al. 2022
  Eq. 8 **as printed**, 72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l)) per iteration. That adds
  12·s·h·l per token to the model FLOPs (what the attention matmuls' forward and backward
  cost together), three times the one extra forward of QKᵀ and A·V that selective
  recompute physically runs (4·s·h·l per token, :func:`megatron_physical_flops_per_token`).
  The paper's Table 5 HFU figures follow Eq. 8 (HFU/MFU ≈ 1 + s/6h, its Eq. 9). The
  convention keeps the source formula; the physical count is a separate function, and
  notebook 01 shows both.
"""

from __future__ import annotations

import functools

from mfulab.analytic import blocks
from mfulab.analytic.config import RECOMPUTE_FLOPS, TransformerConfig, check_recompute
from mfulab.errors import ParameterError

CONVENTIONS = ("6n", "palm", "causal", "megatron")


# ---------------------------------------------------------------------------- parameters
def layer_param_count(cfg: TransformerConfig, layer: int = 0) -> int:
    """Parameters in block ``layer`` (all blocks alike unless a MoE config keeps dense ones first);
    for a dense GPT block, what ``gpt.Block`` registers. Counts: :mod:`blocks`."""
    return blocks.block_counts(cfg, layer)["total_params"]


def norm_param_count(cfg: TransformerConfig) -> int:
    """Parameters of one normalisation layer: LayerNorm has a bias only when ``cfg.bias``."""
    has_bias = cfg.norm == "layernorm" and cfg.bias
    return cfg.d_model * (2 if has_bias else 1)


@functools.lru_cache(maxsize=512)  # a config is frozen and hashable; planners ask for the same one often
def _model_param_count(cfg: TransformerConfig, block_key: str) -> int:
    h = cfg.d_model
    token_embedding = cfg.vocab_size * h
    position_embedding = cfg.seq_len * h if cfg.learned_positions else 0
    block_params = sum(
        n * blocks.block_counts(cfg, layer)[block_key] for layer, n in blocks.layer_groups(cfg)
    )
    final_norm = norm_param_count(cfg)
    lm_head = 0 if cfg.tied_embeddings else cfg.vocab_size * h
    return int(token_embedding + position_embedding + block_params + final_norm + lm_head)


def param_count(cfg: TransformerConfig) -> int:
    """Exact parameter count of the model built from ``cfg`` (for dense GPT blocks, ``gpt.GPT``);
    under MoE every expert: the *total* that sizes memory.

    For the GPT-2 style (gelu, LayerNorm with bias, tied embeddings, learned positions)
    this is 12·L·h² + 13·L·h + (V + s)·h + 2h (nanoGPT / Radford et al. 2019).
    """
    return _model_param_count(cfg, "total_params")


def active_param_count(cfg: TransformerConfig) -> int:
    """Parameters one token uses: :func:`param_count` with only the router, ``top_k`` routed and
    the shared experts of each MoE block (what 6·N prices; equal to it for a dense model)."""
    return _model_param_count(cfg, "active_params")


def param_tensors(cfg: TransformerConfig) -> list[tuple[str, int]]:
    """(name, element count) of every parameter tensor of the reference model (``gpt.GPT``),
    in registration order (a tied head is the token embedding, listed once): the tensors DDP
    buckets and a sharded optimizer splits. Sums to :func:`param_count` (a test pins both the
    sum and the names against the model built on the meta device)."""
    cfg.check_classic("param_tensors (the reference GPT's tensors)")
    h, q, H, Hkv, f = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff

    def linear(name, n_in, n_out):
        return [(f"{name}.weight", n_in * n_out)] + ([(f"{name}.bias", n_out)] if cfg.bias else [])

    def norm(name):
        biased = cfg.norm == "layernorm" and cfg.bias
        return [(f"{name}.weight", h)] + ([(f"{name}.bias", h)] if biased else [])

    out = [("wte.weight", cfg.vocab_size * h)]
    if cfg.learned_positions:
        out.append(("wpe.weight", cfg.seq_len * h))
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        out += norm(f"{b}.norm1")
        out += linear(f"{b}.attn.q_proj", h, H * q) + linear(f"{b}.attn.k_proj", h, Hkv * q)
        out += linear(f"{b}.attn.v_proj", h, Hkv * q) + linear(f"{b}.attn.o_proj", H * q, h)
        out += norm(f"{b}.norm2") + linear(f"{b}.mlp.up", h, f)
        if cfg.mlp == "swiglu":
            out += linear(f"{b}.mlp.gate", h, f)
        out += linear(f"{b}.mlp.down", f, h)
    out += norm("norm_f")
    if not cfg.tied_embeddings:
        out.append(("lm_head.weight", cfg.vocab_size * h))
    return out


@functools.lru_cache(maxsize=512)
def matmul_param_count(cfg: TransformerConfig, *, tokens_per_group: int | None = None) -> int:
    """Weight elements that take part in a matmul for every token: the blocks' active projection
    weights (router, ``top_k`` routed and shared experts under MoE; with ``tokens_per_group`` and
    a capacity factor, the padded buffers' rows) plus the LM head. Embedding lookups, biases and
    norms do no matmul, which is why 6·N over-counts slightly against an exact FLOP counter."""
    block_weights = sum(
        n * blocks.block_counts(cfg, layer, tokens_per_group=tokens_per_group)["matmul_weights_active"]
        for layer, n in blocks.layer_groups(cfg)
    )
    lm_head = cfg.vocab_size * cfg.d_model
    return int(block_weights + lm_head)


# ---------------------------------------------------------------------------- FLOPs
def attention_flops_per_token(cfg: TransformerConfig, *, seq_len: int | None = None) -> float:
    """12·L·H·Q·T: forward + backward FLOPs of QKᵀ and A·V per token over the full T×T
    (PaLM Appendix B). Forward is 2·T·Q for QKᵀ plus 2·T·Q for A·V per head; backward twice that.
    Under MLA, 6·L·H·(d_qk + d_v)·T (the same count with each product's own head width); windows
    are not seen (PaLM's convention counts every layer global: :func:`exact_matmul_flops_per_token`
    counts them)."""
    L, H = cfg.n_layers, cfg.n_heads
    d_qk, d_v = blocks.attention_dims(cfg)
    T = cfg.seq_len if seq_len is None else seq_len
    return 6.0 * L * H * (d_qk + d_v) * T


FLASH_BACKWARD_OVER_FORWARD = 2.5  # FlashAttention-2 (Dao 2023) §4.1: 5 matmuls back, 2 forward


def fused_attention_flops(*, heads_in_batch: int, seq_len: int, head_dim: int) -> dict:
    """FLOPs a fused (flash) causal attention kernel executes for ``heads_in_batch`` heads
    (micro-batch × heads on one TP rank) of ``seq_len`` tokens: ``forward_flops`` = QKᵀ and A·V
    over the causal half, 0.5 · 4·s²·Q per head (PaLM Appendix B's 4·T·Q per token and head,
    halved by the mask); ``backward_flops`` = 2.5 × that, the gradients' two matmuls per forward
    one plus QKᵀ recomputed (:data:`FLASH_BACKWARD_OVER_FORWARD`, FlashAttention-2 §4.1)."""
    causal_forward_flops = 0.5 * 4.0 * heads_in_batch * seq_len**2 * head_dim
    return {
        "forward_flops": causal_forward_flops,
        "backward_flops": FLASH_BACKWARD_OVER_FORWARD * causal_forward_flops,
    }


def flops_per_token(
    cfg: TransformerConfig,
    *,
    convention: str = "palm",
    recompute: str = "none",
    n_params: int | None = None,
    seq_len: int | None = None,
) -> float:
    """Training FLOPs per token (forward + backward) under ``convention``; with
    ``recompute`` other than ``none`` the hardware FLOPs (HFU numerator) instead.

    Sources and formulas are in the module docstring. ``n_params`` overrides the exact
    count (e.g. an article's rounded "N = 13e9"); ``seq_len`` overrides ``cfg.seq_len``. N is
    the *active* count (:func:`active_param_count`): 6·N with a MoE's total parameters prices
    every expert for every token.
    """
    if convention not in CONVENTIONS:
        raise ParameterError(f"unknown FLOPs convention {convention!r}; valid: {', '.join(CONVENTIONS)}")
    check_recompute(recompute, RECOMPUTE_FLOPS)
    if n_params is not None and n_params <= 0:
        raise ParameterError(f"n_params must be positive, got {n_params}")
    T = cfg.seq_len if seq_len is None else seq_len
    if T <= 0:
        raise ParameterError(f"seq_len must be positive, got {T}")

    if convention == "megatron":
        return megatron_flops_per_token(cfg, recompute=recompute, seq_len=T)

    N = active_param_count(cfg) if n_params is None else n_params
    dense_flops = 6.0 * N  # 2N forward + 4N backward
    attn_fwd_flops = attention_flops_per_token(cfg, seq_len=T) / 3  # 4·L·H·Q·T forward
    attn_weight = {"6n": 0.0, "palm": 1.0, "causal": 0.5}[convention]
    model_flops = dense_flops + attn_weight * 3 * attn_fwd_flops
    extra = {
        "none": 0.0,
        "selective": attn_weight * attn_fwd_flops,
        "full": 2.0 * N + attn_weight * attn_fwd_flops,
    }[recompute]
    return model_flops + extra


def recompute_flops_per_token(
    cfg: TransformerConfig, *, convention: str = "palm", form: str = "none", share: float = 1.0
) -> float:
    """Hardware FLOPs per token (the HFU numerator) when ``share`` of the layers recompute the
    Table 2 ``form``: ``none``, ``selective``, ``full`` (:func:`flops_per_token`) or ``mlp``
    (one more forward of every MLP matrix: 2 FLOPs per weight and token, the source article's
    A14 policy). ``share`` < 1 is a partial checkpoint (Megatron's ``--recompute-method block``:
    k of a stage's layers re-run their whole forward)."""
    if not 0 <= share <= 1:
        raise ParameterError(f"share must be in [0, 1], got {share!r}")
    model = flops_per_token(cfg, convention=convention)
    if form == "mlp":
        n_mats = 3 if cfg.mlp == "swiglu" else 2
        extra = cfg.n_layers * 2 * n_mats * cfg.d_model * cfg.d_ff
    else:
        extra = flops_per_token(cfg, convention=convention, recompute=form) - model
    return model + share * extra


def megatron_flops_per_token(
    cfg: TransformerConfig, *, recompute: str = "none", seq_len: int | None = None
) -> float:
    """The ``megatron`` convention per token, each policy by its source formula (per iteration
    ÷ B·s tokens): ``none`` Korthikanti et al. 2022 App. A, 72·l·h²(1 + s/6h + V/12hl);
    ``selective`` Korthikanti et al. 2022 Eq. 8 as printed, 72·l·h²(1 + s/3h + V/12hl);
    ``full`` Narayanan et al. 2021 Eq. 3, 96·l·h²(1 + s/6h + V/16lh)."""
    check_recompute(recompute, RECOMPUTE_FLOPS)
    cfg.check_classic("the megatron convention (Korthikanti et al.'s GPT-block formula)")
    l, h, V = cfg.n_layers, cfg.d_model, cfg.vocab_size
    s = cfg.seq_len if seq_len is None else seq_len
    if recompute == "full":  # Narayanan et al. 2021, Eq. 3
        return 96.0 * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    if recompute == "selective":  # Korthikanti et al. 2022, Eq. 8 as printed
        return 72.0 * l * h**2 * (1 + s / (3 * h) + V / (12 * h * l))
    return 72.0 * l * h**2 * (1 + s / (6 * h) + V / (12 * h * l))  # Korthikanti et al. 2022, App. A


def megatron_physical_flops_per_token(
    cfg: TransformerConfig, *, recompute: str = "none", seq_len: int | None = None
) -> float:
    """What a GPT block under ``recompute`` physically runs, counted the way Korthikanti et al.
    derive their model FLOPs (2 FLOPs per multiply-add, backward = 2 × forward): the model
    FLOPs plus one more forward of what is recomputed, per token. ``selective`` re-runs QKᵀ and
    A·V once: +4·s·h·l (Eq. 8 as printed adds 12·s·h·l); ``full`` re-runs each layer's
    forward: +24·l·h²(1 + s/6h), which equals Narayanan et al.'s 96 formula exactly."""
    check_recompute(recompute, RECOMPUTE_FLOPS)
    l, h = cfg.n_layers, cfg.d_model
    s = cfg.seq_len if seq_len is None else seq_len
    model_flops = megatron_flops_per_token(cfg, recompute="none", seq_len=s)
    recomputed_attention_fwd_flops = 4.0 * s * h * l  # QKᵀ (2·s·h) + A·V (2·s·h) per token and layer
    recomputed_layers_fwd_flops = 24.0 * l * h**2 * (1 + s / (6 * h))
    extra = {"none": 0.0, "selective": recomputed_attention_fwd_flops, "full": recomputed_layers_fwd_flops}
    return model_flops + extra[recompute]


def exact_matmul_flops_per_token(
    cfg: TransformerConfig,
    *,
    seq_len: int | None = None,
    mask: str = "full",
    tokens_per_group: int | None = None,
) -> float:
    """Training matmul FLOPs per token, counted block by block (:mod:`blocks`): 6 × the active
    matmul weights (:func:`matmul_param_count`) plus QKᵀ and A·V. ``mask`` "full" is what
    ``torch.utils.flop_counter.FlopCounterMode`` counts for the reference model with naive
    attention (the full T×T, 12·L·H·Q·T); "causal" what a kernel that skips every masked key
    runs: the exact count under causal, sliding-window and chunked masks. Non-matmul ops count
    zero. ``tokens_per_group`` with a capacity factor counts the experts' padded buffers."""
    T = cfg.seq_len if seq_len is None else seq_len
    weight_flops = 6.0 * matmul_param_count(cfg, tokens_per_group=tokens_per_group)
    core_flops = sum(
        n * 3.0 * blocks.attention_core_fwd_flops_per_token(cfg, layer, mask=mask, seq_len=T)
        for layer, n in blocks.layer_groups(cfg)
    )
    return weight_flops + core_flops


def attention_flops_share(
    cfg: TransformerConfig, *, convention: str = "palm", seq_len: int | None = None
) -> float:
    """Fraction of model FLOPs per token spent in the attention matmuls under ``convention``."""
    total = flops_per_token(cfg, convention=convention, seq_len=seq_len)
    without = flops_per_token(cfg, convention="6n", seq_len=seq_len)
    if convention == "megatron":
        T = cfg.seq_len if seq_len is None else seq_len
        attn = 72.0 * cfg.n_layers * cfg.d_model**2 * T / (6 * cfg.d_model)
        return attn / total
    return (total - without) / total


# ---------------------------------------------------------------------------- utilisation
def model_flops_utilisation(
    *, flops_per_token: float, tokens_per_s: float, n_devices: int, peak_flops_per_s: float
) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the devices' summed peak
    (Chowdhery et al. 2022, PaLM, Sec. 4.1 / App. B). Pass hardware FLOPs per token
    (``recompute`` ≠ ``none``) to get HFU instead."""
    for name, value in (
        ("flops_per_token", flops_per_token),
        ("tokens_per_s", tokens_per_s),
        ("n_devices", n_devices),
        ("peak_flops_per_s", peak_flops_per_s),
    ):
        if not value > 0:
            raise ParameterError(f"{name} must be positive, got {value}")
    achieved_flops_per_s = flops_per_token * tokens_per_s
    peak_total_flops_per_s = n_devices * peak_flops_per_s
    return achieved_flops_per_s / peak_total_flops_per_s


def step_mfu(*, flops_per_step: float, step_time_s: float, n_devices: int, peak_flops_per_s: float) -> float:
    """MFU of one step: FLOPs per step / (devices × peak × step time); the form the articles use."""
    if not step_time_s > 0:
        raise ParameterError(f"step_time_s must be positive, got {step_time_s}")
    return model_flops_utilisation(
        flops_per_token=flops_per_step,
        tokens_per_s=1.0 / step_time_s,
        n_devices=n_devices,
        peak_flops_per_s=peak_flops_per_s,
    )
