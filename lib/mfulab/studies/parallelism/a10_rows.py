"""A10's rows (article A §4.1): the premise about when TP communicates, the traffic and the
placement (TP inside a node, DP across), and the contention of unordered TP and DP collectives,
each its own row."""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.analytic.rates import Assumptions
from mfulab.studies.parallelism import stated
from mfulab.studies.parallelism.planner_at_scale import tp_vs_dp_traffic
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import LAYOUT_MARGIN
from mfulab.studykit.verdicts import Claim


def a10_claims(traffic, placement) -> list[Claim]:
    """Four rows: the premise (documented specification), the traffic (analysis over the model and
    batch scenarios), the placement (both cards), the contention (analysis of the links the two
    groups share)."""
    base = traffic[
        (traffic.preset == stated.A10_MODEL["preset"])
        & (traffic.global_batch == stated.A10_MODEL["global_batch"])
    ].iloc[0]
    return [
        premise_claim(base),
        traffic_claim(traffic, base),
        placement_claim(placement),
        contention_claim(placement),
    ]


def premise_claim(base) -> Claim:
    """ "After each backward, TP's gradient all-reduce runs in its TP group as DP's runs in its DP
    group": in Megatron's tensor parallelism (Shoeybi et al. 2019 §3, Fig. 3: the f and g
    operators) the all-reduces are of activations in the forward and of activation gradients in
    the backward, inside every layer and micro-batch, each blocking the next operator; the
    weights are sharded, so their gradients need no TP all-reduce after the backward, except
    LayerNorm's under sequence parallelism. The sentence's own words, "每次反向传播完" (each time the
    backward has finished) and "梯度 AllReduce" (gradient all-reduce), name weight gradients reduced
    after the backward, which is false at the sentence's configuration (TP 8 × DP 16, no SP): refuted
    (documented specification); with SP, another flag (reported, not voted), SP's LayerNorm weights
    are all-reduced after the backward, a sliver of the bytes. TP's activation-gradient all-reduces
    do run *during* the backward while DP's buckets are in flight, the contention the article goes
    on to describe: that reading is the contention row's, set beside this one."""
    cfg = preset(base.preset)
    params_per_norm = cfg.d_model * (2 if cfg.norm == "layernorm" else 1)  # RMSNorm has no bias
    layer_norm_bytes = 2 * params_per_norm * 4  # two norms per layer, fp32 gradients
    return Claim(
        "A10",
        "after each backward pass TP's gradient all-reduce runs in the TP group, as DP's in the DP group",
        "when and on what tensor parallelism's collectives run, against Megatron-LM's design (Shoeybi et "
        "al. 2019 §3, Fig. 3: the f and g operators; Korthikanti et al. 2022 for sequence parallelism), "
        "as the sentence's words read: weight gradients all-reduced after the backward (每次反向传播完)",
        "refuted",
        "at the configuration the sentence states (TP 8 and DP 16, §4.1: no sequence parallelism), weight "
        "gradients reduced after the backward: no, TP shards the weights, so their gradients need no TP "
        "all-reduce. With sequence parallelism, another flag (§4.2 recommends it; reported, not voted: "
        "a change to the stated configuration), Megatron does all-reduce the norms' weight gradients in "
        "the TP group after the backward (its finalize step), "
        f"{layer_norm_bytes / 1e3:.0f} kB per layer for {base.preset} (fp32), a sliver of DP's bytes. TP's "
        "own all-reduces are of activation gradients, 2 per layer in each pass, inside the layer and on "
        f"its critical path ({base.tp_calls_per_step} per step for {base.preset} at {base.micro_batches} "
        "micro-batches), *during* the backward, not after it: they do run while DP's buckets overlap the "
        "backward, the contention the article goes on to describe (the contention row)",
        basis=verdicts.DOCUMENTED,
    )


def _one_micro_batch_ratios(grad_bytes: float) -> dict:
    """TP ÷ DP bytes per step at one micro-batch per DP rank (a global batch of dp × micro-batch)
    for each preset of the sensitivity, with gradients reduced in ``grad_bytes`` per element."""
    L, M = stated.A10_LAYOUT, stated.A10_MODEL
    return {
        name: tp_vs_dp_traffic(
            preset_name=name,
            seq_len=M["seq_len"],
            micro_batch=M["micro_batch"],
            global_batch=L["dp"] * M["micro_batch"],
            tp=L["tp"],
            dp=L["dp"],
            grad_bytes=grad_bytes,
        )["tp_over_dp"]
        for name in stated.A10_SENSITIVITY["presets"]
    }


