"""The claims rows of the ``parallelism`` study, one builder per claim, from the measured tables
(``measured``) and the at-scale rows (``planner_at_scale``); ``claims.outcome`` builds the tables
once and composes the rows, and is the one function the notebook and ``make stability`` call."""

from __future__ import annotations

import math

from mfulab.studies.parallelism import stated
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import LAYOUT_MARGIN
from mfulab.studykit.verdicts import Claim
from mfulab.units import KIB

# Gradient gates: FSDP2, TP and SP against DDP / the whole block, fp32 (the notebook asserts them):
# |Δ| ≤ GRADIENT_TOLERANCE, relative to the reference's largest element where that passes 1 (at
# GPU sizes gradients reach 1e2-1e3, and a sharded reduction order moves them by more than 1e-4).
GRADIENT_TOLERANCE = 1e-4


def gradient_ok(max_abs_diff, gradient_scale):
    """Whether a gate holds: ``max_abs_diff ≤ GRADIENT_TOLERANCE · max(1, gradient_scale)``
    (scalars or pandas columns; a record without a scale counts as scale 1)."""
    import numpy as np

    scale = np.maximum(1.0, np.nan_to_num(np.asarray(gradient_scale, dtype=float), nan=1.0))
    return np.asarray(max_abs_diff, dtype=float) <= GRADIENT_TOLERANCE * scale


def a11_claims(tp) -> list[Claim]:
    sp, plain = tp[tp.layout == "tp+sp"].iloc[0], tp[tp.layout == "tp"].iloc[0]
    k = stated.A11_KORTHIKANTI_COLLECTIVES
    counted = dict(part.split(" ×") for part in sp.collectives.split(", "))
    one_all_reduce = counted == {"all_reduce": "1"}
    return [
        Claim(
            "A11",
            "sequence parallelism joins the sequence slices with one all-reduce",
            "collectives of one block's forward + backward under DTensor TP + SP (CommDebugMode)",
            "confirmed" if one_all_reduce else "refuted",
            f"counted: {sp.collectives} (Korthikanti §4.2.2: {k['all_gather']} all-gathers + "
            f"{k['reduce_scatter']} reduce-scatters per layer); plain TP here: {plain.collectives} "
            "(PyTorch's "
            "separate Q, K, V linears each all-reduce their input gradient; Megatron's fused QKV does 4). "
            f"Elements each rank sends on a ring: {sp.elements_sent:,.0f} with SP, what Megatron's 4 "
            f"all-reduces would send, vs {plain.elements_sent:,.0f} for PyTorch's 6: the all-gather + "
            "reduce-scatter pair moves the bytes of the all-reduce it replaces, so the article names the "
            "wrong collective, not the wrong cost",
            basis=verdicts.DOCUMENTED,  # Korthikanti et al. 2022's design, counted in PyTorch here
        ),
        Claim(
            "A11",
            "sequence parallelism leaves each card its slice of LayerNorm (and dropout) to keep",
            "activation bytes kept for backward per rank, TP + SP vs TP (saved-tensor hooks)",
            "confirmed" if sp.saved_bytes < plain.saved_bytes else "refuted",
            f"TP + SP keeps {sp.saved_bytes / KIB:.0f} KiB vs TP {plain.saved_bytes / KIB:.0f} KiB "
            f"({sp.saved_bytes / plain.saved_bytes:.2f}×; Korthikanti's form "
            f"{sp.korthikanti_bytes / plain.korthikanti_bytes:.2f}×, which PyTorch misses by the gathered "
            "inputs its column-parallel linears keep: with them "
            f"{sp.korthikanti_plus_gathered_bytes / KIB:.0f} "
            f"KiB predicted). The model has no dropout: that half is not measured. Outputs and gradients "
            f"equal the whole block to {sp.max_abs_diff:.1e}",
            basis=verdicts.CONSTRUCTION,
        ),
    ]


