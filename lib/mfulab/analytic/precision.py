"""MFU when the GEMMs of a step run in more than one precision.

A step trained in FP8 or FP4 runs most linear layers at the low precision and the rest (the
attention core, the output head, the router, often a few whole blocks) in BF16. MFU's
denominator, one peak FLOP/s, then has no single right value; three are in use:

- **BF16-equivalent MFU**: every FLOP against the BF16 dense peak (what a framework that divides
  by its BF16 table prints). It exceeds 100% when enough work runs at a faster precision.
- **Low-precision-peak MFU**: every FLOP against the low precision's dense peak. It understates:
  the BF16 part could never run at that rate.
- **Precision-aware MFU** (ours): the time a device at its dense peaks would need for the step,
  each dtype's GEMM FLOPs at that dtype's peak, over the step's time:
  (Σ_d F_d / peak_d) / t. It is the ordinary MFU when one precision runs everything, never
  exceeds 100%, and equals achieved FLOP/s over the work-weighted harmonic mean of the peaks.

The split of a token's FLOPs is the exact count of :mod:`blocks` (active weights, attention over
the keys the mask leaves), in four parts: the blocks' linear layers, the MoE router, the attention
core (QKᵀ, A·V) and the output head. A :class:`Recipe` says which dtype each part runs in.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic import blocks
from mfulab.analytic.config import TransformerConfig
from mfulab.errors import ParameterError

PARTS = ("linear", "router", "attention_core", "head")


@dataclass(frozen=True)
class Recipe:
    """Which dtype each part of a step's GEMMs runs in: the blocks' linear layers in ``linear``
    except the first ``bf16_first`` and last ``bf16_last`` blocks, kept in BF16 with the attention
    core, the router and the output head (``high``)."""

    name: str
    linear: str
    bf16_first: int = 0
    bf16_last: int = 0
    high: str = "bf16"
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("bf16_first", "bf16_last"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 0:
                raise ParameterError(f"{field} must be a non-negative integer, got {value!r}")


def flops_parts_per_token(cfg: TransformerConfig, layer: int) -> dict:
    """Training FLOPs per token of block ``layer`` by part (:data:`PARTS`, head excluded)."""
    ffn = blocks.ffn_weight_counts(cfg, layer)["active"]
    router = cfg.d_model * cfg.moe.n_experts if cfg.layer_is_moe(layer) else 0
    core = blocks.attention_core_fwd_flops_per_token(cfg, layer, mask="causal")
    return {
        "linear": 6.0 * (blocks.attention_weight_count(cfg) + ffn - router),
        "router": 6.0 * router,
        "attention_core": 3.0 * core,
    }


def flops_by_dtype(cfg: TransformerConfig, recipe: Recipe) -> dict[str, float]:
    """A token's training FLOPs per dtype under ``recipe``: they sum to the exact count,
    ``flops.exact_matmul_flops_per_token(cfg, mask="causal")``."""
    if recipe.bf16_first + recipe.bf16_last > cfg.n_layers:
        raise ParameterError(
            f"recipe {recipe.name!r} keeps {recipe.bf16_first} + {recipe.bf16_last} blocks in BF16, "
            f"more than the model's {cfg.n_layers}"
        )
    out: dict[str, float] = {}

    def add(dtype, value):
        out[dtype] = out.get(dtype, 0.0) + value

    for layer in range(cfg.n_layers):
        parts = flops_parts_per_token(cfg, layer)
        kept_high = layer < recipe.bf16_first or layer >= cfg.n_layers - recipe.bf16_last
        add(recipe.high if kept_high else recipe.linear, parts["linear"])
        add(recipe.high, parts["router"] + parts["attention_core"])
    add(recipe.high, 6.0 * cfg.vocab_size * cfg.d_model)  # the output head
    return out


def three_mfus(
    flops_per_dtype: dict[str, float], *, tokens_per_s: float, peaks_flops_per_s: dict[str, float]
) -> dict:
    """The three MFUs of one device that processes ``tokens_per_s`` tokens, each running
    ``flops_per_dtype`` (per token): BF16-equivalent, low-precision-peak (against the fastest
    dtype the step uses) and precision-aware (module docstring). ``peaks_flops_per_s``: the
    device's dense peak for every dtype in the split (``devices.peak_flops_per_s``)."""
    if not tokens_per_s > 0:
        raise ParameterError(f"tokens_per_s must be positive, got {tokens_per_s!r}")
    missing = [d for d in flops_per_dtype if d not in peaks_flops_per_s]
    if missing or "bf16" not in peaks_flops_per_s:
        raise ParameterError(f"no dense peak given for {missing or ['bf16']}")
    total_flops_per_token = sum(flops_per_dtype.values())
    achieved_flops_per_s = total_flops_per_token * tokens_per_s
    fastest_dtype = max(flops_per_dtype, key=lambda d: peaks_flops_per_s[d])
    ideal_s_per_token = sum(f / peaks_flops_per_s[d] for d, f in flops_per_dtype.items())
    return {
        "achieved_flops_per_s": achieved_flops_per_s,
        "bf16_equivalent": achieved_flops_per_s / peaks_flops_per_s["bf16"],
        "low_precision_peak": achieved_flops_per_s / peaks_flops_per_s[fastest_dtype],
        "low_precision_dtype": fastest_dtype,
        "precision_aware": ideal_s_per_token * tokens_per_s,
        "effective_peak_flops_per_s": total_flops_per_token / ideal_s_per_token,
    }
