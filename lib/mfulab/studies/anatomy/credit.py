"""B15's credits in words (up the ladder, leave-one-out, by what the timestamps measured) and the
article's own §5.2 ladder apart from §5.3's background checkpoint: the ``anatomy`` study's
text helpers for its B15 row and its ladder figure."""

from __future__ import annotations

from mfulab.studies.anatomy.analysis import CATEGORIES, _total_comparison, gain_shares, rows_table
from mfulab.studies.anatomy.ladder import ARTICLE_LADDER_KNOBS, LEAVE_ONE_OUT_PREFIX

# the checkpoint period real jobs run at: Hugging Face Trainer's default (TrainingArguments
# save_steps = 500, its documented default). This run writes one every block of steps so that the
# write is timed, a period no real job uses; B2's split and the ladder's checkpoint knob are
# reported at both, the published period first.
CHECKPOINT_PERIOD_STEPS = 500


def _interval(ratio: float, lo: float, hi: float) -> str:
    """A ratio with its interval, in three decimals where an end lies within 0.005 of 1 (two would
    print 0.9989 as 1.00 and hide that the interval spans 1)."""
    digits = 3 if min(abs(lo - 1), abs(hi - 1)) < 0.005 else 2
    return f"×{ratio:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _measured_credit_text(ladder) -> str:
    """The ladder's gain split by what the timestamps measured (each loss's time, naive rung against
    the last knob's, mean over ranks), beside the credit by each knob's target; and the rungs whose
    step changed beyond the noise while the loss that shrank most is not the one the knob targets
    (the target credit then gives the gain to a loss that did not carry it)."""
    knobs = ladder.dropna(subset=["speedup"])
    if knobs.empty:
        return ""
    first, last = ladder.iloc[0], knobs.iloc[-1]
    cats = [c for c in CATEGORIES if f"{c}_s" in ladder]
    measured = ", ".join(f"{c} {(first[f'{c}_s'] - last[f'{c}_s']) * 1e3:+.1f} ms" for c in cats)
    apart = [
        f"{r.rung} (credited to {r.targets}; {r.shrank_most} shrank most)"
        for r in knobs.itertuples()
        if r.shrank_most in cats and r.shrank_most not in str(r.targets)
    ]
    # a rung names the loss that shrank most only where its step changed beyond the noise
    clear = [r for r in knobs.itertuples() if r.shrank_most in cats]
    if apart:
        agreement = "; the two credits disagree on " + "; ".join(apart)
    elif not clear:
        agreement = (
            "; no rung's step changed beyond the noise, so no rung names the loss that shrank (the two "
            "credits differ in size and sign)"
        )
    else:
        agreement = (
            "; on "
            + ", ".join(r.rung for r in clear)
            + ", the rungs whose step changed beyond the noise, the loss that shrank most is the one the "
            "knob targets (the two credits still differ in size and sign)"
        )
    return (
        f"; by what the timestamps measured (each loss, naive rung against the last knob's; +: it "
        f"shrank): {measured}" + agreement
    )


def target_change_text(ladder) -> str:
    """Each knob's own target loss up the ladder (the rung before against its rung, mean over ranks;
    −: it shrank), so a reader sees where the targeted loss grew instead."""
    knobs = ladder.dropna(subset=["speedup"])
    if knobs.empty:
        return ""
    before = ladder.shift(1)
    parts = []
    for i, r in knobs.iterrows():
        change_ms = (r[f"{r.targets}_s"] - before.loc[i, f"{r.targets}_s"]) * 1e3
        parts.append(f"{r.rung}: {r.targets} {change_ms:+.1f} ms" + (" (it grew)" if change_ms > 0 else ""))
    return "; each knob's own target up the ladder: " + ", ".join(parts)


def measured_comm_data_share(ladder) -> float:
    """The share of the article's §5.2 knobs' gain (naive → its last knob's rung, the mean step
    over ranks) that the timestamps measured as less communication and data wait: the attribution
    that reads what shrank, not what a knob aims at (NaN where the step did not shrink)."""
    rungs = [r for r in ladder.rung if r in ARTICLE_LADDER_KNOBS]
    if not rungs:
        return float("nan")
    table = ladder.set_index("rung")
    first, last = table.iloc[0], table.loc[rungs[-1]]
    gross_s = first.mean_step_s - last.mean_step_s
    shrank_s = sum(first[f"{c}_s"] - last[f"{c}_s"] for c in ("communication wait", "data wait"))
    return shrank_s / gross_s if gross_s > 0 else float("nan")


