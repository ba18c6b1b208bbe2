"""Article B's case study (§5.2, B15) as the article itself attributes it: each step's gain and
its loss category (``articles.B15_STEPS``), and the sentence "the gain comes mainly from
communication overlap and data IO" (收益主要来自通信重叠和数据IO) under each reading of which
steps it credits. No measurement: the article's own arithmetic, read by chapter 01 (its row)
and chapter 07 (beside the ladder it measures)."""

from __future__ import annotations

from mfulab.analytic.articles import B15_STEPS


def b15_table():
    """Each optimisation step of the case study, its gain and its loss category."""
    import pandas as pd

    rows = []
    for (prev, _, _), (t, change, cat) in zip(B15_STEPS, B15_STEPS[1:]):
        rows.append(
            {"change": change, "category": cat, "step_before_s": prev, "step_after_s": t, "gain_s": prev - t}
        )
    df = pd.DataFrame(rows)
    gross = df.gain_s.clip(lower=0).sum()
    df["share_of_gross_gain"] = df.gain_s / gross
    return df


# Two readings of B15's sentence "the gain comes mainly from communication overlap and data IO":
# the categories each reading credits to it (the NCCL step's category is "communication bandwidth").
# Its words say 通信重叠 (communication *overlap*), which its step 2 (the DDP buckets) improves and
# the NCCL step (GPUDirect RDMA, buffer sizes: bandwidth) does not; but article B files NCCL tuning
# under §3's communication optimisation (通信优化), so the looser reading is as plausible. Where
# the readings disagree the sentence is not checkable (``b15_verdict``), each reading's verdict in
# the evidence.
B15_READINGS = {
    "NCCL tuning is its own category (bandwidth, not overlap)": ("communication overlap", "data IO"),
    "NCCL tuning counts as communication (overlap)": (
        "communication overlap",
        "communication bandwidth",
        "data IO",
    ),
}
B15_MAINLY = 0.5  # "mainly": more than half of the gain
# §5.2 gives every step time to 0.1 s, so each lies within ±0.05 s of its figure: the article's
# own arithmetic decides a reading only where every step time in that range gives one answer
B15_STEP_ROUNDING_S = 0.05


def _credited_share(step_times_s, categories) -> float:
    """The share of the MFU points gained that ``categories`` carry: the sentence speaks of
    points (从43%到52%，九个百分点的提升), and at a fixed batch MFU ∝ 1 / step time, so a step's
    points are proportional to 1/after − 1/before (a second saved on a short step is worth more)."""
    gains = [1 / after - 1 / before for before, after in zip(step_times_s, step_times_s[1:])]
    gross = sum(g for g in gains if g > 0)
    credited = sum(g for g, (_, _, cat) in zip(gains, B15_STEPS[1:]) if cat in categories)
    return credited / gross


def share_range(categories, rounding_s: float = B15_STEP_ROUNDING_S) -> tuple[float, float]:
    """Lowest and highest share of the MFU points gained (:func:`_credited_share`) credited to
    ``categories`` with every step time anywhere within ±``rounding_s`` of its stated figure. The
    share is a ratio of sums of differences of 1 / step time, monotone in each step time between
    the points where a gain changes sign, so the extremes lie on the grid of −rounding, 0 and
    +rounding per step (3⁶ points)."""
    import itertools

    stated = [t for t, _, _ in B15_STEPS]
    shares = [
        _credited_share([t + d for t, d in zip(stated, moves)], categories)
        for moves in itertools.product((-rounding_s, 0.0, rounding_s), repeat=len(stated))
    ]
    return min(shares), max(shares)


def _reading_verdict(lo: float, hi: float) -> str:
    """More than half at every rounding of the step times: confirmed; at most half at every one:
    refuted; otherwise the article's figures cannot tell (1e-9: the sums' float error)."""
    if lo > B15_MAINLY + 1e-9:
        return "confirmed"
    return "refuted" if hi <= B15_MAINLY + 1e-9 else "cannot tell"


def b15_categorisations():
    """B15's sentence under each reading: the gain credited to overlap + data IO in seconds and
    as its share of the MFU points gained (improvements only: the gross points; all steps: the
    net), the points share's range over the step times' rounding, and the reading's verdict (more
    than half of the points in the whole range: confirmed). The share of the seconds saved is
    kept beside it."""
    import pandas as pd

    df = b15_table()
    stated = [t for t, _, _ in B15_STEPS]
    gross_s = df.gain_s.clip(lower=0).sum()
    points = pd.Series([1 / a - 1 / b for b, a in zip(stated, stated[1:])], index=df.index)
    gross_points, net_points = points.clip(lower=0).sum(), points.sum()
    rows = []
    for reading, categories in B15_READINGS.items():
        mask = df.category.isin(categories)
        credited = df[mask].gain_s.sum()
        by_category = df.assign(group=df.category.where(~mask, "credited"))
        others = by_category[by_category.group != "credited"].groupby("group").gain_s.sum()
        lo, hi = share_range(categories)
        rows.append(
            {
                "reading": reading,
                "credited_gain_s": credited,
                "share_of_gained_seconds": credited / gross_s,
                "share_of_gross_gain": points[mask].sum() / gross_points,
                "share_lo_rounding": lo,
                "share_hi_rounding": hi,
                "share_of_net_gain": points[mask].sum() / net_points,
                "largest_other_category": others.idxmax(),
                "largest_other_gain_s": others.max(),
                "verdict": _reading_verdict(lo, hi),
            }
        )
    return pd.DataFrame(rows)


def b15_verdict(readings) -> str:
    """One verdict for the sentence: the readings' common verdict where they agree and decide,
    ``not checkable`` where they disagree or the step times' rounding cannot tell (the course's
    rule for a sentence with two readings)."""
    answers = set(readings.verdict)
    return answers.pop() if len(answers) == 1 and "cannot tell" not in answers else "not checkable"
