"""Analysis of the ``anatomy`` study: each step split into B2's four categories per rank (from
explicit timestamps, and from the profiler beside them), the B15 ladder measured here, the B13
straggler, the headline metrics and ``outcome`` (the claims and metrics the notebook publishes).

Every function reads the plain records of ``bench.measure`` (here or from another machine).
"""

from __future__ import annotations

from mfulab.analytic import flops
from mfulab.analytic.config import TransformerConfig
from mfulab.measure.timing import compare_timings, summarize
from mfulab.studies.anatomy.ladder import ARTICLE_LADDER_KNOBS, LEAVE_ONE_OUT_PREFIX
from mfulab.studies.anatomy.worker import STRAGGLER
from mfulab.studykit import verdicts

MFU_CONVENTION = "palm"  # the FLOPs per token the ladder's MFU counts (notebook 01's conventions)
CATEGORIES = verdicts.B2_CATEGORIES  # the four losses
# the step: useful compute and the four losses (they sum to the step)
SPLIT = (verdicts.B2_USEFUL, *CATEGORIES)
WAITS = CATEGORIES[1:]  # the losses that are not compute: communication, data, scheduling
COMPUTE = "compute (useful + slow operators)"  # what the profiler's op categories can tell apart
PROFILER_SPLIT = (COMPUTE, *CATEGORIES[1:])  # the profiler's view of a step: compute as one
# the profiler's operator categories (opprofile.CATEGORIES) in B2's terms: compute as one, since
# the profiler times kernels, not their distance from the ceiling
PROFILER_TO_B2 = {
    "matmul": COMPUTE,
    "attention core": COMPUTE,
    "norm / elementwise": COMPUTE,
    "optimizer": COMPUTE,
    "other ops": COMPUTE,
    "communication": "communication wait",
    "data / host-to-device": "data wait",
    "checkpoint": "scheduling waste",
    "idle": "scheduling waste",
}


# the loss each knob of the ladder targets (its credit in B15)
KNOB_TARGETS = {
    "fused attention": "slow operators",
    "buckets": "communication wait",
    "format + workers": "data wait",
    "background checkpoint": "scheduling waste",
}


def rank_flops_and_ceiling(records: dict, *, ceiling: str = "ceiling") -> tuple[float, float]:
    """One rank's model FLOPs per step (:data:`MFU_CONVENTION`) and its share of the measured
    matmul ceiling (FLOP/s): on a CPU the ranks share the cores the ceiling was measured on, so
    each has ceiling / ranks. ``ceiling``: the calibration's (``"ceiling"``) or the one re-timed
    right after the job (``"ceiling_now"``; records from before it fall back to the calibration's)."""
    cfg = TransformerConfig(**records["config"])
    p = records["params"]
    rank_flops = flops.flops_per_token(cfg, convention=MFU_CONVENTION) * p["micro_batch"] * cfg.seq_len
    measured = (records.get(ceiling) or records["ceiling"])["best_flops_per_s"]
    rank_ceiling = measured if records["device"] == "cuda" else measured / p["nproc"]
    return rank_flops, rank_ceiling


def step_categories(row: dict, rank_flops: float, rank_ceiling: float) -> dict:
    """One step's seconds as B2's useful compute and four losses from its timestamps (they sum
    to the step): compute (forward, backward less the communication backward did not hide,
    optimizer) splits at the rank's model FLOPs over its ceiling (:func:`rank_flops_and_ceiling`,
    ``verdicts.b2_compute_split``) into useful compute and slow operators; the straggler's
    injected delay (B13) and the checkpoint are scheduling waste, as the article files a
    throttled card and a synchronous write."""
    timed = row["data_s"] + row["forward_s"] + row["backward_s"] + row["optimizer_s"]
    timed += row["straggler_s"] + row["checkpoint_s"]
    compute_s = row["forward_s"] + row["backward_s"] - row["comm_wait_s"] + row["optimizer_s"]
    return {
        **verdicts.b2_compute_split(max(compute_s, 0.0), rank_flops, rank_ceiling),
        "communication wait": row["comm_wait_s"],
        "data wait": row["data_s"],
        "scheduling waste": row["straggler_s"] + row["checkpoint_s"] + (row["step_s"] - timed),
    }