def zero3_needs_overlap(
    margin_with_overlap: float, margin_without: float, decisive: float = stated.A12_DECISIVE_MARGIN
) -> bool | None:
    """A12's "ZeRO-3 needs overlap to pay off", one case, from the best ZeRO 0–2 step over the
    best ZeRO-3 step, minus 1 (> 0: ZeRO-3 faster), with the DP overlap and without: yes when
    ZeRO-3 wins only with the overlap, no when it wins without it, neither when it wins in
    neither (the overlap is not what decides) or when a margin that decides is smaller than
    ``decisive`` (inside the step model's error on such runs: ``stated.A12_DECISIVE_MARGIN``)."""
    if abs(margin_with_overlap) < decisive or abs(margin_without) < decisive:
        return None
    if margin_without > 0:
        return False
    return True if margin_with_overlap > 0 else None


def _same_framework_pairs(by: dict, overlaps) -> list[tuple]:
    """(framework, DP overlap, ZeRO-2 step, ZeRO-3 step, ZeRO-2 fits) for the planner's
    one-framework rows: FSDP2 at ZeRO-2 on the best ZeRO-3 layout, and the best ZeRO 0–2 layout
    at ZeRO-3 in its own framework (where that framework has a stage 3)."""
    out = []
    for o in overlaps:
        fs2 = by.get((o, "best ZeRO-3's layout at ZeRO-2, same framework"))
        ds3 = by.get((o, "best ZeRO 0–2's layout at ZeRO-3, same framework"))
        if fs2 is not None:
            out.append((fs2.framework, o, fs2.step_s, by[(o, "best ZeRO-3")].step_s, bool(fs2.fits)))
        if ds3 is not None:
            best2 = by[(o, "best ZeRO 0–2")]
            out.append((ds3.framework, o, best2.step_s, ds3.step_s, True))
    return out


