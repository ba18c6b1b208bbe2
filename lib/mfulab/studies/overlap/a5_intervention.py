"""A5's mechanism tested by intervention, not inferred: in the A5 pass's own interleaved rounds
the step's all-reduces run at k = 4, at k = 16, and at k = 4 followed by 12 calls of one element
each (``bench.PADDED``). The padded step pays the 12 extra calls' fixed cost with none of their
bytes; if "each call has a fixed set-up cost" (article A §6.3) is why 16 chunks take longer, the
padded step takes as long as k = 16:

    gap_s     = median(k=16) − median(k=4)             the effect, per step
    padded_s  = median(k=4 + 12 empty) − median(k=4)   what the extra calls alone cost
    share     = padded_s / gap_s                        1: the calls' fixed cost is the whole gap

The interval is a bootstrap over whole rounds (the three series are paired), widened on each side
by the assumed run-to-run drift of the share itself (× (1 ± drift)): a drift common to the three
series, a box that runs slower or faster as a whole between fresh runs, cancels in the share, so
only the share's own relative drift is left. Until 2026-12-07 the padded step's whole median
drift was carried through the division (± drift × median(padded) / gap), which on a
bandwidth-dominated tensor is wider than the rule's whole window, so the row could never
decide (round seventeen's reader of chapter 02)."""

from __future__ import annotations

import numpy as np

from mfulab.measure.timing import RUN_TO_RUN_DRIFT


def a5_intervention(
    records,
    *,
    regime: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    drift: float = RUN_TO_RUN_DRIFT,
    confidence: float = 0.95,
) -> dict | None:
    """The padded step against k = 4 and k = 16 (module docstring), on ``overlap_bytes`` or, with
    ``regime``, on the pass at ``a5_regime_bytes`` (the article's regime); None where the run has
    no such rounds (older records) or the three series differ in length."""
    o = records.get("overlap") or {}
    if regime:
        r = o.get("a5_regime") or {}
        o = {
            "a5_comm_only_times_s": r.get("comm_only_times_s"),
            "a5_padded_times_s": r.get("padded_times_s"),
            "a5_padded_calls": r.get("padded_calls", 12),
            "bytes": r.get("bytes"),
            "k_hi": r.get("k_hi", 16),
        }
    else:
        o = {**o, "bytes": (records.get("params") or {}).get("overlap_bytes"), "k_hi": 16}
    own, padded = o.get("a5_comm_only_times_s") or {}, o.get("a5_padded_times_s")
    k_hi = str(o["k_hi"])
    if not padded or "4" not in own or k_hi not in own:
        return None
    k4, k16, pad = (np.asarray(x, dtype=float) for x in (own["4"], own[k_hi], padded))
    if not (len(k4) == len(k16) == len(pad)) or len(k4) < 3:
        return None

    def share(idx):
        m4, m16, mp = (np.median(x[idx], axis=-1) for x in (k4, k16, pad))
        with np.errstate(divide="ignore", invalid="ignore"):
            return (mp - m4) / (m16 - m4)

    m4, m16, mp = (float(np.median(x)) for x in (k4, k16, pad))
    gap_s, padded_s = m16 - m4, mp - m4
    rng = np.random.default_rng(seed)
    boots = share(rng.integers(0, len(k4), size=(n_boot, len(k4))))
    boots = boots[np.isfinite(boots)]
    tail = (1 - confidence) / 2 * 100
    within_lo, within_hi = (float(x) for x in np.percentile(boots, [tail, 100 - tail]))
    if gap_s > 0:
        lo, hi = within_lo - drift * abs(within_lo), within_hi + drift * abs(within_hi)
    else:
        lo, hi = float("-inf"), float("inf")
    return {
        "bytes": o["bytes"],
        "k_hi": int(k_hi),
        "calls": int(o.get("a5_padded_calls", 12)),
        "rounds": len(k4),
        "k4_s": m4,
        "k16_s": m16,
        "padded_step_s": mp,
        "gap_s": gap_s,
        "padded_s": padded_s,
        "per_call_s": padded_s / int(o.get("a5_padded_calls", 12)),
        "share": padded_s / gap_s if gap_s > 0 else float("nan"),
        "within_lo": within_lo,
        "within_hi": within_hi,
        "lo": lo,
        "hi": hi,
        "drift": drift,
    }


def decision(iv: dict, min_share: float) -> tuple[bool, bool]:
    """(explains, excluded): the calls' cost explains the gap when the share's widened interval
    lies within [min_share, 1 / min_share]; it is excluded when the interval lies below
    1 − min_share (the calls cost at most that share of the gap)."""
    explains = iv["gap_s"] > 0 and min_share <= iv["lo"] and iv["hi"] <= 1 / min_share
    excluded = iv["gap_s"] > 0 and iv["hi"] < 1 - min_share
    return bool(explains), bool(excluded)


def text(iv: dict) -> str:
    """One sentence: what the padded step measured, against the gap."""

    def ms(x):
        return f"{x * 1e3:.1f} ms"

    size = f" on {iv['bytes'] / 2**20:.0f} MiB" if iv.get("bytes") else ""
    return (
        f"the intervention{size}: k=4 followed by {iv['calls']} calls of one element each took "
        f"{ms(iv['padded_step_s'])} against k=4's {ms(iv['k4_s'])} and k={iv.get('k_hi', 16)}'s "
        f"{ms(iv['k16_s'])} "
        f"(medians of {iv['rounds']} interleaved rounds): the extra calls alone cost "
        f"{ms(iv['padded_s'])} ({iv['per_call_s'] * 1e3:.2f} ms a call), "
        f"{iv['share']:.0%} [{iv['lo']:.0%}, {iv['hi']:.0%}] of the {ms(iv['gap_s'])} gap in these rounds "
        "(bootstrap over "
        f"rounds, this run's [{iv['within_lo']:.0%}, {iv['within_hi']:.0%}] widened by the share's own "
        f"{iv['drift']:.0%} drift: a drift common to the three series cancels in it)"
    )
