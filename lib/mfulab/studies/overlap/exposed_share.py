"""Claim A18's yardstick (exposed communication under 10% of the step is good overlap, over
25% leaves room) against the compute ÷ communication ratio: the overlap job's emulated sweep
(``bench.overlap_worker``, ``a18_rows``) runs the serial step (k = 1) and one chunked step
(k = ``a18_k``) at several ratios, and the exposed share of each is

    exposed_s   = median over rounds of (overlapped step − compute-only step)   paired rounds
    share       = exposed_s ÷ median overlapped step

The same overlap (the same k, the same engine) gives a different share at every ratio, so the
share alone cannot grade an overlap.
"""

from __future__ import annotations

import numpy as np

from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim

GOOD_SHARE, ROOM_SHARE = 0.10, 0.25  # the article's thresholds


def share_class(share: float) -> str:
    """The article's reading of an exposed share."""
    if share < GOOD_SHARE:
        return f"good (< {GOOD_SHARE:.0%})"
    return f"room left (> {ROOM_SHARE:.0%})" if share > ROOM_SHARE else "in between"


def a18_table(records):
    """One row per (compute ÷ comm, k): the median overlapped step, the median exposed
    communication and its share of the step (empty when the run has no sweep)."""
    import pandas as pd

    rows = records["overlap"].get("a18_rows", [])
    by = {(r["compute_over_comm"], r["k"], r["variant"]): np.array(r["times_s"]) for r in rows}
    out = []
    for ratio, k in sorted({(r, k) for r, k, _ in by}):
        overlapped, compute = by[(ratio, k, "overlapped")], by[(ratio, k, "compute_only")]
        exposed_s = float(np.median(overlapped - compute))
        step_s = float(np.median(overlapped))
        out.append(
            {
                "compute_over_comm": ratio,
                "k": k,
                "overlapped_s": step_s,
                "exposed_comm_s": exposed_s,
                "exposed_share": exposed_s / step_s,
            }
        )
    return pd.DataFrame(out)


A18_CARDS = 8  # the claim's setting (article A §8): 8 cards at TP 8, the launch command's machine


A18_TP_OVERLAP_SHARES = (0.5, 0.3)  # sensitivity of the overlapped share: GEMM time the TP calls hide under


def article_shares(p: dict) -> dict:
    """The exposed share at the claim's setting: the step model (``step_at_scale.a4_model``) for
    the article's 13B on one machine of ``A18_CARDS`` cards at TP 8 (DP 1: only the TP
    all-reduces), with the command's global batch; without overlap all communication is exposed,
    with it (the TP collectives under the GEMMs, the overlap the article describes in §2.1–2.2:
    at DP 1 a gradient overlap has nothing to hide) what the step adds over the compute."""
    from mfulab.analytic.rates import Assumptions
    from mfulab.studies.overlap.step_at_scale import a4_baseline, a4_model

    def exposed(m):
        return (m["step_overlapped_s"] - m["compute_s"]) / m["step_overlapped_s"]

    case = {**a4_baseline(p), "cards": A18_CARDS, "tp_comm_overlap": True}
    m = a4_model(**case)
    serial = m["total_comm_s"] / m["step_serial_s"]
    overlapped = exposed(m)
    # how much of the GEMM time the TP collectives can hide under is an assumption of the step
    # model (rates.Assumptions.tp_overlap_share): the overlapped share at lower values beside it
    default_share = Assumptions().tp_overlap_share
    by_hidden_share = {
        share: exposed(a4_model(**case, tp_overlap_share=share)) for share in A18_TP_OVERLAP_SHARES
    }
    return {
        "tp_overlap_share": default_share,
        "overlapped_by_tp_overlap_share": by_hidden_share,
        "serial": serial,
        "overlapped": overlapped,
        # what a profiler shows: the communication kernels' time over the step; the kernels run
        # as long hidden as exposed, so hiding them shortens the step and raises this share
        "kernel_share_serial": m["total_comm_s"] / m["step_serial_s"],
        "kernel_share_overlapped": m["total_comm_s"] / m["step_overlapped_s"],
        "saved_s": m["saved_s"],
        "device": p["article_device"],
    }