def a12_claims(sh, planner) -> list[Claim]:
    one = sh[sh.m == sh.m.min()].set_index("config")
    ddp, zero2, zero3 = one.loc["ddp"], one.loc["fsdp_grad_op"], one.loc["fsdp_full"]
    exact = bool(
        (sh.traffic_elements == sh.traffic_formula_elements).all()
        and (sh.peak_bytes == sh.peak_formula_bytes).all()
    )
    less = zero3.peak_bytes < zero2.peak_bytes < ddp.peak_bytes
    more = zero3.traffic_elements > zero2.traffic_elements
    cases, answers, stage_wins = [], [], []
    for (device, preset, devices), g in planner.groupby(["device", "preset", "devices"], sort=False):
        by = {(r.dp_overlap, r.row): r for r in g.itertuples()}
        hi, lo = max(g.dp_overlap), min(g.dp_overlap)
        margin = {o: by[(o, "best ZeRO 0–2")].step_s / by[(o, "best ZeRO-3")].step_s - 1 for o in (hi, lo)}
        answers.append(zero3_needs_overlap(margin[hi], margin[lo]))
        cases.append(
            f"{preset} on {devices} {device}: best ZeRO 0–2 {by[(hi, 'best ZeRO 0–2')].step_s:.2f} s vs "
            "best ZeRO-3 "
            f"{by[(hi, 'best ZeRO-3')].step_s:.2f} s at DP overlap {hi:g} (ZeRO-3 {margin[hi]:+.0%}), "
            f"{by[(lo, 'best ZeRO 0–2')].step_s:.2f} vs {by[(lo, 'best ZeRO-3')].step_s:.2f} s at {lo:g} "
            f"({margin[lo]:+.0%}); the same layout as ZeRO-3 {by[(hi, 'same layout, ZeRO-3')].step_s:.2f} s"
        )
        same = _same_framework_pairs(by, (hi, lo))
        stage_wins.extend(z3 < z2 * (1 - stated.A12_DECISIVE_MARGIN) for _, _, z2, z3, fits in same if fits)
        if same:
            cases[-1] += "; one framework for both stages: " + ", ".join(
                f"{fw} at overlap {o:g}, ZeRO-2 {z2:.2f} s{'' if fits else ' (does not fit)'} "
                f"vs ZeRO-3 {z3:.2f} s"
                for fw, o, z2, z3, fits in same
            )
        if (preset, devices) == tuple(stated.A12_PLANNER_CASES[0].values()) and margin[hi] > 0:
            cases[-1] += (
                " (inside the article's range, a ten-billion-class model below 1000 cards, ZeRO-3 wins "
                f"best-vs-best here with the overlap, on {device} at one sequence per card; chapter 04 "
                "judges the article's speed rule at its own 13B command on 910B cards; the one-framework "
                "rows say whether the stage or the "
                "frameworks make this win)"
            )
    return [
        Claim(
            "A12",
            "ZeRO-3 holds much less per card than ZeRO-2 and communicates more",
            "peak bytes per rank (end of forward) and collective buffers counted per step: DDP, "
            "FSDP2 without "
            "resharding (ZeRO-2's peak) and fully sharded (ZeRO-3)",
            "confirmed" if less and more and exact else "refuted",
            f"peak: fully sharded {zero3.peak_bytes / KIB:.0f} KiB vs ZeRO-2 "
            f"{zero2.peak_bytes / KIB:.0f} "
            f"KiB vs DDP {ddp.peak_bytes / KIB:.0f} KiB per rank (formulas 16Ψ/n, 4Ψ + 12Ψ/n, "
            "16Ψ at n = 2); "
            f"traffic {zero3.traffic_over_psi:.1f}Ψ vs {zero2.traffic_over_psi:.1f}Ψ vs "
            f"{ddp.traffic_over_psi:.1f}Ψ "
            "per step (ZeRO: 3Ψ, 2Ψ, 2Ψ); under gradient accumulation FSDP2 re-gathers every "
            "micro-batch; every "
            f"count equals its formula: {exact}",
            basis=verdicts.CONSTRUCTION,
        ),
        Claim(
            "A12",
            "ZeRO-3 needs overlap to pay off",
            "planner on article A's own card, the 910B, and on A100s (the step model's best-validated "
            "card): the best layout per ZeRO family, at the assumed DP overlap and with none, 13B on 512 "
            "and 70B on 1024 cards; the sentence holds where every case agrees",
            verdicts.over_scenarios(answers),
            "; ".join(cases) + f". A margin below {stated.A12_DECISIVE_MARGIN:.0%} decides nothing (the step "
            "model's error on FSDP and DeepSpeed runs is of that order: chapter 09). Best-vs-best prices "
            "ZeRO 0–2 with Megatron's or DeepSpeed's collectives and ZeRO-3 with FSDP's; with one framework "
            + (
                "for both stages, ZeRO-3 is not decisively faster anywhere ZeRO-2 fits: a hypothesis, not "
                "a finding (the one-framework gaps lie inside the margin), is that a ZeRO-3 win best-vs-best "
                "comes from the frameworks' schedules, not the stage. DeepSpeed's ZeRO-3 is priced several "
                "times its ZeRO-2's communication because it gathers every layer's parameters in the forward "
                "and again in the backward of every micro-batch, and reduce-scatters each micro-batch's "
                "gradients, where ZeRO-2 gathers once per step; DeepSpeed is also the framework the step "
                "model misses most (chapter 09's per-source table)"
                if not any(stage_wins)
                else "for both stages, ZeRO-3 is still decisively faster in some case where ZeRO-2 fits"
            ),
            basis=verdicts.ASSUMED,  # the article gives a range of cluster sizes, no layout
        ),
    ]


