"""The ``predict`` study's two article cases in words: B15's tuning ladder (article B §5.2)
predicted step by step, and A19's stated layout (article A §9) priced by the predictor."""

from __future__ import annotations


def b15_text(ladder, sens, worst_error: float) -> str:
    base, last = ladder.iloc[0], ladder.iloc[-1]
    dp = sens.set_index("reading")
    overlap_rows = dp[dp.index.str.startswith("dp_overlap")]
    bucket_gain = ladder.predicted_gain_s.iloc[2]
    if (overlap_rows.dp_comm_exposed_s == 0).all():
        bucket = (
            f"The bucket rung gains {bucket_gain:+.2f} s: the ZeRO-2 traffic "
            f"({dp.loc['as read', 'dp_comm_s']:.2f} s "
            f"per step) hides under the backward even at `dp_overlap` {overlap_rows.dp_overlap.min()}, and "
            "doubling "
            "the bucket only halves the number of calls, each a few µs of latency."
        )
    else:
        exposed = ", ".join(
            f"{r.dp_comm_exposed_s:.2f} s at {r.dp_overlap}"
            for r in overlap_rows.itertuples()
            if r.dp_comm_exposed_s
        )
        bucket = (
            f"The bucket rung gains {bucket_gain:+.2f} s at `dp_overlap` {dp.loc['as read', 'dp_overlap']}, "
            f"where {dp.loc['as read', 'dp_comm_exposed_s']:.2f} s of the ZeRO-2 traffic "
            f"({dp.loc['as read', 'dp_comm_s']:.2f} s) stays exposed; by `dp_overlap`: {exposed} exposed. "
            "A bucket change can gain only what is exposed, so its gain stays small unless the "
            "overlap is low."
        )
    bucket += (
        " (The article names DDP's bucket_cap_mb, but its run is ZeRO-2: the rung is read as DeepSpeed's "
        "reduce bucket, 25 → 50 MB, and its gain rests on the assumed `dp_overlap`.)"
    )
    from mfulab.studykit.step_error import SWITCH_MARGIN

    readings = ", ".join(
        f"{r} {row.baseline_step_s:.2f} s ({row.baseline_step_s / base.article_step_s - 1:+.0%})"
        for r, row in dp.iterrows()
        if r.startswith("network")
    )
    from mfulab.analytic.rates import Assumptions

    per_node = dp.loc["network 200 Gb/s per node"]
    line_rate_s = per_node.dp_comm_s * Assumptions().link_efficiency
    bound = (
        f" The baseline prices one 200 Gb/s port per GPU (devices.yaml's A100 inter-node figure, 25 GB/s). "
        f"At one port per node the DP term alone is {per_node.dp_comm_s:.1f} s (about {line_rate_s:.1f} s "
        "even at the full line rate): ZeRO-2 reduces every micro-batch's gradients, 32 of them at "
        "micro-batch 1, and a step cannot be shorter than its own communication, so "
        + (
            f"that reading cannot hold at micro-batch 1 against the article's {base.article_step_s:.1f} s "
            "(a bound, not a step estimate)"
            if line_rate_s > base.article_step_s
            else "the bound does not exclude it"
        )
        + "; at §4's DataLoader batch of 8 (4 micro-batches) it reads "
        f"{dp.loc['micro-batch 8, network 200 Gb/s per node', 'baseline_step_s']:.2f} s"
        + (
            f", a layout that does not fit the card ({dp.loc['micro-batch 8', 'memory_gib']:.0f} GiB with "
            "unfused attention), so not a reading of the run."
            if "fits" in dp and not dp.loc["micro-batch 8, network 200 Gb/s per node", "fits"]
            else "."
        )
        if "micro-batch 8, network 200 Gb/s per node" in dp.index
        else ""
    )
    ddp = "DDP + ZeroRedundancyOptimizer, network 200 Gb/s per node"
    if ddp in dp.index:
        bound += (
            " The bound is the framework's, not the network's: §4's knobs are PyTorch DDP's, and DDP with "
            "no_sync reduces once per step, so one port per node reads "
            f"{dp.loc[ddp, 'baseline_step_s']:.2f} s under DDP + ZeroRedundancyOptimizer "
            f"({dp.loc[ddp, 'dp_comm_s']:.1f} s of DP traffic) against the article's "
            f"{base.article_step_s:.1f} s: which framework ran decides whether one port per node can hold."
        )
    network = bound + (
        f" By network reading the baseline reads {readings} against the article's "
        f"{base.article_step_s:.1f} s; "
        "a single modelled step decides nothing (the rule above: the model may decide a ratio beyond its "
        "margin, never a step time on its own), so the table shows sizes and does not pick the cluster's "
        "network (article B's two-node busbw, 21 of 25 GB/s, is one port's figure whether a node has one "
        "port or eight, if its test ran one GPU per node; chapter 05's B8 holds each reading against step "
        "3's 0.3 s saving within the model's error on a difference of two steps and keeps them all)."
    )
    steps = list(ladder.article_step_s)
    ratios = [a / b for a, b in zip(steps, steps[1:]) if a == a and b == b and b]
    inside = all(abs(r - 1) <= SWITCH_MARGIN for r in ratios)
    decides = (
        " **No rung is decided here:** each of the article's rungs changes the step by "
        + ", ".join(f"×{r:.3f}" for r in ratios)
        + f", all inside the course's margin for a switch (±{SWITCH_MARGIN:.0%}, the model's error on the "
        "ratio of two modelled configurations that differ by one switch), so the predicted gains are sizes "
        "set beside the article's, never verdicts."
        if ratios and inside
        else ""
    )
    return (
        f"Predicted baseline **{base.predicted_step_s:.2f} s** against the article's "
        f"{base.article_step_s:.1f} s, "
        f"and **{last.predicted_step_s:.2f} s** after the last rung against {last.article_step_s:.1f} s. "
        "The data rung's predicted gain is the data wait put in, not evidence: the rung's own 0.3 s (§5.2: "
        "at 8.7 → 8.4 s 'the wait before each step basically disappeared', so at most 0.3 s of the wait "
        "was exposed); with the 1.5 s the trace showed before the data arrived all exposed, the predicted "
        f"baseline would be {dp.loc['data wait 1.5 s', 'baseline_step_s']:.2f} s. {bucket} "
        "GPUDirect RDMA raises the "
        "inter-node "
        "bandwidth, which the predictor does model; the article measured what it did on its own cluster "
        "(§3.3: a two-node busbw of 11 → 21 GB/s, claim B9), but not how many ports a node has, so the table "
        f"shows the baseline at several network rates.{network}{decides}"
    )