def rows_table(records: dict, *, record: str | None = None, ceiling: str = "ceiling"):
    """Every timed step of every rank (long format: one row per step and category), compute
    split at the calibration's ceiling or the one re-timed after the job (``ceiling``)."""
    import pandas as pd

    out, basis = [], rank_flops_and_ceiling(records, ceiling=ceiling)
    for rank in records["job"]["ranks"]:
        for row in rank["rows"]:
            if record is not None and row["record"] != record:
                continue
            for cat, sec in step_categories(row, *basis).items():
                out.append(
                    {
                        **{k: row[k] for k in ("rung", "record", "rank", "step", "step_s")},
                        "category": cat,
                        "seconds": sec,
                    }
                )
    return pd.DataFrame(out)


def b2_split(records: dict, *, present_share: float):
    """The naive rung's interleaved steps, every rank: the share of the step time (mean over
    ranks) of useful compute and each loss, a loss present when at least ``present_share``; the
    useful / slow split also at the ceiling re-timed right after the job (``share_at_ceiling_now``:
    on a VM the two ceilings can differ by 10-15%, and the split moves with them)."""

    def shares(ceiling: str):
        df = rows_table(records, record="naive", ceiling=ceiling)
        return (
            df.groupby(["rank", "category"]).seconds.sum()
            / df.drop_duplicates(["rank", "step"]).groupby("rank").step_s.sum()
        )

    per_rank = shares("ceiling")
    split = per_rank.groupby("category").mean().reindex(SPLIT).rename("share_of_step").reset_index()
    split["share_at_ceiling_now"] = shares("ceiling_now").groupby("category").mean().reindex(SPLIT).to_numpy()
    split["spread_over_ranks"] = [
        per_rank.xs(c, level="category").max() - per_rank.xs(c, level="category").min()
        for c in split.category
    ]
    split["present"] = (split.category != verdicts.B2_USEFUL) & (split.share_of_step >= present_share)
    return split


def profiler_vs_timestamps(records: dict):
    """The profiled steps of the naive rung, per rank and category: the profiler's seconds (its
    operator categories mapped to compute and B2's other three losses) beside the explicit
    timestamps of the same steps."""
    import pandas as pd

    out, basis = [], rank_flops_and_ceiling(records)
    for rank in records["job"]["ranks"]:
        for prof_step, row in zip(rank["profile"]["steps"], rank["profiled_rows"]):
            split = step_categories(row, *basis)
            timed = {COMPUTE: split[verdicts.B2_USEFUL] + split["slow operators"], **split}
            mapped = dict.fromkeys(PROFILER_SPLIT, 0.0)
            for cat, sec in prof_step["categories_s"].items():
                mapped[PROFILER_TO_B2[cat]] += sec
            for cat in PROFILER_SPLIT:
                out.append(
                    {
                        "rank": rank["rank"],
                        "step": row["step"],
                        "category": cat,
                        "profiler_s": mapped[cat],
                        "timestamps_s": timed[cat],
                        "profiler_share": mapped[cat] / prof_step["wall_s"],
                        "timestamps_share": timed[cat] / row["step_s"],
                    }
                )
    df = pd.DataFrame(out)
    df["share_difference"] = df.profiler_share - df.timestamps_share
    return df


def rung_timings(records: dict) -> dict:
    """Each label's slowest-rank seconds per step, one paired sample per interleaved round."""
    return {label: summarize(t, label=label, paired=True) for label, t in records["job"]["samples_s"].items()}


def mfu_of(records: dict, step_s: float, *, ceiling: str = "ceiling") -> float:
    """Model FLOPs (:data:`MFU_CONVENTION`) of one rank's step / (step × the rank's share of the
    ceiling): every rank's FLOPs over every device's ceiling (on a CPU the ranks share one
    device, the machine's cores). ``ceiling``: as in :func:`rank_flops_and_ceiling`."""
    rank_flops, rank_ceiling = rank_flops_and_ceiling(records, ceiling=ceiling)
    return rank_flops / (step_s * rank_ceiling)