def loo_bounds(records: dict, loo):
    """Each leave-one-out gain against what its knob can remove: the loss it targets in the
    configuration without it (mean over ranks and steps). A gain beyond that bound is noise or a
    side effect the target does not explain (chapter 05 bounds B6's gain the same way)."""
    if not len(loo):
        return loo
    per_cat = rows_table(records).groupby(["record", "category"]).seconds.mean().unstack()
    labels = {k: f"{LEAVE_ONE_OUT_PREFIX}{k}" for k in loo.knob}
    bound = [per_cat.loc[labels[r.knob], r.targets] for r in loo.itertuples()]
    return loo.assign(target_loss_without_s=bound, within_bound=loo.loo_gain_s <= bound)


def _loo_text(t: dict, g: dict) -> str:
    loo = t.get("b15_leave_one_out")
    if loo is None or not len(loo):
        return "leave-one-out not timed in this run"

    def bound(r) -> str:
        if "within_bound" not in loo or r.within_bound:
            return ""
        excess_ms = (r.loo_gain_s - r.target_loss_without_s) * 1e3
        return (
            f"; {excess_ms:.1f} ms beyond the {r.target_loss_without_s * 1e3:.1f} ms of {r.targets} it "
            "targets: noise or a side effect"
        )

    per_knob = "; ".join(
        f"{r.knob} {r.loo_gain_s * 1e3:+.1f} ms ({_interval(r.loo_ratio, r.loo_ratio_lo, r.loo_ratio_hi)}"
        f"{bound(r)})"
        for r in loo.itertuples()
    )
    spanning = int((loo.change == "inconclusive").sum())
    if spanning == len(loo):  # no knob's gain is resolved: a share of their sum would be noise's
        share = f"all {spanning} intervals span 1, so no share of their sum is read"
    elif g["loo_comm_data_share"] != g["loo_comm_data_share"]:  # NaN: gains of both signs
        share = (
            f"the gains have both signs ({spanning} of {len(loo)} intervals span 1), so no share of "
            "their sum is read"
        )
    else:
        share = (
            f"communication + data IO {g['loo_comm_data_share']:.0%} of §5.2's knobs' summed "
            "leave-one-out gains"
        )
        if "within_bound" in loo and not loo.within_bound.all():
            capped = loo.assign(capped_s=loo[["loo_gain_s", "target_loss_without_s"]].min(axis=1))
            capped_share = gain_shares(capped, "capped_s")[1]
            if capped_share == capped_share:
                share += f" ({capped_share:.0%} with each gain capped at its target loss)"
    return f"leave-one-out, the last rung without each knob: {per_knob}; {share}"


def replicate_text(ladder, loo) -> str:
    """The last knob's leave-one-out run is the rung before it again (the same configuration, timed
    in its own blocks of the same rounds): the two medians side by side, a measured
    same-configuration spread beside the drift the intervals assume. Empty without both."""
    if loo is None or not len(loo) or len(ladder) < 3:
        return ""
    rungs = list(ladder.rung)
    last = loo.knob.iloc[-1]
    if last not in rungs or rungs.index(last) < 1:
        return ""
    before = rungs[rungs.index(last) - 1]
    a_s = float(ladder.set_index("rung").loc[before, "step_s"])
    b_s = float(loo.set_index("knob").loc[last, "step_without_s"])
    return (
        f"; the same configuration timed twice, the '{before}' rung and 'all but {last}': "
        f"{a_s * 1e3:.1f} vs {b_s * 1e3:.1f} ms ({abs(a_s / b_s - 1):.1%} apart)"
    )


def article_ladder_comparison(records: dict) -> dict | None:
    """Naive → the last knob of the article's §5.2 ladder (``ARTICLE_LADDER_KNOBS``; the
    background checkpoint of §5.3 came after it): the ratio with its interval and verdict, or
    None where the run has no such rung."""
    last = [k for k in records["ladder"] if k in ARTICLE_LADDER_KNOBS]
    if not last:
        return None
    c = _total_comparison(records, last[-1])
    return {
        "last": last[-1],
        "speedup": c.ratio,
        "speedup_lo": c.ratio_lo,
        "speedup_hi": c.ratio_hi,
        "within_lo": c.within_lo,
        "within_hi": c.within_hi,
        "drift": c.run_to_run_drift,
        "change": c.verdict,
    }


