"""A14's rows (article A §5.1: for ~100B models recompute the MLP and keep the attention
activations): the choice in the claim's premise (unfused attention), the choice with Flash
Attention as article A's runs use it, and the reasons; from ``freed_per_flop``'s tables."""

from __future__ import annotations

from mfulab.analytic.config import ATTENTION_IMPLS
from mfulab.studies.recompute import freed_per_flop, freed_per_second, stated
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def _per_config(frame, column, fmt):
    return ", ".join(f"{fmt.format(v)} ({cfg})" for cfg, v in frame[column].items())


def _a14_measured_text(records, t) -> str:
    measured = t["a14_measured"]
    if not len(measured):
        return ""
    m = measured.set_index(["attention", "policy"]).bytes_per_recomputed_flop
    parts = [
        f"{impl}: core {m[(impl, 'selective')] * 1e6:.3g} vs MLP {m[(impl, 'mlp')] * 1e6:.3g} B/MFLOP"
        for impl in reversed(ATTENTION_IMPLS)  # sdpa first
        if (impl, "selective") in m.index and (impl, "mlp") in m.index
    ]
    return (
        f"; measured on {records['config']['name']} (exact saved bytes; FLOPs of one full re-run of "
        "each region's matmuls, for every row): " + "; ".join(parts)
    )