def ladder_table(records: dict):
    """The B15 ladder measured here: per rung, the slowest rank's step (median, IQR over rounds),
    MFU, the speed-up over the rung before with its drift-widened interval, each category's
    seconds per step (mean over ranks) and the category that shrank most."""
    import pandas as pd

    timings = rung_timings(records)
    cats = rows_table(records).query("record != 'warmup' and record != 'profiled'")
    per_cat = cats.groupby(["record", "category"]).seconds.mean().unstack()
    raw = [r for rank in records["job"]["ranks"] for r in rank["rows"]]
    buckets = {rung: max(r["hook_calls"] for r in raw if r["record"] == rung) for rung in records["ladder"]}
    rows, prev = [], None
    for rung in records["ladder"]:
        t = timings[rung]
        row = {
            "rung": rung,
            "knob": "— (naive: standard attention, DDP's buckets and overlap, small files, 0 workers, "
            "sync checkpoint)"
            if prev is None
            else f"+ {rung}",
            "step_s": t.median_s,
            "step_iqr_s": t.iqr_s,
            "buckets_per_step": buckets[rung],
            "mfu_vs_ceiling": mfu_of(records, t.median_s),
            "mfu_vs_ceiling_now": mfu_of(records, t.median_s, ceiling="ceiling_now"),
            **{f"{c}_s": per_cat.loc[rung, c] for c in SPLIT},
            # the categories sum to the mean step over ranks and steps (step_s: the slowest rank's
            # median over rounds): their useful-compute share and MFU differ by that ratio
            "mean_step_s": sum(per_cat.loc[rung, c] for c in SPLIT),
        }
        if prev is not None:
            c = compare_timings(timings[prev], t)
            shrink = {k: per_cat.loc[prev, k] - per_cat.loc[rung, k] for k in CATEGORIES}
            most = max(shrink, key=shrink.get)
            grew = min(shrink, key=shrink.get)
            row.update(
                speedup=c.ratio,
                speedup_lo=c.ratio_lo,
                speedup_hi=c.ratio_hi,
                change=c.verdict,
                gain_s=timings[prev].median_s - t.median_s,
                targets=KNOB_TARGETS[rung],
                # which category shrank most, only where the step's change is outside the noise and
                # one did shrink (where every loss grew, the one that grew most)
                shrank_most=(
                    "— (no clear change)"
                    if c.verdict == "inconclusive"
                    else most
                    if shrink[most] > 0
                    else f"none shrank ({grew} grew most, {-shrink[grew] * 1e3:+.1f} ms)"
                ),
            )
        rows.append(row)
        prev = rung
    rows.append(
        {
            "rung": "recompute",
            "knob": "+ recompute: not measured — memory does not force it here (the model fits)",
        }
    )
    return pd.DataFrame(rows)


def leave_one_out_table(records: dict):
    """Each knob's leave-one-out gain: the last rung without that knob against the last rung
    (median seconds per step, the ratio with its drift-widened interval), beside its gain up the
    ladder (its rung against the rung before); empty for records without the configurations
    (``ladder.leave_one_out``)."""
    import pandas as pd

    labels = records.get("leave_one_out") or []
    if not labels:
        return pd.DataFrame()
    timings = rung_timings(records)
    ladder = ladder_table(records).set_index("rung")
    last = records["ladder"][-1]
    rows = []
    for label in labels:
        knob = label.removeprefix(LEAVE_ONE_OUT_PREFIX)
        c = compare_timings(timings[label], timings[last])
        rows.append(
            {
                "knob": knob,
                "targets": KNOB_TARGETS[knob],
                "step_without_s": timings[label].median_s,
                "step_all_s": timings[last].median_s,
                "loo_gain_s": timings[label].median_s - timings[last].median_s,
                "loo_ratio": c.ratio,
                "loo_ratio_lo": c.ratio_lo,
                "loo_ratio_hi": c.ratio_hi,
                "change": c.verdict,
                "ladder_gain_s": ladder.gain_s[knob],
            }
        )
    return pd.DataFrame(rows)


