"""A14 on a second yardstick: activation bytes freed per second of recompute, each part's re-run
priced by the course's one step model (``step_terms.layer_terms`` on ``stated.A14_DEVICE``, the
article's card) instead of by its matmul FLOPs alone. Per FLOP, MindSpeed's activation-function
recompute wins by construction (it re-runs no matmul); in seconds its memory-bound re-run has a
price, and so do the unfused core's softmax and dropout, so the two can be compared.

Per part and layer (one micro-batch, TP 1, as Table 2 counts):
- attention core: the score path's forward (QKᵀ, scale, mask, softmax, dropout, A·V; with a
  fused kernel its forward), the step model's ``attention_kernel_f_s``;
- MLP: its GEMMs, activation and second norm from the branch input, ``mlp_forward_s``;
- MLP activation function: the activation alone, read and write at the card's elementwise
  bandwidth, ``activation_forward_s``.
Bytes freed are ``freed_per_flop.layer_terms``'."""

from __future__ import annotations

from mfulab.analytic import rates as rates_mod
from mfulab.analytic import step_terms
from mfulab.studies.recompute import freed_per_flop, stated

SECONDS_OF = {
    "attention core": "attention_kernel_f_s",
    "MLP": "mlp_forward_s",
    "MLP activation function": "activation_forward_s",
}


def table(configs=stated.A14_CLAIM_CONFIGS, device: str = stated.A14_DEVICE):
    """One row per (config, attention, part of :data:`SECONDS_OF`): bytes freed, seconds of the
    re-run and bytes freed per second of it (GB/s)."""
    import pandas as pd

    a = rates_mod.Assumptions()
    r = rates_mod.machine_rates(device, dtype="bf16", assumptions=a)
    rows = []
    for cfg in configs:
        for attention in freed_per_flop.ATTENTIONS:
            terms = step_terms.layer_terms(
                cfg,
                micro_batch=1,
                tp=1,
                sequence_parallel=False,
                attention=attention,
                dropout=True,
                rates=r,
                a=a,
            )
            freed = {
                x["part"]: x["bytes_freed"] for x in freed_per_flop.layer_terms(cfg, attention=attention)
            }
            for part, key in SECONDS_OF.items():
                rows.append(
                    {
                        "config": cfg.name,
                        "attention": attention,
                        "device": device,
                        "part": part,
                        "bytes_freed": freed[part],
                        "recompute_s": terms[key],
                        "freed_gb_per_recompute_s": freed[part] / terms[key] / 1e9,
                    }
                )
    return pd.DataFrame(rows)


def activation_against_core(seconds, attention: str = "naive") -> dict:
    """Per config, under ``attention`` (naive: the claim's regime): the activation function's bytes
    freed per second over the core's, and the decision on that yardstick with
    ``stated.A14_DECISIVE_MARGIN``: confirmed when the activation function frees more per second
    by the margin in every layer, refuted when the core does, analytic only otherwise."""
    naive = seconds[seconds.attention == attention].pivot_table(
        index="config", columns="part", values="freed_gb_per_recompute_s"
    )
    ratio = naive["MLP activation function"] / naive["attention core"]
    return {"ratio": ratio, "decision": margin_decision(ratio), "per_second": naive}


def margin_decision(ratio) -> str:
    """A14's rule for a ratio per layer (the article's choice over the alternative): confirmed when
    above 1 + ``stated.A14_DECISIVE_MARGIN`` in every layer, refuted when below its inverse in
    every layer, analytic only otherwise."""
    margin = stated.A14_DECISIVE_MARGIN
    if (ratio > 1 + margin).all():
        return "confirmed"
    if (ratio < 1 / (1 + margin)).all():
        return "refuted"
    return "analytic only"