def a14_claims(records, t) -> list[Claim]:
    """A14 as two rows: one layer of a ~100B-class model and of the article's 13B, without a fused
    attention kernel (the article keeps "the attention-score intermediates", which only an
    unfused kernel stores) and with Flash Attention (its 13B's §3.2) (``freed_per_flop``; Table 2
    bytes, bf16, dropout; FLOPs of the re-run matmuls). Analytic: no run can flip them.

    1. The choice (recompute the MLP, keep the attention), by activation bytes freed per
       recomputed FLOP. "Keep the attention" can be set against recomputing the attention core
       (Korthikanti's selective recompute) or the whole attention block (QKV, core, projection).
       Rule, in the claim's own regime, unfused attention (its premise, "the attention
       activations are large", holds only where the scores are stored): confirmed when the MLP
       frees more per FLOP than both in every layer; refuted when the core frees more than the
       MLP in every layer; otherwise analytic only. The flash reading (the article's 13B runs
       Flash Attention in §3.2) is the evidence's context, not the decision. Here, unfused, the
       core frees 42× and 101× more per FLOP than the MLP: refuted (analysis); with a flash
       kernel the MLP frees 25× and 122× more than the core but 0.93× and 1.21× what the block
       frees (:func:`freed_per_flop.block_break_even_seq_len`).
    2. The reasons ("the MLP is cheap to redo; the attention activations are large and costly
       to redo"). Rule, per layer: "cheap/costly" holds when the MLP's share of the layer's
       forward FLOPs is below the attention block's, "large" when the attention block frees
       more activation bytes than the MLP (the most generous reading: the core frees less).
       Confirmed when both hold in every layer, refuted when either fails in every layer,
       otherwise "analytic only". Here the MLP is 65% and 59% of the forward FLOPs and the
       attention block frees 11 against the MLP's 19 ·s·b·h (the fused core 0.09%): refuted, far
       from both thresholds."""
    regime = t["a14_verdict"].set_index(["config", "attention"])
    fused = regime.xs("fused", level="attention")
    naive = regime.xs("naive", level="attention")
    # the claim's regime: the article keeps "Q, K, V and the attention-score intermediates"
    # (stored only without a fused kernel); its 13B's Flash Attention (§3.2) is context
    if ((naive["MLP ÷ core"] > 1) & (naive["MLP ÷ block"] > 1)).all():
        whole_mlp = "confirmed"
    elif (naive["MLP ÷ core"] < 1).all():
        whole_mlp = "refuted"
    else:
        whole_mlp = "analytic only"
    act = freed_per_second.activation_against_core(t["a14_seconds"]) if "a14_seconds" in t else None
    # two readings of "the MLP": the whole MLP (它把 MLP 部分设置为不保存, "the MLP part") and the GeLU
    # alone (its reasons' "MLP 中间层的 activation", MindSpeed's --recompute-activation-function,
    # judged in seconds); the course's rule: readings that disagree leave the row not checkable
    # (until 2026-12-07 the whole MLP decided and the GeLU was context)
    act_decision = "confirmed" if act is None else act["decision"]
    choice = whole_mlp if whole_mlp == act_decision else "not checkable"
    reasons = t["a14_reasons"].set_index(["config", "attention"])
    break_even = ", ".join(
        f"{freed_per_flop.block_break_even_seq_len(cfg):.0f} ({cfg.name}, run at {cfg.seq_len})"
        for cfg in stated.A14_CLAIM_CONFIGS
    )
    regime_text = (
        "one layer of " + ", ".join(naive.index) + " (Table 2, bf16, dropout), unfused attention (the "
        "claim's premise: it keeps the attention scores), Flash Attention (its 13B's §3.2) beside it"
    )
    choice_row = Claim(
        "A14",
        "for ~100B models, recompute the MLP and keep the self-attention activations (the choice, in "
        "the claim's premise: unfused attention keeps the scores)",
        "activation bytes freed per recomputed FLOP (one full re-run of the region's matmuls), the MLP "
        "against the attention core and against the whole attention block (QKV, core, projection), "
        + regime_text
        + "; unfused: confirmed when the MLP frees more than both in every layer, refuted when the core "
        "frees more than the MLP in every layer, analytic only otherwise; two readings of 'the MLP'",
        choice,
        _readings_lead(whole_mlp, act_decision) + "read as the whole MLP: "
        "without a fused kernel the attention core frees "
        + _per_config(1 / naive[["MLP ÷ core"]], "MLP ÷ core", "{:.0f}×")
        + " more per FLOP than the MLP (Korthikanti's selective recompute takes the core: the opposite "
        "choice, and so does MindSpeed's documented selective recompute, --recompute-activations). "
        "Context, not the decision: with a flash kernel the scores are never stored and "
        "the MLP frees "
        + _per_config(fused, "MLP ÷ core", "{:.0f}×")
        + " more per FLOP than the core but "
        + _per_config(fused, "MLP ÷ block", "{:.2f}×")
        + " what the whole attention block frees (it beats the block only above s = (24h + 64a)/76 "
        f"tokens: {break_even})" + _a14_measured_text(records, t) + "; " + _activation_text(reasons, act),
        basis=verdicts.ASSUMED,  # ~100B read as Megatron's 145.6B, and the 13B's layer
    )

    fused_r, naive_r = reasons.xs("fused", level="attention"), reasons.xs("naive", level="attention")
    # "cheap/costly" is a FLOP count, the same in both regimes; "large" is read where the article
    # reads it (unfused: the scores are stored), the fused kernel beside it
    cheap = naive_r["MLP FLOP share"] < naive_r["attention block FLOP share"]
    large = naive_r["attention block byte share"] > naive_r["MLP byte share"]
    if (cheap & large).all():
        whole_because = "confirmed"
    elif (~cheap).all() or (~large).all():
        whole_because = "refuted"
    else:
        whole_because = "analytic only"
    # read as the activation function: cheap by construction (no matmul); "large" is a real test
    act_large = reasons["attention block byte share"] > reasons["MLP activation function byte share"]
    act_because = "confirmed" if act_large.all() else "refuted" if not act_large.any() else "analytic only"
    because = whole_because if whole_because == act_because else "not checkable"  # the readings
    reasons_row = Claim(
        "A14",
        "the reasons: the MLP is cheap to redo, the self-attention activations are large and costly to redo",
        "share of the layer's forward FLOPs (matmuls) each part re-runs and share of the layer's "
        "activation bytes it frees, " + regime_text + "; refuted when in every layer the MLP re-runs "
        "more FLOPs than the attention block or the attention frees fewer bytes than the MLP",
        because,
        _readings_lead(whole_because, act_because) + "read as the whole MLP: "
        "the MLP re-runs "
        + _per_config(naive_r, "MLP FLOP share", "{:.0%}")
        + " of the layer's forward FLOPs, the whole attention block "
        + _per_config(naive_r, "attention block FLOP share", "{:.0%}")
        + ": the MLP is the costlier part to redo. Without a fused kernel (where the article's "
        "'large' holds) the attention core's scores are large ("
        + _per_config(naive_r, "attention core byte share", "{:.0%}")
        + " of the bytes) but the cheapest to redo ("
        + _per_config(naive_r, "attention core FLOP share", "{:.1%}")
        + " of the FLOPs): large, not costly. With a flash kernel the attention block frees "
        + _per_config(fused_r, "attention block byte share", "{:.0%}")
        + " of the bytes against the MLP's "
        + _per_config(fused_r, "MLP byte share", "{:.0%}")
        + " (the core "
        + _per_config(fused_r, "attention core byte share", "{:.2%}")
        + "): not even large. Read as MindSpeed's activation function: it re-runs no matmul (cheap, by "
        "construction) and frees "
        + _per_config(reasons.xs("naive", level="attention"), "MLP activation function byte share", "{:.0%}")
        + " of the bytes unfused, "
        + _per_config(fused_r, "MLP activation function byte share", "{:.0%}")
        + " fused, less than the attention block in "
        + ("every layer (large: holds)" if act_large.all() else "not every layer")
        + f" ({verdicts.label(act_because, verdicts.ASSUMED)} on this reading)",
        basis=verdicts.ASSUMED,  # ~100B read as Megatron's 145.6B, and the 13B's layer
    )
    fused_act = (
        freed_per_second.activation_against_core(t["a14_seconds"], "fused") if "a14_seconds" in t else None
    )
    return [choice_row, a14_fused_claim(fused, break_even, reasons, fused_act), reasons_row]