def traffic_claim(traffic, base) -> Claim:
    """ "TP traffic is the heaviest": bytes each device sends per step, TP against DP, over every
    model and batch of the traffic table and one micro-batch per DP rank (the 128-card case states
    no batch; the article's own command's 32 comes from an 8-card run). TP's bytes grow with the
    micro-batches a step accumulates and DP's do not, so the ratio is linear in m and crosses 1 at
    m = 1 ÷ (the ratio at one micro-batch): the row names where."""
    grad_bytes = Assumptions().grad_reduce_bytes_per_elem(stated.A10_FRAMEWORK, stated.A10_DTYPE)
    at_one = _one_micro_batch_ratios(grad_bytes)
    tokens = traffic.global_batch * stated.A10_MODEL["seq_len"]
    voting = traffic[tokens >= stated.A10_MIN_TOKENS_PER_STEP]
    answers = list(voting.tp_over_dp > 1)
    below = [f"{name} below m ≈ {1 / r:.2f}" for name, r in at_one.items() if r < 1]
    crossing = "DP sends more " + ", ".join(below) if below else "TP sends more at every m ≥ 1"
    bf16 = _one_micro_batch_ratios(2)
    return Claim(
        "A10",
        "TP traffic is the heaviest (TP 的通信量最大)",
        "bytes each device sends per step, TP vs DP, at TP 8 × DP 16 on 128 cards (the step model's "
        "collectives), over 7B–70B and the batches of the table a published run of such a model trained "
        f"at (≥ {stated.A10_MIN_TOKENS_PER_STEP / 1e6:g}M tokens per step; the 128-card case states no "
        "batch); confirmed (analysis) when every such case says TP sends more",
        verdicts.over_scenarios(answers),
        f"voting ({len(voting)} cases, batches {voting.global_batch.min()}–{voting.global_batch.max()}): "
        f"TP sends {voting.tp_over_dp.min():.1f}–{voting.tp_over_dp.max():.0f}× DP's bytes; not voted, "
        "below published batches: at one micro-batch per DP rank "
        + ", ".join(f"{name} {r:.2f}×" for name, r in at_one.items())
        + f" ({grad_bytes:g}-B gradients, Megatron's default; bf16: "
        + ", ".join(f"{r:.2f}×" for r in bf16.values())
        + f"); TP ÷ DP is linear in the micro-batches per DP rank m: {crossing}; "
        f"{base.preset} at batch {base.global_batch}: {base.tp_over_dp:.0f}× in "
        f"{base.tp_calls_per_step} collectives; "
        f"{traffic.tp_over_dp.min():.1f}–{traffic.tp_over_dp.max():.0f}× over 7B–70B and batches "
        f"{traffic.global_batch.min()}–{traffic.global_batch.max()}",
        basis=verdicts.ASSUMED,  # the 128-card case states no model or batch
    )


def placement_claim(placement) -> Claim:
    """ "TP is the most latency-sensitive: TP inside a node, DP may cross nodes", on both its
    quantities and both cards: the latency sensitivity, the seconds each group's communication
    gains when every per-call latency of NCCL's model doubles (TP's collectives block every
    layer's next operator, DP's reduction runs once a step), and the placement, the planner with
    the TP group inside a node against across two. Confirmed (analysis) when TP gains more than DP
    and across is slower, on both cards (round fourteen's reader: the placement alone is mostly a
    bandwidth effect). A device the step model was never validated on (the 910B) votes in each of
    its readings too (``extrapolated.device_readings``: its SKUs' peaks, the GEMM share, HBM and
    the collective latency), so no reading of the card may reverse the answer."""
    every = {key: (g.iloc[0], g.iloc[1]) for key, g in placement.groupby(_reading_key(placement), sort=False)}
    # a placement is a layout comparison: across decides as slower only beyond the layout margin
    answers = [across.step_s > inside.step_s * (1 + LAYOUT_MARGIN) for inside, across in every.values()]
    if "tp_added_by_latency_s" in placement:
        answers += [i.tp_added_by_latency_s > i.dp_added_by_latency_s for i, _ in every.values()]
    pairs = _stated_pairs(placement)
    latency = (
        "doubling every per-call latency adds "
        + "; ".join(
            f"{device}: {i.tp_added_by_latency_s:.3f} s to TP's communication against "
            f"{i.dp_added_by_latency_s:.3f} s to DP's "
            f"({i.tp_added_by_latency_s / i.dp_added_by_latency_s:.0f}×; "
            f"{a.tp_added_by_latency_s:.2f} s to TP's across two nodes)"
            for device, (i, a) in pairs.items()
        )
        + ". "
        if "tp_added_by_latency_s" in placement
        else ""
    )
    placed = "; ".join(
        f"{device}: step {across.step_s:.1f} s vs {inside.step_s:.1f} s inside one (TP comm "
        f"{across.tp_comm_s:.1f} vs {inside.tp_comm_s:.1f} s)"
        for device, (inside, across) in pairs.items()
    )
    readings = _readings_note(placement)
    return Claim(
        "A10",
        "TP traffic is the most latency-sensitive: TP inside a node, DP may cross nodes",
        "each group's added communication when every per-call latency doubles, and the planner with the "
        "TP group inside a node vs across two, on the article's 910B (HCCS inside a node) and on A100s "
        "(NVLink and InfiniBand: the step model's best-validated device); confirmed (analysis) when TP "
        f"gains more and across is slower beyond the layout margin (±{LAYOUT_MARGIN:.0%}), on both",
        verdicts.over_scenarios(answers),
        f"{latency}TP across two nodes, {placed}; TP's collectives block every layer's next operator, 4 "
        "per layer and micro-batch (8 with sequence parallelism), while DP's reduction runs once a step "
        "beside the backward (one network port per ring assumed, devices.yaml's inter-node figure: striping "
        "over several would shrink the gap up to their number); the batch is assumed (the 128-card "
        f"case states none){readings}",
        basis=verdicts.ASSUMED,
    )


