"""B8 at article B's own run (``stated.B8_ARTICLE``: 64 A100s, TP 4 × DP 16, 512 sequences per
step, one 200 Gb/s port per node): the simulator's step per cap (:func:`b8_table`), the tail per
reading of the micro-batch (:func:`b8_tail_table`), the claim's sentence on the tail and §5.2's
step 2 (:func:`b8_claims`), each decided only where every scenario of the sensitivity table
agrees with the stated case (analytic only otherwise)."""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.studies.buckets import sensitivity
from mfulab.studies.buckets.cluster_scale import model_error_text
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB, gpt_simulation
from mfulab.studies.buckets.stated import (
    B8_ARTICLE,
    B8_CONFIG_ROWS,
    B8_CONTRADICTED,
    B8_MICRO_BATCH_READINGS,
    B8_NETWORK_READINGS,
    B8_STATED,
    B8_STEP2_EXPLAINED_SHARE,
    B8_VISIBLE_TAIL_CUT,
)
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.studykit.verdicts import Claim


def b8_table(records):
    """B8's case on article B's cards (``scale_device``): the 7B of ``scale_presets`` at its stated
    TP on ``B8_STATED['ranks']`` cards, every cap of the grid plus 25, 50 and 100 MiB."""
    import pandas as pd

    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return pd.DataFrame()
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, *B8_STATED["better_caps_mb"]})
    stated = sensitivity.b8_scenario(sensitivity.scenarios(p)[0], seven_b[0])
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    rows = gpt_simulation(
        preset(seven_b[0]),
        n=cards // tp,
        tp=tp,
        bucket_caps_mb=caps,
        accumulation=stated["accumulation"],
        **stated["setting"],
    )
    return pd.DataFrame(rows)


def tail_cut(rows_by_cap: dict) -> dict:
    """The communication tail at 25 MiB (the all-reduce still running after the backward), the
    best of 50/100 MiB's, and how much of the tail that cap removes; beside it the most any cap
    can remove: the last micro-batch's backward (the only one the reduction can run under; the
    others run under ``no_sync``) plus the calls' latency the larger cap saves."""
    base = rows_by_cap[B8_STATED["default_cap_mb"]]
    better = min(  # the cap the share is computed at
        (rows_by_cap[c] for c in B8_STATED["better_caps_mb"]), key=lambda r: r["exposed_comm_s"]
    )
    tail_s = base["exposed_comm_s"]
    bound_s = base["last_backward_s"] + max(0.0, base["total_comm_s"] - better["total_comm_s"])
    return {
        "tail_25_s": tail_s,
        "tail_best_50_100_s": better["exposed_comm_s"],
        "best_cap_mb": better["bucket_cap_mb"],
        "tail_cut_share": sensitivity.b8_tail_cut_share(rows_by_cap),
        "last_backward_s": base["last_backward_s"],
        "most_cut_s": bound_s,
        "most_cut_share": min(1.0, bound_s / tail_s) if tail_s > 0 else 0.0,
    }