def _readings_lead(whole_mlp: str, act_decision: str) -> str:
    """Both readings' answers first: the row stands where they agree, not checkable otherwise."""
    agree = whole_mlp == act_decision
    return (
        f"two readings of 'the MLP': the whole MLP (它把 MLP 部分设置为不保存, the MLP part; its check of "
        f"whether the MLP layer takes recompute_granularity): {verdicts.label(whole_mlp, verdicts.ASSUMED)}; "
        "the GeLU alone (its reasons' 'MLP 中间层的 activation', MindSpeed's "
        f"--recompute-activation-function): {verdicts.label(act_decision, verdicts.ASSUMED)}"
        + ("; they agree. " if agree else "; they disagree, so not checkable. ")
    )


def _seconds_text(act: dict | None) -> str:
    if act is None:
        return ""
    per = act["per_second"]
    return (
        f"; priced in seconds on the article's {stated.A14_DEVICE} (the step model's layer terms), it frees "
        + ", ".join(
            f"{per.loc[c, 'MLP activation function']:.0f} GB/s of re-run against the core's "
            f"{per.loc[c, 'attention core']:.0f} ({act['ratio'][c]:.2f}×) and the whole MLP's "
            f"{per.loc[c, 'MLP']:.0f} ({c})"
            for c in per.index
        )
        + f": {verdicts.label(act['decision'], verdicts.ANALYSIS)} on that yardstick "
        f"(±{stated.A14_DECISIVE_MARGIN:.0%}), though it frees far fewer bytes than the core, so it "
        "cannot stand in for it where more memory is needed"
    )


def _activation_text(reasons, act: dict | None = None) -> str:
    naive = reasons.xs("naive", level="attention")
    fused = reasons.xs("fused", level="attention")
    return (
        "read as MindSpeed's --recompute-activation-function (the article's own words are 'MLP 中间层的 "
        "activation 计算量相对小', the MLP's intermediate activation is cheap to compute, which is what "
        "this option frees: the GeLU alone; its documentation, "
        "Ascend/MindSpeed docs/en/features/activation-function-recompute.md, frees the GeLU's 4h-wide "
        "output at a slight slowdown): it frees "
        + _per_config(naive, "MLP activation function byte share", "{:.0%}")
        + " of the layer's bytes unfused, "
        + _per_config(fused, "MLP activation function byte share", "{:.0%}")
        + " fused, and re-runs no matmul, so per matmul FLOP it wins by construction (its cost is "
        "memory-bound work that yardstick does not count, nor the unfused core's softmax)"
        + _seconds_text(act)
        + "; the other reading, beside the whole MLP's: where they disagree the row is not checkable"
    )


def a14_fused_claim(fused, break_even: str, reasons, act: dict | None = None) -> Claim:
    """A14's choice with Flash Attention, which article A's own runs use (§3.2, §6.2): the scores
    are never stored, so the core frees almost nothing and the question is the MLP against the
    whole attention block. Confirmed (analysis) when the MLP frees more per FLOP than the block
    by ``stated.A14_DECISIVE_MARGIN`` in every layer, refuted (analysis) when the block does by
    that margin in every layer, analytic only otherwise."""
    margin = stated.A14_DECISIVE_MARGIN
    whole_mlp = freed_per_second.margin_decision(fused["MLP ÷ block"])
    act_decision = "confirmed" if act is None else act["decision"]
    decision = whole_mlp if whole_mlp == act_decision else "not checkable"  # as for the choice row
    return Claim(
        "A14",
        "for ~100B models, recompute the MLP and keep the self-attention activations (the choice, with "
        "Flash Attention as article A runs it)",
        "activation bytes freed per recomputed FLOP, the MLP against the whole attention block, one layer "
        "of " + ", ".join(fused.index) + f" with a fused kernel; decided by a {margin:.0%} margin either way "
        "in every layer, analytic only otherwise",
        decision,
        _readings_lead(whole_mlp, act_decision)
        + "read as the whole MLP: the MLP frees "
        + _per_config(fused, "MLP ÷ block", "{:.2f}×")
        + " what the whole attention block frees per FLOP (near parity: the choice barely matters) and "
        + _per_config(fused, "MLP ÷ core", "{:.0f}×")
        + f" what the core frees; the MLP wins above s = (24h + 64a)/76 tokens: {break_even}; "
        + _activation_text(reasons, act),
        basis=verdicts.ASSUMED,  # ~100B read as Megatron's 145.6B, and the 13B's layer
    )