def a19_text(a19, records=None) -> str:
    parsed = a19[a19.recompute == "none"] if "recompute" in a19 else a19
    lo, hi = parsed.predicted_step_s.min(), parsed.predicted_step_s.max()
    implied = a19.stated_mfu_palm.iloc[0]
    floor = a19.step_at_full_mfu_s.iloc[0]
    readings = a19[a19.recompute != "none"] if "recompute" in a19 else a19.iloc[:0]
    return (
        f"The stated layout predicts **{lo:.2f}–{hi:.2f} s** per step (MFU {parsed.mfu_palm.min():.0%}–"
        f"{parsed.mfu_palm.max():.0%}, PaLM convention). The stated 2.4 s would mean an MFU of "
        f"**{implied:.0%}**"
        + (
            f" ({a19.stated_mfu_6n.iloc[0]:.0%} in the article's own 6N convention)"
            if "stated_mfu_6n" in a19
            else ""
        )
        + f": even at 100% MFU the step takes {floor:.2f} s. The article's own division, "
        "3.06e16 / (2.56e15 × 2.4), is 4.98, not the 0.497 it prints (chapter 01 checks that slip and its "
        "×3 on 6N). The predictor says what the stated hardware and layout allow."
        + (
            " Had the command set --recompute-granularity full, its recompute flags would give "
            + ", ".join(f"{r.predicted_step_s:.2f} s ({r.recompute})" for r in readings.itertuples())
            + ", further from 2.4 s."
            if len(readings)
            else ""
        )
    )
