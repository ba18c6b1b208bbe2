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
# The article's own words decide the verdict (``B15_LITERAL_READING``): it credits "通信重叠"
# (communication *overlap*) and data IO; its step 2 (the DDP buckets) is the one it says lets
# backward and communication overlap more fully, while the NCCL step (GPUDirect RDMA, buffer sizes) raises
# bandwidth and adds no overlap; §5.2 itself calls the SDPA + TF32 step "这一步收益最大" (the
# largest gain). The looser reading, every communication step counted as overlap, is shown beside it
# (``b15_categorisations``) and decides nothing.
B15_LITERAL_READING = "NCCL tuning is its own category (bandwidth, not overlap)"
B15_READINGS = {
    "NCCL tuning is its own category (bandwidth, not overlap)": ("communication overlap", "data IO"),
    "NCCL tuning counts as communication (overlap)": (
        "communication overlap",
        "communication bandwidth",
        "data IO",
    ),
}
B15_MAINLY = 0.5  # "mainly": more than half of the gain


def b15_categorisations():
    """B15's sentence under each reading: the gain credited to overlap + data IO, its share of
    the gross gain (improvements only) and of the net gain, and the verdict (> half: confirmed)."""
    import pandas as pd

    df = b15_table()
    gross_s, net_s = df.gain_s.clip(lower=0).sum(), df.gain_s.sum()
    rows = []
    for reading, categories in B15_READINGS.items():
        credited = df[df.category.isin(categories)].gain_s.sum()
        by_category = df.assign(group=df.category.where(~df.category.isin(categories), "credited"))
        others = by_category[by_category.group != "credited"].groupby("group").gain_s.sum()
        rows.append(
            {
                "reading": reading,
                "credited_gain_s": credited,
                "share_of_gross_gain": credited / gross_s,
                "share_of_net_gain": credited / net_s,
                "largest_other_category": others.idxmax(),
                "largest_other_gain_s": others.max(),
                "verdict": "confirmed" if credited / gross_s > B15_MAINLY else "refuted",
            }
        )
    return pd.DataFrame(rows)