def a13_m_text(sweep) -> str:
    """The m sweep at the article's own 40-layer model (``planner_at_scale.a13_m_sweep``) as
    evidence: interleaving's step gain per m, and the m values where it passes the decisive margin."""
    if sweep is None or sweep.empty:
        return ""
    r0, margin = sweep.iloc[0], LAYOUT_MARGIN
    paying = sweep[sweep.step_gain >= margin].m.tolist()
    per_device = "device" in sweep and sweep.device.nunique() > 1
    gains = "; ".join(
        (f"{device}: " if per_device else "")
        + ", ".join(
            f"{r.step_gain:+.0%} at m = {r.m}"
            + (" (the 13B command's global batch of 32; the layout is ours)" if r.stated_batch else "")
            for r in g.itertuples()
        )
        for device, g in (sweep.groupby("device", sort=False) if "device" in sweep else [(None, sweep)])
    )
    where = (
        f"beyond the step model's ±{margin:.0%} only at m ≤ {max(paying)}"
        if paying
        else f"never beyond the step model's ±{margin:.0%}"
    )
    unfit = "" if sweep.fits.all() else f" ({(~sweep.fits).sum()} of {len(sweep)} do not fit memory)"
    return (
        f"; at the article's own model, {r0.model}, {r0.layout}, v = {r0.v}, "
        "the micro-batches per step m swept: "
        f"{gains}{unfit}: interleaving pays {where}, since the bubble (p − 1)/(v·m) shrinks with m while "
        "its extra point-to-point grows with it. At this layer count, m decides, not the layer count"
    )


def a13_layer_answers(inter) -> list:
    """Each row of ``planner_at_scale.a13_interleaving_table`` answers the sentence at its layer
    count: at the fewer layers (~40) 'do not interleave' holds where interleaving costs beyond the
    decisive margin and fails where it gains beyond it; at the more (~80) 'it clearly pays' holds
    where it gains beyond the margin and fails where it costs beyond it; inside, None."""
    fewest = inter.n_layers.min()
    answers = []
    for r in inter.itertuples():
        if abs(r.step_gain) < LAYOUT_MARGIN:
            answers.append(None)
        else:
            answers.append((r.step_gain < 0) if r.n_layers == fewest else (r.step_gain > 0))
    return answers