def checkpoint_knob_at_period(records: dict, ladder) -> dict | None:
    """§5.3's background checkpoint as a knob, at this run's period and at
    :data:`CHECKPOINT_PERIOD_STEPS`: its measured gain per step (its rung against the rung
    before, with that ratio's interval) scales with how often the write happens, so at one write
    per P steps it saves gain · (this run's period / P) per step; None without the rung."""
    table = ladder.set_index("rung")
    if "background checkpoint" not in table.index:
        return None
    row = table.loc["background checkpoint"]
    before_s = row.step_s + row.gain_s
    params = records["params"]
    run_period = params["block_steps"] * params.get("checkpoint_every_blocks", 1)
    gain_at_period_s = row.gain_s * run_period / CHECKPOINT_PERIOD_STEPS
    return {
        "run_period_steps": run_period,
        "gain_s": row.gain_s,
        "speedup": row.speedup,
        "speedup_lo": row.speedup_lo,
        "speedup_hi": row.speedup_hi,
        "change": row.change,
        "period_steps": CHECKPOINT_PERIOD_STEPS,
        "gain_at_period_s": gain_at_period_s,
        "speedup_at_period": before_s / (before_s - gain_at_period_s),
    }


# article B §5.3: an asynchronous checkpoint took the periodic spike from 3 s to 0.3 s
ARTICLE_SPIKE_S = {"synchronous": 3.0, "background": 0.3}


def checkpoint_spike(records: dict, before: str = "format + workers", after: str = "background checkpoint"):
    """§5.3's own quantity, the spike: per block of steps (each starting at the step that writes), the job's
    slowest step over the block's median step (the job's step: the slowest rank's at each step),
    the median over blocks with its quartiles, for the rung that writes synchronously (``before``)
    and the one that writes in the background (``after``). A background write's cost lands in the
    steps after it, so the block's slowest step, not the writing step, is read. None without
    both rungs."""
    import numpy as np
    import pandas as pd

    rows = pd.DataFrame([r for rank in records["job"]["ranks"] for r in rank["rows"]])
    if not {before, after} <= set(rows.record):
        return None
    out = {}
    for name, label in (("synchronous", before), ("background", after)):
        job = (
            rows[rows.record == label]
            .groupby("step")
            .agg(step_s=("step_s", "max"), write=("checkpoint", "any"))
        )
        job["block"] = job.sort_index().write.cumsum()  # a block starts at the step that writes
        blocks = [g.step_s.to_numpy() for b, g in job[job.block > 0].groupby("block") if len(g) > 1]
        if not blocks:
            return None
        excess = np.array([b.max() - np.median(b) for b in blocks])
        out[name] = {
            "spike_s": float(np.median(excess)),
            "q1_s": float(np.percentile(excess, 25)),
            "q3_s": float(np.percentile(excess, 75)),
            "blocks": len(excess),
        }
    return out


def spike_text(spike: dict | None) -> str:
    """The spike synchronous → background beside the article's 3 s → 0.3 s; empty without it."""
    if not spike:
        return ""
    sync, bg = spike["synchronous"], spike["background"]
    ratio = f" (÷{sync['spike_s'] / bg['spike_s']:.1f})" if bg["spike_s"] > 0 else ""
    return (
        f"§5.3's own quantity, the spike (a block's slowest job step over its median, median of "
        f"{sync['blocks']} blocks [quartiles]): {sync['spike_s'] * 1e3:.1f} ms [{sync['q1_s'] * 1e3:.1f}, "
        f"{sync['q3_s'] * 1e3:.1f}] synchronous → {bg['spike_s'] * 1e3:.1f} ms [{bg['q1_s'] * 1e3:.1f}, "
        f"{bg['q3_s'] * 1e3:.1f}] in the background{ratio}, against the article's "
        f"{ARTICLE_SPIKE_S['synchronous']:g} → {ARTICLE_SPIKE_S['background']:g} s "
        f"(÷{ARTICLE_SPIKE_S['synchronous'] / ARTICLE_SPIKE_S['background']:.0f}); "
    )


