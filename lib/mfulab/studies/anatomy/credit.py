"""B15's credits in words (up the ladder, leave-one-out, by what the timestamps measured) and the
article's own §5.2 ladder apart from §5.3's background checkpoint: the ``anatomy`` study's
text helpers for its B15 row and its ladder figure."""

from __future__ import annotations

from mfulab.studies.anatomy.analysis import CATEGORIES, _total_comparison
from mfulab.studies.anatomy.ladder import ARTICLE_LADDER_KNOBS


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


def _loo_text(t: dict, g: dict) -> str:
    loo = t.get("b15_leave_one_out")
    if loo is None or not len(loo):
        return "leave-one-out not timed in this run"
    per_knob = "; ".join(
        f"{r.knob} {r.loo_gain_s * 1e3:+.1f} ms ({_interval(r.loo_ratio, r.loo_ratio_lo, r.loo_ratio_hi)})"
        for r in loo.itertuples()
    )
    spanning = int((loo.change == "inconclusive").sum())
    if g["loo_comm_data_share"] != g["loo_comm_data_share"]:  # NaN: gains of both signs
        share = (
            f"the gains have both signs ({spanning} of {len(loo)} intervals span 1), so no share of "
            "their sum is read"
        )
    else:
        share = (
            f"communication + data IO {g['loo_comm_data_share']:.0%} of §5.2's knobs' summed "
            "leave-one-out gains"
        )
    return f"leave-one-out, the last rung without each knob: {per_knob}; {share}"


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
        "change": c.verdict,
    }