def a13_claims(pipe, inter, sweep=None) -> list[Claim]:
    emu = pipe[pipe.compute == "emulated"]
    worst = float(emu.model_error.abs().max())
    worst_held_out = float(emu.held_out_error.abs().max())  # nan without a second m
    deepest = emu[(emu.ranks == emu.ranks.max()) & (emu.schedule == "gpipe")].sort_values("m")
    pairs = []
    for p, g in emu.groupby("ranks"):
        m = g[g.schedule == "interleaved"].m.max()
        by = g[g.m == m].set_index("schedule")
        pairs.append((p, m, by))
    deep_p, deep_m, by = pairs[-1]
    shrinks = by.loc["interleaved", "bubble_measured"] < by.loc["1f1b", "bubble_measured"]
    counted = bool((emu.p2p_messages == emu.p2p_messages_formula).all())
    ratio = by.loc["interleaved", "p2p_messages"] / by.loc["1f1b", "p2p_messages"]
    others = "; ".join(
        f"p = {p}, m = {m}: interleaved {b.loc['interleaved', 'bubble_measured']:.2f} vs 1F1B "
        f"{b.loc['1f1b', 'bubble_measured']:.2f}"
        for p, m, b in pairs[:-1]
    )
    unfit = inter[~inter.fits_interleaved]
    gains = ", ".join(
        f"{r.model.split(',')[1].strip()} ({r.layout}, v{r.v}"
        + (f", {r.device}" if "device" in inter else "")
        + f"): {r.step_gain:+.0%}"
        for r in inter.itertuples()
    )
    return [
        Claim(
            "A13",
            "split the batch into micro-batches fed into the pipeline, so that stages work at once "
            "(把 batch 切成多个 micro batch 送入流水线)",
            "torch.distributed.pipelining GPipe / 1F1B / interleaved, emulated stage compute, p and m swept; "
            "the test: the bubble follows (p − 1)/(v·m) of the compute (Narayanan et al. 2021 §2.2)",
            "shown",
            f"p = {int(deepest.ranks.iloc[0])}, GPipe: bubble "
            + ", ".join(f"{r.bubble_measured:.2f} at m={r.m}" for r in deepest.itertuples())
            + " (formula "
            + ", ".join(f"{r.bubble_formula:.2f}" for r in deepest.itertuples())
            + f"); every run within {math.ceil(worst * 100)}% of the formula once each slot carries its "
            "fitted overhead "
            f"({emu.slot_overhead_s.min() * 1e3:.1f}–{emu.slot_overhead_s.max() * 1e3:.1f} ms: messages, "
            f"bookkeeping and the sleeps' overshoot), {len(emu)} runs"
            + (
                "; each m predicted by an overhead fitted on the other m values: within "
                f"{math.ceil(worst_held_out * 100)}% (bounds rounded up)"
                if worst_held_out == worst_held_out
                else ""
            )
            + ". A mechanism, not a threshold to pass",
            basis=verdicts.TOY,
        ),
        Claim(
            "A13",
            "the interleaved schedule shrinks the bubble but sends more messages",
            f"p = {deep_p}, m = {deep_m}: interleaved (v = {int(by.loc['interleaved', 'v'])}) vs "
            "1F1B, emulated "
            "compute; point-to-point ops of one step counted (profiler)",
            "confirmed" if shrinks and ratio > 1 and counted else "refuted",
            f"bubble {by.loc['interleaved', 'bubble_measured']:.2f} vs "
            f"{by.loc['1f1b', 'bubble_measured']:.2f} "
            f"of the ideal step (formula {by.loc['interleaved', 'bubble_formula']:.2f} vs "
            f"{by.loc['1f1b', 'bubble_formula']:.2f}); messages "
            f"{int(by.loc['interleaved', 'p2p_messages'])} vs "
            f"{int(by.loc['1f1b', 'p2p_messages'])} ({ratio:.1f}×, (p·v − 1)/(p − 1); every count equals "
            f"4·m·(p·v − 1): {counted}); each message adds to the slot overhead. Other depths: {others}",
            basis=verdicts.TOY,
        ),
        Claim(
            "A13",
            "no interleaving at ~40 layers; it clearly pays above ~80",
            "planner: the same layout without and with v = layers per stage / 2, a 70B-wide model cut to 40 "
            "and 80 layers on 512 cards, on article A's 910B and on A100s",
            verdicts.over_scenarios(a13_layer_answers(inter)),
            f"a layer count says 'interleave' where interleaving alone gains beyond the step model's "
            f"±{LAYOUT_MARGIN:.0%}, 'do not' where it costs beyond it, and cannot tell inside; the article "
            "states neither layout nor batch for this sentence, so no stated case decides. "
            f"Step gain of interleaving alone: {gains}"
            + (
                f"; {len(unfit)} of {len(inter)} interleaved layouts no longer fit memory (more activations "
                "in flight)"
                if len(unfit)
                else ""
            )
            + ". The bubble + point-to-point model's point estimates gain at 40 layers as at 80: the layer "
            "count alone does not draw the article's line"
            + a13_m_text(sweep)
            + ". The interleaving term itself is unvalidated: no published pair in chapter 09's margins "
            "changes the interleaving depth alone, so the layout margin was not measured on it",
            basis=verdicts.ASSUMED,  # the article states neither layout nor batch for this sentence
        ),
    ]