def gain_shares(frame, column: str) -> tuple[dict, float]:
    """Each knob's gain (``column``, seconds) summed per target loss, and the communication +
    data share of the total over the knobs of the article's ladder (``ARTICLE_LADDER_KNOBS``: the
    gain the article splits; a knob after it is credited in ``by_target`` only): NaN where those
    gains have both signs (a share of their sum means nothing), for the ladder's credit and the
    leave-one-out credit alike. ``frame``: one row per knob, named by its index (the ladder table's
    ``rung``) or its ``knob`` column (the leave-one-out table)."""
    by_target = frame.groupby("targets")[column].sum().to_dict()
    knobs = frame.index.to_series() if frame.index.name == "rung" else frame["knob"]
    frame = frame[knobs.isin(ARTICLE_LADDER_KNOBS).to_numpy()]
    credited = sum(v for k, v in by_target.items() if k in ("communication wait", "data wait"))
    total = frame[column].sum()
    if total <= 0 or (frame[column] <= 0).any():
        return by_target, float("nan")
    return by_target, credited / total


def b15_gain_shares(records: dict) -> dict:
    """Naive → last rung: the step's gain, each knob's measured gain credited to the loss the knob
    targets (``KNOB_TARGETS``), and the share the article credits — communication (buckets)
    and data IO (format + workers). Two attributions: up the ladder (each rung against
    the rung before, which depends on the ladder's order) and leave-one-out (the last rung without
    the knob against the last rung, which does not; None without those configurations)."""
    table = ladder_table(records).set_index("rung")
    first, last = records["ladder"][0], records["ladder"][-1]
    knobs = table.dropna(subset=["speedup"])

    by_target, share = gain_shares(knobs, "gain_s")
    loo = leave_one_out_table(records)
    loo_by_target, loo_share = gain_shares(loo, "loo_gain_s") if len(loo) else (None, None)
    total = _total_comparison(records)
    return {
        "gain_s": table.step_s[first] - table.step_s[last],
        "speedup": table.step_s[first] / table.step_s[last],
        "speedup_lo": total.ratio_lo,
        "speedup_hi": total.ratio_hi,
        "change": total.verdict,
        "gain_by_target_s": by_target,
        "comm_data_share": share,
        "loo_gain_by_target_s": loo_by_target,
        "loo_comm_data_share": loo_share,
    }


def _straggler_rows(records: dict) -> list[dict]:
    return [r for rank in records["job"]["ranks"] for r in rank["rows"] if r["record"] == STRAGGLER]


def _straggler_on(records: dict) -> dict:
    """``{step: on}`` for the straggler's steps: on where its rank waited before the forward."""
    s = records["job"]["straggler"]
    return {r["step"]: r["straggler_s"] > 0 for r in _straggler_rows(records) if r["rank"] == s["rank"]}


def straggler_table(records: dict):
    """Every rank's mean step time and categories in the straggler's blocks, on the steps with the
    straggler off and on (B13)."""
    on = _straggler_on(records)
    df = rows_table(records, record=STRAGGLER)
    df["straggler"] = ["on" if on[step] else "off" for step in df.step]
    table = df.groupby(["straggler", "rank", "category"]).seconds.mean().unstack().reset_index()
    table["step_s"] = table[list(SPLIT)].sum(axis=1)
    return table.sort_values(["straggler", "rank"]).reset_index(drop=True)  # "off" before "on"


def b13_pairs(records: dict):
    """The straggler's steps in pairs: each step with the straggler on beside the step before it
    in the same block (off), the job's step (slowest rank) of both and their difference."""
    import pandas as pd

    job = pd.DataFrame(_straggler_rows(records)).groupby("step").step_s.max()
    on = _straggler_on(records)
    rows = [
        {"step": s, "off_s": job[s - 1], "on_s": job[s], "rise_s": job[s] - job[s - 1]}
        for s in job.index
        if on[s] and (s - 1) in job.index and not on[s - 1]
    ]
    return pd.DataFrame(rows)