def knobs_lead(records: dict, ladder) -> str:
    """B15's key number: §5.2's knobs (naive → its last knob) with their interval, then §5.3's
    background checkpoint at this run's period and at a published one (its gain scales with how
    often the write happens), before the whole ladder at this run's period."""
    art = article_ladder_comparison(records)
    ck = checkpoint_knob_at_period(records, ladder)
    lead = (
        f"§5.2's knobs, naive → {art['last']}: ×{art['speedup']:.2f} [{art['speedup_lo']:.2f}, "
        f"{art['speedup_hi']:.2f}] (this run's rounds alone [{art['within_lo']:.2f}, "
        f"{art['within_hi']:.2f}], widened by the assumed {art['drift']:.0%} run-to-run drift)"
        + ("; no gain beyond the drift shown" if art["change"] == "inconclusive" else "")
        + "; "
        if art
        else ""
    )
    lead += spike_text(checkpoint_spike(records))
    if ck:
        lead += (
            f"§5.3's background checkpoint {ck['gain_s'] * 1e3:+.1f} ms per step at one write per "
            f"{ck['run_period_steps']} steps, {ck['gain_at_period_s'] * 1e3:+.2f} ms at one per "
            f"{ck['period_steps']}; "
        )
    return lead


def cpu_contention_note(records: dict) -> str:
    """On a CPU run each rank is pinned to one core and what it starts (its loader worker, the
    background writer thread) inherits the pin: the format + workers and background-checkpoint
    knobs take compute time from their own rank, which a GPU's loader and writer do not."""
    pinned = [r.get("pinned_core") for r in records["job"]["ranks"]]
    if records["device"] != "cpu" or any(c is None for c in pinned):
        return ""
    return (
        ". On this CPU run each rank owns one core and its loader worker and background writer run on "
        "it too, so those two knobs also take compute from their own rank (slow operators and "
        "scheduling waste move with them); on a GPU the step's compute is the card's, and they "
        "would not"
    )


def knob_power(ladder, categories=None):
    """What each knob of the ladder could remove here, against what the ladder can resolve: the
    naive step's seconds of the loss the knob targets (mean over ranks; for fused attention the
    profiler's attention kernels, rank 0's mean over the profiled steps, where the profile ran:
    the rest of "slow operators" is not attention's), as a share of the naive step, beside the
    half-width of the rung's interval. A knob whose whole target is smaller than that half-width
    cannot show a change here whatever it does: the ladder has no power for it."""
    import pandas as pd

    naive = ladder.iloc[0]
    attention = None
    if categories is not None and len(categories):
        per_step = categories[categories.category == "attention core"]
        attention = float(per_step.seconds.mean()) if len(per_step) else None
    rows = []
    for r in ladder.dropna(subset=["speedup"]).itertuples():
        target = str(r.targets)
        ceiling_s = float(naive[f"{target}_s"]) if f"{target}_s" in ladder else float("nan")
        what = target
        if r.rung == "fused attention" and attention is not None:
            ceiling_s, what = attention, "attention kernels (profiler)"
        half_width = (r.speedup_hi - r.speedup_lo) / 2
        share = ceiling_s / float(naive.mean_step_s)
        rows.append(
            {
                "rung": r.rung,
                "targets": what,
                "target_in_naive_s": ceiling_s,
                "target_share_of_step": share,
                "interval_half_width": half_width,
                "resolvable_here": share > half_width,
            }
        )
    return pd.DataFrame(rows)


# below this many rounds a bootstrap over whole rounds has too few distinct resamples for its
# percentiles to mean 95%: with n rounds it can draw C(2n − 1, n) (3 rounds: 10)
FEW_ROUNDS = 6


def _few_rounds_note(rounds: int) -> str:
    """Where the rounds are few, what the intervals are: about the range of the rounds' own
    ratios, not a 95% interval."""
    if rounds >= FEW_ROUNDS:
        return ""
    from math import comb

    return (
        f" (with {rounds} rounds the bootstrap over whole rounds has {comb(2 * rounds - 1, rounds)} "
        "distinct resamples: each interval below is about the range of the rounds' own ratios, "
        "widened by the drift, not a 95% interval)"
    )