def b10_claims(exchange, skew) -> list[Claim]:
    big = exchange.iloc[-1]
    skewed, even = skew[skew.imbalance == skew.imbalance.max()], skew[skew.imbalance == skew.imbalance.min()]
    waiting = skewed[skewed.predicted_wait_s > 0]
    # the wait is a rank's combine against the most loaded rank's in the same run (which waits for
    # no one); the balanced run's combine is itself partly waiting, so it is context, not the basis
    loaded = skewed[skewed.predicted_wait_s == 0].combine_s.median()
    baseline = even.combine_s.median()
    return [
        Claim(
            "B10",
            "the MoE all-to-all costs more than a cross-node all-reduce",
            "all_to_all_single vs all_reduce of the same buffer on the same ranks, interleaved",
            "inconclusive on this machine",
            f"one host, no cross-node link: here all-to-all takes {big.ratio:.2f}× an all-reduce at "
            f"{big.size_bytes / KIB:,.0f} KiB (bandwidth-bound, it moves (n − 1)/n of the buffer per rank "
            f"against the all-reduce's 2(n − 1)/n: ½); #wrong = {int(exchange.wrong.sum())}. The per-buffer "
            "ratio is not the claim's quantity: an MoE layer puts 4 all-to-alls per micro-batch (dispatch "
            "and combine, forward and backward) on the critical path, where the gradient all-reduce runs "
            "once per step beside the backward, and an all-to-all gets no in-node reduction to shrink "
            "what crosses the network",
            basis=verdicts.TOY,
        ),
        Claim(
            "B10",
            "uneven routing leaves cards waiting for the most loaded expert",
            f"expert layer at imbalance {skewed.imbalance.iloc[0]:g}, expert compute emulated (a sleep per "
            "token): each rank's combine beyond the most loaded rank's in the same run",
            "shown",
            "; ".join(
                f"rank {int(r.rank)}: waited {(r.combine_s - loaded) * 1e3:.1f} ms longer than the loaded "
                f"rank ({loaded * 1e3:.1f} ms), predicted {r.predicted_wait_s * 1e3:.1f} ms"
                for r in waiting.itertuples()
            )
            + f" (a balanced run's combine: {baseline * 1e3:.1f} ms)"
            + ". The emulation builds the mechanism in: this shows its size, it does not test it",
            basis=verdicts.CONSTRUCTION,  # a timed wait on emulated compute: the wait is built in
        ),
    ]


def takeaways(t: dict) -> str:
    """The closing bullets of notebook 08, each with this run's numbers."""
    pipe, sh, tp = t["pipeline"], t["sharding"], t["tensor"].set_index("layout")
    emu = pipe[(pipe.compute == "emulated") & (pipe.ranks == pipe.ranks.max()) & (pipe.schedule == "1f1b")]
    one = sh[sh.m == sh.m.min()].set_index("config")
    return "\n".join(
        [
            f"* **Pipelines**: at p = {int(emu.ranks.iloc[0])} the 1F1B bubble fell from "
            f"{emu.bubble_measured.iloc[0]:.2f} to {emu.bubble_measured.iloc[-1]:.2f} of the "
            "compute as m went "
            f"{int(emu.m.iloc[0])} → {int(emu.m.iloc[-1])}; every slot also paid a fixed overhead.",
            "* **Sharding**: fully sharded FSDP2 held "
            f"{one.loc['fsdp_full', 'peak_bytes'] / one.loc['ddp', 'peak_bytes']:.2f}× "
            f"DDP's peak bytes and moved {one.loc['fsdp_full', 'traffic_over_psi']:.0f}Ψ per step to DDP's "
            f"{one.loc['ddp', 'traffic_over_psi']:.0f}Ψ — counted, equal to the formulas.",
            "* **TP / SP**: sequence parallelism replaced the all-reduces by all-gathers and "
            "reduce-scatters "
            f"and kept {tp.loc['tp+sp', 'saved_bytes'] / tp.loc['tp', 'saved_bytes']:.2f}× TP's "
            "activation bytes.",
            "* **At scale**: TP sends "
            f"{t['a10_traffic'].tp_over_dp.min():.1f}–{t['a10_traffic'].tp_over_dp.max():.0f}× "
            "DP's bytes per step over the table's batches (at one micro-batch per DP rank DP can send "
            "more: A10's traffic row); TP stays inside a node because its collectives block every "
            "layer's next operator, not by bytes alone.",
        ]
    )
