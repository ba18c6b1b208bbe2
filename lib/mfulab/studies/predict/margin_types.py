"""The switch margin taken apart: per type of switch, and on blind pairs alone.

The course's switch margin (``margins.kind_margins``) pools every held-out pair that differs in
anything beyond the parallel layout. A chapter's comparison is one switch: a recompute policy, a
ZeRO stage, TP overlap, a bucket cap. How far the pooled figure speaks for each depends on which
pairs it holds, so the pairs are sorted here by the first switch they differ in
(:data:`SWITCH_TYPES`, in that order; a pair may change the layout with it), and the margins are
recomputed on the pairs of the holdout splits alone, collected after the model was frozen
(``uncertainty.BLIND``): the test split's pairs are ones the model was revised against after its
first evaluation (chapter 09's record says so), the holdouts' are not.
"""

from __future__ import annotations

import numpy as np

# (type, the settings whose difference puts a pair in it), checked in this order
SWITCH_TYPES = (
    ("ZeRO stage or framework", frozenset({"zero_stage", "framework"})),
    ("recompute policy", frozenset({"recompute"})),
    ("TP communication overlap", frozenset({"tp_comm_overlap"})),
    ("attention kernel or dropout", frozenset({"attention", "dropout"})),
)
UNRECORDED = "a switch the files do not record (e.g. torch.compile)"
OTHER = "another setting"


def switch_type(differ_in: str) -> str:
    """The type of a switch pair from its ``differ_in`` (``margins.kind_pairs``)."""
    if differ_in == "nothing the files record":
        return UNRECORDED
    settings = set(differ_in.split(", "))
    return next((name for name, keys in SWITCH_TYPES if settings & keys), OTHER)


def switch_type_margins(pairs):
    """Per type of switch (:func:`switch_type`): pairs, sources, the largest source's share of
    them, how many change that switch and nothing else, and the median and 90th percentile of the
    step model's ratio error beside the null model's."""
    import pandas as pd

    sw = pairs[pairs.kind == "switch"].copy()
    sw["type"] = sw.differ_in.map(switch_type)
    rows = []
    for name, g in sw.groupby("type", sort=False):
        counts = g.source.value_counts()
        rows.append(
            {
                "switch type": name,
                "pairs": len(g),
                "sources": g.source.nunique(),
                "largest_source": counts.index[0],
                "largest_source_share": float(counts.iloc[0] / len(g)),
                "one_setting": int((g.settings_differing == 1).sum()),
                "median": float(np.median(g.ratio_error)),
                "p90": float(np.quantile(g.ratio_error, 0.9)),
                "null_p90": float(np.quantile(g.null_ratio_error, 0.9)),
            }
        )
    return pd.DataFrame(rows).sort_values("pairs", ascending=False, ignore_index=True)


def blind_margins(blind_pairs):
    """Per kind, the margins on the holdout splits' pairs alone (``margins.kind_pairs`` with
    ``splits=uncertainty.GROUPS["holdouts"]``): pairs, sources and the 90th percentile, with the
    null model's beside it; a kind with no blind pair has a row saying so."""
    import pandas as pd

    from mfulab.studies.predict.margins import KINDS

    rows = []
    for kind in KINDS:
        g = blind_pairs[blind_pairs.kind == kind] if len(blind_pairs) else blind_pairs
        rows.append(
            {
                "kind": kind,
                "blind_pairs": len(g),
                "sources": g.source.nunique() if len(g) else 0,
                "p90": float(np.quantile(g.ratio_error, 0.9)) if len(g) else float("nan"),
                "null_p90": float(np.quantile(g.null_ratio_error, 0.9)) if len(g) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def types_text(types, blind) -> str:
    """What the two tables say, for the chapter's text."""
    if not len(types):
        return ""
    top = types.iloc[0]
    small = types[(types.pairs < 5) | (types.sources < 2)]
    b = blind.set_index("kind")
    text = (
        f"**The switch margin by type.** Of the pooled switch pairs, {int(top.pairs)} "
        f"({top.pairs / types.pairs.sum():.0%}) are '{top['switch type']}' (p90 {top.p90:.0%}, "
        f"{top.largest_source_share:.0%} of them from {top.largest_source}); "
        + "; ".join(
            f"'{r['switch type']}': {int(r.pairs)} pair{'s' if r.pairs != 1 else ''} from {int(r.sources)} "
            f"source{'s' if r.sources != 1 else ''}, p90 {r.p90:.0%}"
            for _, r in types.iloc[1:].iterrows()
        )
        + f". {len(small)} of {len(types)} types rest on fewer than five pairs or one source, so the "
        "pooled margin is mostly one kind of switch standing in for the others: a chapter's "
        "recompute, bucket or overlap comparison borrows it, it does not measure that switch. "
    )
    if "switch" in b.index and b.loc["switch", "blind_pairs"] == 0:
        text += (
            "**No blind switch pair exists**: every switch figure comes from pairs the model was revised "
            "against"
        )
    elif "switch" in b.index:
        text += (
            f"On blind pairs alone the switch p90 is {b.loc['switch', 'p90']:.0%} "
            f"({int(b.loc['switch', 'blind_pairs'])} pairs)"
        )
    if "layout" in b.index and b.loc["layout", "blind_pairs"]:
        text += (
            f"; the layout p90 on blind pairs is {b.loc['layout', 'p90']:.0%} "
            f"({int(b.loc['layout', 'blind_pairs'])} pairs from {int(b.loc['layout', 'sources'])} sources, "
            f"the null's {b.loc['layout', 'null_p90']:.0%})"
        )
    return text + "."