def a18_profiler_claim(p: dict) -> Claim:
    """A18's reading: "with a profiler, look at the share of the step the communication operators
    (AllReduce, AllGather, ReduceScatter) occupy". The article's own criterion is the time the
    critical path waits for communication. Two readings of the profiler figure: the operators'
    total time (which counts hidden kernels as fully as exposed ones) and the non-overlapped time
    a profiler such as MindStudio also reports (the exposed share). At the article's setting (the
    step model: 13B, ``A18_CARDS`` cards, TP 8): when hiding the communication lowers the exposed
    share but not the operators' total share, the readings disagree: not checkable, both in the
    evidence; confirmed (analysis) when both fall."""
    a = article_shares(p)
    exposed_falls = a["overlapped"] < a["serial"]
    kernels_fall = a["kernel_share_overlapped"] < a["kernel_share_serial"]
    decision = (
        "confirmed"
        if exposed_falls and kernels_fall
        else "not checkable"
        if exposed_falls
        else "analytic only"
    )
    return Claim(
        "A18",
        "with a profiler, the communication operators' share of the step grades the overlap",
        f"the step model at the claim's setting (the 13B on {A18_CARDS} {a['device']} cards, TP 8, DP 1): "
        "the TP all-reduces' kernel time over the step, and the exposed share, without and with TP "
        "overlap; confirmed (analysis) when both shares fall as the overlap hides the communication, not "
        "checkable when only the exposed share falls (the two readings of the profiler figure disagree)",
        decision,
        f"reading-dependent: exposed share {a['serial']:.0%} → {a['overlapped']:.0%} as TP overlap hides the "
        "all-reduces (the non-overlapped time a profiler such as MindStudio also reports: the article's own "
        "criterion); "
        f"the operators' share of the step {a['kernel_share_serial']:.0%} → "
        f"{a['kernel_share_overlapped']:.0%} (the same kernels in a shorter step): read as the operators' "
        "total time, the figure grades a well-hidden overlap as 'room to optimise'",
        basis=verdicts.ANALYSIS,
    )


def a18_claim(table, overlap_table, p: dict | None = None) -> Claim | None:
    """A18: not checkable (a rule of thumb with nothing to pass or fail: the same overlap gives a
    different share at every compute ÷ communication ratio, so no share grades an overlap); the
    evidence is the exposed share of one chunk count across that sweep, and the shares the step
    model gives at the article's configuration with and without overlap."""
    emulated = overlap_table[overlap_table["mode"] == "emulated"]
    if not len(emulated):
        return None
    shares = emulated.comm_share_of_step
    evidence = f"emulated sweep over k: exposed share {shares.min():.0%}–{shares.max():.0%}"
    if table is not None and len(table):
        k = int(table.k.max())
        chunked = table[table.k == k].sort_values("compute_over_comm")
        lo, hi = chunked.iloc[0], chunked.iloc[-1]
        classes = {share_class(x) for x in chunked.exposed_share}
        reading = (
            f"the same overlap falls in {len(classes)} of the article's classes as the ratio moves"
            if len(classes) > 1
            else f"'{classes.pop()}' at every ratio"
        )
        evidence += (
            f"; at k={k}, compute ÷ comm {lo.compute_over_comm:g} → {hi.compute_over_comm:g}: "
            f"{lo.exposed_share:.0%} → {hi.exposed_share:.0%}: {reading}"
        )
    if p:
        a = article_shares(p)
        evidence += (
            f"; at the claim's setting (step model, the 13B on {A18_CARDS} {a['device']} cards, TP 8): "
            f"{a['serial']:.0%} without overlap ({share_class(a['serial'])}; overlap saves "
            f"{a['saved_s']:.2f} s), "
            f"{a['overlapped']:.0%} with the TP all-reduces overlapped (§2.2; "
            f"{share_class(a['overlapped'])}), the step model hiding them under up to "
            f"{a['tp_overlap_share']:.0%} of the GEMM time; "
            + "; with the TP all-reduces hidden under "
            + ", ".join(f"{k:.0%}" for k in a["overlapped_by_tp_overlap_share"])
            + " of the GEMM time: "
            + ", ".join(f"{v:.0%}" for v in a["overlapped_by_tp_overlap_share"].values())
        )
    return Claim(
        "A18",
        "communication under 10% of the step is good overlap; over 25% leaves room",
        "exposed communication share per k, and per compute ÷ comm ratio at one k (emulated compute)",
        "not checkable",
        evidence + "; a rule of thumb: nothing to pass or fail",
        basis=verdicts.STATEMENT,
    )