def b8_tail_table(records):
    """B8's tail at article B's run under each reading of its micro-batch
    (``stated.B8_MICRO_BATCH_READINGS``: one sequence, assumed; §4's DataLoader batch_size=8):
    :func:`tail_cut` at 25 MiB against 50 and 100 MiB, the stated setting otherwise."""
    import pandas as pd

    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return pd.DataFrame()
    stated = sensitivity.b8_scenario(sensitivity.scenarios(p)[0], seven_b[0])
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    dp = cards // tp
    caps = (B8_STATED["default_cap_mb"], *B8_STATED["better_caps_mb"])
    out = []
    for micro_batch in B8_MICRO_BATCH_READINGS:
        accumulation = max(1, B8_ARTICLE["global_batch"] // (dp * micro_batch))
        setting = {**stated["setting"], "micro_batch": micro_batch}
        rows = gpt_simulation(
            preset(seven_b[0]), n=dp, tp=tp, bucket_caps_mb=caps, accumulation=accumulation, **setting
        )
        by_cap = {r["bucket_cap_mb"]: r for r in rows}
        out.append(
            {
                "micro_batch": micro_batch,
                "accumulation": accumulation,
                "step_25_s": by_cap[caps[0]]["step_s"],
                "fits": bool(by_cap[caps[0]]["fits"]),
                **tail_cut(by_cap),
            }
        )
    return pd.DataFrame(out)


def b8_claims(records, scale, sens, tails) -> list[Claim]:
    """B8's sentence on its own quantity, the tail a timeline shows: "smoother" holds in a case
    when 50-100 MiB cuts 25 MiB's tail by at least ``stated.B8_VISIBLE_TAIL_CUT`` of itself
    (:func:`b8_tail_table`). Each reading of the micro-batch votes: one sequence over every
    deciding scenario of the sensitivity table, batch_size=8 at the stated setting
    (``verdicts.over_scenarios``). Where the most any cap can remove (the last micro-batch's
    backward) is below the line, that reading's answer needs no network model. Read as the
    ZeRO-2 of §5.1, the cap never reaches DeepSpeed's engine: no cut, which agrees only with a
    refutation. Beside it the step per cap against the article's 9.4 s; then §5.2's step 2
    (:func:`b8_step2_claim`)."""
    if scale.empty or tails.empty:
        return []
    d = scale.set_index("bucket_cap_mb")
    base = B8_STATED["default_cap_mb"]
    caps = [c for c in (base, *B8_STATED["better_caps_mb"]) if c in d.index]
    if base not in caps or len(caps) < 2:
        return []
    deciding = sensitivity.deciding(sens)
    network_reading = deciding.value.map(lambda v: str(v).split(":")[0] in B8_NETWORK_READINGS)
    config = deciding.assumption.isin(B8_CONFIG_ROWS) & ~network_reading
    voting, reported = deciding[~config], deciding[config]
    answers = [_tail_answer(c) for c in voting.b8_tail_cut_share]
    # the other reading of the micro-batch votes where it fits the card as DDP (the claim's
    # buckets are DDP's; under the article's ZeRO-2 the cap never reaches DeepSpeed's engine)
    other_readings = tails.iloc[1:]
    answers += [_tail_answer(c) for c in other_readings[other_readings.fits.astype(bool)].tail_cut_share]
    ddp_reading = verdicts.over_scenarios(answers)
    decision = "refuted" if ddp_reading == "refuted" else "analytic only"  # ZeRO-2 reading: no cut
    readings = []
    for r in tails.itertuples():
        free = (
            " (on this network the bound alone keeps it under the line, the step model's margin included)"
            if r.most_cut_share * (1 + SWITCH_MARGIN) < B8_VISIBLE_TAIL_CUT
            else " (under the line, but within the step model's margin of it)"
            if r.most_cut_share < B8_VISIBLE_TAIL_CUT
            else ""
        )
        readings.append(
            f"micro-batch {r.micro_batch} ({r.accumulation} per rank): tail {r.tail_25_s:.2f} s at 25 MiB "
            f"({r.tail_25_s / r.step_25_s:.0%} of the step), {r.tail_best_50_100_s:.2f} s at "
            f"{r.best_cap_mb:g} MiB, cut {r.tail_cut_share:.1%}; the most any cap can cut is the last "
            f"micro-batch's {r.last_backward_s * 1e3:.0f} ms backward plus the calls' latency the "
            f"larger cap saves: {r.most_cut_share:.0%} of the tail{free}"
            + (
                ""
                if r.fits
                else " (priced as DDP without ZeRO this reading does not fit an 80 GB card, so it does not "
                "vote; the article's ZeRO-2 shards the gradients and optimizer states, and there it fits "
                "(chapter 04's planner), but there bucket_cap_mb does not reach DeepSpeed's engine)"
            )
        )
    better = max((c for c in caps if c != base), key=lambda c: d.loc[c, "mfu"])
    saved_s = d.loc[base, "step_s"] - d.loc[better, "step_s"]
    tp, dp, acc = int(d.loc[base, "tp"]), int(d.loc[base, "dp"]), int(d.loc[base, "accumulation"])
    a = B8_ARTICLE
    s = sensitivity.summary(sens)
    memory = (
        "" if bool(d.loc[base, "fits"]) else f"; {d.loc[base, 'memory_gib']:.0f} GiB per card (DDP, no ZeRO)"
    )
    # why the gradients are reduced once per step (no_sync over the other micro-batches)
    one_reduction_s = float(d.loc[base, "total_comm_s"])
    per_step = (
        f"; the gradients are reduced once per step (no_sync over the first {acc - 1} micro-batches): one "
        f"reduction takes {one_reduction_s:.1f} s, so reducing after each of the {acc} micro-batches "
        f"would take about {acc * one_reduction_s:.0f} s per step, against the {a['step_before_s']:g} s "
        "the article times"
        if acc > 1
        else ""
    )
    verdict_text = {
        "refuted": "the tail the article saw at 25 MiB is there in every case and 50–100 MiB leaves it "
        "as long to within the line; read as the ZeRO-2 of §5.1, bucket_cap_mb does not reach "
        "DeepSpeed's engine: both readings agree",
        "confirmed": "the DDP reading cuts the tail in every case, but read as the ZeRO-2 of §5.1 "
        "bucket_cap_mb does not reach DeepSpeed's engine: the readings disagree",
        "analytic only": "the cases do not all decide: a cut must clear the 10% line by the step model's "
        f"±{SWITCH_MARGIN:.0%} either way (its tail could be that much shorter or longer); within it: "
        + ", ".join(
            f"{r.assumption} {str(r.value).split(':')[0]} ({r.b8_tail_cut_share:.1%})"
            for r, a in zip(voting.itertuples(), answers)
            if a is None
        ),
    }[ddp_reading]
    return [
        Claim(
            "B8",
            "at 25 MB the communication-wait tail was obvious; at 50–100 MB some layers' "
            "communication overlapped the backward more smoothly",
            f"simulated tail (all-reduce left after the backward) at article B's run: 7B on "
            f"{B8_STATED['ranks']} A100s, TP {tp} × DP {dp}, one 200 Gb/s port per node, DDP's fp32 "
            f"buckets, 25 against 50–100 MiB under both readings of the micro-batch; smoother: a cut of "
            f"≥ {B8_VISIBLE_TAIL_CUT:.0%} of the tail",
            decision,
            f"{verdict_text}; "
            + "; ".join(readings)
            + f"; over the {len(voting)} scenarios that vary an unstated input (the stated network, one "
            "200 Gb/s port per node, among them) the cut is "
            + ", ".join(
                f"{r.b8_tail_cut_share:.1%} ({r.assumption} {str(r.value).split(':')[0]})"
                for r in voting.itertuples()
                if r.b8_tail_cut_share >= B8_VISIBLE_TAIL_CUT
            )
            + (
                " where it reaches the line, "
                if (voting.b8_tail_cut_share >= B8_VISIBLE_TAIL_CUT).any()
                else ""
            )
            + f"at most {voting.b8_tail_cut_share.max():.1%}"
            + (
                " (the accumulation rows repeat the stated tail exactly: only the last micro-batch's "
                "backward overlaps the reduction, so the tail does not depend on how many come before it; "
                "they move the step, not the tail)"
                if (voting.assumption == "accumulation").any()
                else ""
            )
            + _other_configurations(reported)
            + "; the step at 25 / 50 / 100 MiB: "
            + " / ".join(f"{d.loc[c, 'step_s']:.3f} s" for c in caps)
            + f" (MFU {d.loc[base, 'mfu']:.1%}; {better:g} MiB saves {saved_s * 1e3:.0f} ms, "
            f"{saved_s / d.loc[base, 'step_s']:.2%}), the simulated 25 MiB step "
            f"{d.loc[base, 'step_s'] / a['step_before_s'] - 1:+.0%} against the article's "
            f"{a['step_before_s']:g} s (its network is inferred from §3.3); ZeRO-2's buckets priced as "
            f"DDP's{memory}{per_step}; on the step, 50–100 MiB against 25 MiB is "
            f"{sensitivity.b8_outcome(d.loc[better, 'mfu'] - d.loc[base, 'mfu'], d.loc[base, 'mfu'])} "
            f"(within the 1% the article could see) in {s['b8_same']} of {s['scenarios']} scenarios"
            + sensitivity.fitted_text(sens, "b8")
            + model_error_text(records),
            basis=verdicts.ASSUMED,  # micro-batch assumed, network inferred, ZeRO-2 priced as DDP
        ),
        b8_step2_claim(d, sens, tails),
    ]


def _tail_answer(cut_share: float) -> bool | None:
    """A case's answer to "smoother": the cut share of the tail against the line, decided only
    beyond the course's margin for a modelled comparison of two settings (``SWITCH_MARGIN``: the
    tail is the step model's, and a tail that much shorter would make the same cut that much larger
    a share): yes where even a tail that much longer keeps the cut past the line, no where even a
    tail that much shorter keeps it under, None (open) between."""
    if cut_share / (1 + SWITCH_MARGIN) >= B8_VISIBLE_TAIL_CUT:
        return True
    if cut_share * (1 + SWITCH_MARGIN) < B8_VISIBLE_TAIL_CUT:
        return False
    return None


def _other_configurations(reported) -> str:
    """The rows not voted that would cross the line: a reading the article's own numbers contradict
    (``stated.B8_CONTRADICTED``), or another configuration than the article's."""
    over = reported[reported.b8_tail_cut_share >= B8_VISIBLE_TAIL_CUT]
    if over.empty:
        return ""
    name = over.value.map(lambda v: str(v).split(":")[0])
    contradicted, other = over[name.isin(B8_CONTRADICTED)], over[~name.isin(B8_CONTRADICTED)]
    parts = [
        f"; not voted, {B8_CONTRADICTED[r.value.split(':')[0]]}: {r.value.split(':')[0]} cuts "
        f"{r.b8_tail_cut_share:.1%} of a shorter tail"
        for r in contradicted.itertuples()
    ]
    if len(other):
        parts.append(
            "; not voted, another configuration than the article's: "
            + ", ".join(
                f"{r.value.split(':')[0]} cuts {r.b8_tail_cut_share:.0%} of a shorter tail"
                for r in other.itertuples()
            )
        )
    return "".join(parts)


def b8_step2_claim(d, sens=None, tails=None) -> Claim:
    """Article B §5.2 step 2 (the cap 25 → 50 MB with gradient_as_bucket_view and static_graph:
    9.4 → 9.0 s): confirmed (analysis) when the simulated saving of the cap at article B's run
    plus the most the flags can save (``flags.article_bound``: the two gradient copies at HBM
    bandwidth; static_graph nothing without unused parameters) reaches
    ``B8_STEP2_EXPLAINED_SHARE`` of the stated 0.4 s, refuted (analysis) below, in every scenario.
    The article's configuration reads two ways: §5.1 runs ZeRO-2, §5.2 sets DDP's bucket_cap_mb
    and flags. Read as DDP, the simulator prices the step (its network read from another section,
    varied by the sensitivity rows); read as ZeRO-2, DDP's arguments do not reach DeepSpeed's
    engine and save nothing. Decided only where both readings agree: refuted (analysis) when
    neither explains the 0.4 s in any scenario, analytic only otherwise. With ``tails``
    (:func:`b8_tail_table`), the DDP reading is refuted only where, for every reading of the
    micro-batch, the bound no cap can beat (the last micro-batch's backward plus the latency it
    saves) and the flags' bound stay under the line: above it, the simulator alone would decide on
    a difference of a few percent of the step, inside the step model's error."""
    from mfulab.studies.buckets.flags import article_bound

    a = B8_ARTICLE
    base, cap = B8_STATED["default_cap_mb"], a["step2_cap_mb"]
    cap_s = d.loc[base, "step_s"] - d.loc[cap, "step_s"]
    flags_s = article_bound()["copy_s"]
    stated_s = a["step_before_s"] - a["step_after_s"]
    share = (cap_s + flags_s) / stated_s
    sens = sensitivity.deciding(sens) if sens is not None else None
    explained = sens.b8_step2_explained if sens is not None else [share >= B8_STEP2_EXPLAINED_SHARE]
    ddp_reading = verdicts.over_scenarios(explained)
    open_readings = []
    if tails is not None and len(tails):
        for r in tails.itertuples():
            bound_s = r.most_cut_s + flags_s  # the share is capped at the tail; the bound is not
            if bound_s >= B8_STEP2_EXPLAINED_SHARE * stated_s:
                open_readings.append(f"micro-batch {r.micro_batch}: bound {bound_s * 1e3:.0f} ms")
    if open_readings and ddp_reading == "refuted":
        ddp_reading = "analytic only"  # only the simulator, inside its error, says no there
    # ZeRO-2 reading: DDP's bucket_cap_mb, gradient_as_bucket_view and static_graph are arguments of
    # torch's DistributedDataParallel, which a DeepSpeed ZeRO-2 engine does not wrap: 0 s explained
    decision = "refuted" if ddp_reading == "refuted" else "analytic only"
    return Claim(
        "B8",
        f"§5.2 step 2: the cap 25 → {cap} MB and both DDP flags took the step from "
        f"{a['step_before_s']:.1f} s to {a['step_after_s']:.1f} s",
        f"simulated saving of the cap at article B's run plus the flags' bound, against the stated "
        f"{stated_s:.1f} s (explained: ≥ {B8_STEP2_EXPLAINED_SHARE:.0%} of it)",
        decision,
        f"read as DDP: cap {cap_s * 1e3:.0f} ms + flags ≤ {flags_s * 1e3:.0f} ms = "
        f"{(cap_s + flags_s) * 1e3:.0f} ms, {share:.0%} of the stated {stated_s * 1e3:.0f} ms "
        f"({verdicts.label(ddp_reading, verdicts.ANALYSIS)} alone); read as the ZeRO-2 of §5.1: DDP's "
        "arguments do not reach DeepSpeed's engine, 0 ms; the article's configuration contradicts itself"
        + ("" if decision == "refuted" else ", and the DDP reading does not decide")
        + (
            "; the bound no cap can beat would allow the 0.4 s under "
            + ", ".join(open_readings)
            + " (there only the simulator, a few percent of the step inside the step model's "
            + f"±{SWITCH_MARGIN:.0%}, says no)"
            if open_readings
            else "; under every reading of the micro-batch the bound no cap can beat, with the flags', "
            "stays under half of it"
        )
        + (
            f"; sensitivity: explained in {int(sens.b8_step2_explained.sum())} of {len(sens)} scenarios "
            f"(at most {sens.b8_step2_share.max():.0%})"
            if sens is not None
            else ""
        ),
        basis=verdicts.ASSUMED,  # micro-batch assumed, network inferred, ZeRO-2 priced as DDP
    )


def b6_exposed_reduction(records, accumulations) -> dict:
    """B6 at scale: the gradient reduction left exposed after the last micro-batch's backward in
    article B's 7B run at 25 MiB (the stated setting, micro-batch 1), at each number of
    micro-batches per step in ``accumulations``, divided by 1 + the step model's margin for a
    switch: a lower bound on what the step holds besides its compute (``flags.b6_claims``). Empty
    where the run has no 7B at scale."""
    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return {}
    stated = sensitivity.b8_scenario(sensitivity.scenarios(p)[0], seven_b[0])
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    out = {}
    for m in accumulations:
        (row,) = gpt_simulation(
            preset(seven_b[0]),
            n=cards // tp,
            tp=tp,
            bucket_caps_mb=[B8_STATED["default_cap_mb"]],
            accumulation=m,
            **stated["setting"],
        )
        out[m] = row["exposed_comm_s"] / (1 + SWITCH_MARGIN)
    return out