def _reading_key(placement) -> list[str]:
    """The columns that name one priced card: its device and, where present, its reading."""
    return ["device", "reading"] if "reading" in placement else ["device"]


def _stated_pairs(placement) -> dict:
    """(inside, across) per device as stated (the readings of an extrapolated card left out)."""
    if "reading" in placement:
        placement = placement[placement.reading == "stated"]
    return {device: (g.iloc[0], g.iloc[1]) for device, g in placement.groupby("device", sort=False)}


def _readings_note(placement) -> str:
    """The extrapolated card's readings in one clause: how many keep both answers, and the range of
    TP's and DP's added latency and of the across/inside step ratio over them."""
    if "reading" not in placement or not (placement.reading != "stated").any():
        return ""
    notes = []
    for device, g in placement[placement.reading != "stated"].groupby("device", sort=False):
        inside = g[g.placement.str.contains("inside")].set_index("reading")
        across = g[~g.placement.str.contains("inside")].set_index("reading")
        ratio = across.step_s / inside.step_s
        tp, dp = inside.tp_added_by_latency_s, inside.dp_added_by_latency_s
        keep = int(((ratio > 1) & (inside.tp_added_by_latency_s > inside.dp_added_by_latency_s)).sum())
        notes.append(
            f"{device}, a card the step model was never validated on (chapter 09), in {len(inside)} readings "
            f"({', '.join(inside.index)}): {keep} of {len(inside)} keep both answers; TP gains "
            f"{tp.min():.3f}–{tp.max():.3f} s against DP's {dp.min():.3f}–{dp.max():.3f} s, across two "
            f"nodes is {ratio.min():.2f}–{ratio.max():.2f}× the step inside one"
        )
    return "; " + "; ".join(notes)


def contention_claim(placement) -> Claim:
    """ "Unordered, the TP and DP collectives all start at once, fill HCCL's network and queue in
    the switches": with TP inside a node its collectives never enter the network (HCCS or NVLink
    carry them) and the switches see DP's traffic alone; they share the network only where TP
    crosses nodes. How much unordered collectives cost where they share links needs a real
    network: analytic only, with the links each placement shares."""
    rows = []
    for device, (inside, across) in _stated_pairs(placement).items():
        rows.append(
            f"{device}: TP inside a node puts {inside.tp_comm_s:.1f} s of TP traffic on the in-node "
            f"fabric and none on the network; across two nodes {across.tp_comm_s:.1f} s of it shares the "
            "NICs with DP"
        )
    return Claim(
        "A10",
        "unordered TP and DP collectives start at once, saturate the network and queue in the switches",
        "which links each group's collectives use under the article's placement (TP inside a node) and "
        "with TP across two nodes (the planner's terms, both cards)",
        "analytic only",
        "; ".join(rows)
        + ". Under the placement the article recommends the two groups share no network link, so the "
        "switches queue DP's messages only; where TP crosses nodes they do share the NICs, and how much "
        "unordered collectives then cost needs a real network (no figure published for HCCL): the model "
        "prices each group's time, not their interference",
        basis=verdicts.ASSUMED,
    )