def b13_effect(records: dict, *, n_boot: int = 2000, seed: int = 0) -> dict:
    """How much of the straggler's delay reaches the job. In its blocks the straggler is on in
    every second step (``worker``); each step with it on is paired with the step before it
    (:func:`b13_pairs`: a slow block weighs on both), and the rise is the median of the pairs'
    differences of the job's step (the slowest rank's), with a seeded bootstrap interval (95%).
    The delay reaching the job is the rise over the delay: 1 when the job runs at the straggler's
    pace, 0 when the others do not wait for it; the slowdown is 1 + rise / the median step off.
    Beside it, what the other ranks saw: their communication wait with the straggler on and off,
    and its rise as a share of the delay (the delay arriving as waiting), also paired step by step
    with its own interval (``others_wait_reached``: the quantity B13 decides on)."""
    import numpy as np

    s = records["job"]["straggler"]
    pairs = b13_pairs(records)
    rise = pairs.rise_s.to_numpy()
    boot = np.median(rise[np.random.default_rng(seed).integers(0, rise.size, (n_boot, rise.size))], axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    off_s, median_rise = float(pairs.off_s.median()), float(np.median(rise))
    # what the other ranks saw: their communication wait with the straggler on over off (mean over
    # ranks and steps), the delay arriving as waiting where the job is synchronous
    per_rank = straggler_table(records).set_index(["straggler", "rank"])["communication wait"]
    others = [r for r in per_rank.index.get_level_values("rank").unique() if r != s["rank"]]
    wait_off = float(np.mean([per_rank[("off", r)] for r in others])) if others else 0.0
    wait_on = float(np.mean([per_rank[("on", r)] for r in others])) if others else 0.0
    # the same, paired step by step: the healthy ranks' communication wait on each step with the
    # straggler on minus the step before it (mean over those ranks), with its bootstrap interval
    waits = rows_table(records, record=STRAGGLER)
    waits = waits[(waits.category == "communication wait") & (waits["rank"] != s["rank"])]
    by_step = waits.groupby("step").seconds.mean()
    wait_rise = np.array(
        [by_step[p] - by_step[p - 1] for p in pairs.step if p in by_step and p - 1 in by_step]
    )
    if wait_rise.size:
        wboot = np.median(
            wait_rise[np.random.default_rng(seed + 1).integers(0, wait_rise.size, (n_boot, wait_rise.size))],
            axis=1,
        )
        wait_lo, wait_hi = np.percentile(wboot, [2.5, 97.5])
        wait_median = float(np.median(wait_rise))
    else:
        wait_lo = wait_hi = wait_median = float("nan")
    return {
        "others_wait_reached": wait_median / s["delay_s"],
        "others_wait_reached_lo": float(wait_lo) / s["delay_s"],
        "others_wait_reached_hi": float(wait_hi) / s["delay_s"],
        "delay_s": s["delay_s"],
        "delay_share": s["delay_s"] / off_s,
        "pairs": len(pairs),
        "off_step_s": off_s,
        "on_step_s": float(pairs.on_s.median()),
        "rise_s": median_rise,
        "slowdown": 1 + median_rise / off_s,
        "reached": median_rise / s["delay_s"],
        "reached_lo": float(lo) / s["delay_s"],
        "reached_hi": float(hi) / s["delay_s"],
        "others_wait_off_s": wait_off,
        "others_wait_on_s": wait_on,
        "others_wait_share": (wait_on - wait_off) / s["delay_s"],
    }


def _total_comparison(records: dict, last: str | None = None):
    """Naive → last rung (or the rung ``last``): the ratio of the slowest rank's medians, paired
    by round, with its drift-widened interval (``timing.compare_timings``)."""
    timings = rung_timings(records)
    return compare_timings(timings[records["ladder"][0]], timings[last or records["ladder"][-1]])
