"""Claim A18's yardstick (exposed communication under 10% of the step is good overlap, over
25% leaves room) against the compute ÷ communication ratio: the overlap job's emulated sweep
(``bench.overlap_worker``, ``a18_rows``) runs the serial step (k = 1) and one chunked step
(k = ``a18_k``) at several ratios, and the exposed share of each is

    exposed_s   = median over rounds of (overlapped step − compute-only step)   paired rounds
    share       = exposed_s ÷ median overlapped step

Without overlap the share is 1/(1 + ratio), so away from the configuration the article states
(one machine, 8 cards, TP 8) a share's class moves with the ratio; the thresholds are judged at
that configuration with the step model (:func:`a18_claim`).
"""

from __future__ import annotations

import numpy as np

from mfulab.studykit import verdicts
from mfulab.studykit.step_error import SWITCH_MARGIN
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
# sensitivity of the serial share: the TP link's per-step latency and its share of the line rate
# (rates.Assumptions' alpha_intra_s and link_efficiency; a reader's 20 µs, half the line rate)
A18_LINK_READINGS = {"α 20 µs": {"alpha_intra_s": 20e-6}, "link efficiency 0.5": {"link_efficiency": 0.5}}
# the article's chunk counts (§2.2: 4–8 chunks): a dependent chunked all-reduce leaves its last
# chunk exposed, a floor under the overlapped share the step model's hiding share does not keep
A18_CHUNKS = (4, 8)


def last_chunk_s(inputs: dict, m: dict, k: int) -> float:
    """Seconds per step of the last chunk of every TP all-reduce when each is split into ``k``:
    a chunk is a call of its own, so it pays the call's whole latency and 1/k of its transfer.
    The latency part of the step model's TP time is what it loses with every per-call latency
    set to zero (``extrapolated.LATENCY_FIELDS``; the one model, priced twice):
    latency + (TP time − latency) ÷ k. Until 2026-12-07 the floor was TP time ÷ k over the
    overlapped step, which divided the latency by k too (round fifteen's reader of chapter 02)."""
    from mfulab.analytic.extrapolated import LATENCY_FIELDS
    from mfulab.studies.overlap.step_at_scale import a4_model

    no_latency = a4_model(**{**inputs, **{f: 0.0 for f in LATENCY_FIELDS}})
    latency_s = m["tp_comm_s"] - no_latency["tp_comm_s"]
    return latency_s + (m["tp_comm_s"] - latency_s) / k


# of the 4 TP all-reduces per layer and micro-batch (Shoeybi et al. 2019, Fig. 4), the 2 of the
# forward feed the next layer, which waits for their last chunk; the 2 of the backward, the input
# gradient's before each column-parallel GEMM, Megatron overlaps with that GEMM's weight-gradient
# computation (its asynchronous TP all-reduce, LinearWithGradAccumulationAndAsyncCommunication),
# so none need leave a chunk exposed: the floor counts the forward's alone (round eighteen's reader)
FORWARD_TP_SHARE = 2 / 4


def tp_floor_s(inputs: dict, m: dict, k: int) -> float:
    """Seconds per step no overlap can hide at ``k`` chunks: the last chunk of every forward TP
    all-reduce (:func:`last_chunk_s` × ``FORWARD_TP_SHARE``). The one floor A4's bound and A18's
    shares keep (until 2026-12-07 A18 counted the backward's last chunks too: round thirty-one's
    reader of chapter 02)."""
    return last_chunk_s(inputs, m, k) * FORWARD_TP_SHARE


def article_shares(p: dict) -> dict:
    """The exposed share at the claim's setting: the step model (``step_at_scale.a4_model``) for
    the article's 13B on one machine of ``A18_CARDS`` cards at TP 8 (DP 1: only the TP
    all-reduces), with the command's global batch; without overlap all communication is exposed,
    with it (the TP collectives under the GEMMs, the overlap the article describes in §2.1–2.2:
    at DP 1 a gradient overlap has nothing to hide) what the step adds over the compute."""
    from mfulab.analytic import extrapolated
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

    def floor_share(inputs: dict, mm: dict, k: int) -> float:
        """The last chunk of every forward TP all-reduce left exposed (:func:`tp_floor_s`), as a
        share of the step that then contains it: the step grows by what is exposed."""
        floor_s = tp_floor_s(inputs, mm, k)
        return floor_s / (mm["step_overlapped_s"] + floor_s)

    def overlapped_with_floor(inputs: dict, mm: dict) -> float:
        """The overlapped share with the last of the article's chunks left exposed."""
        return max(exposed(mm), *(floor_share(inputs, mm, k) for k in A18_CHUNKS))

    # the slower TP links are assumed inputs of both thresholds (one sensitivity set for both,
    # round fourteen's reader of chapter 02): the serial share and the overlapped one in each
    serial_by_link, overlapped_by_link = {}, {}
    for name, assumed in A18_LINK_READINGS.items():
        mm = a4_model(**case, **assumed)
        serial_by_link[name] = mm["total_comm_s"] / mm["step_serial_s"]
        overlapped_by_link[name] = overlapped_with_floor({**case, **assumed}, mm)
    # a card the step model was never validated on (the 910B, chapter 09): each of its readings
    # (extrapolated.device_readings) is an assumed input, the serial and the overlapped share (the
    # last chunk's floor kept) in each
    by_device_reading = {}
    for name, reading in extrapolated.device_readings(case["device"]).items():
        mm = a4_model(**{**case, **reading})
        by_device_reading[name] = {
            "serial": mm["total_comm_s"] / mm["step_serial_s"],
            "overlapped": overlapped_with_floor({**case, **reading}, mm),
        }
    return {
        "by_device_reading": by_device_reading,
        "serial_by_link": serial_by_link,
        "overlapped_by_link": overlapped_by_link,
        # the last chunk of every forward TP all-reduce exposed, over the step that contains it
        "last_chunk_floor": {k: floor_share(case, m, k) for k in A18_CHUNKS},
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
        basis=verdicts.ASSUMED,  # §8 states the 8 cards and TP 8, not the model or the batch
    )


def _readings_note(a: dict) -> str:
    """The extrapolated card's readings in one clause: the serial and overlapped shares' ranges."""
    readings = a.get("by_device_reading", {})
    if not readings:
        return ""
    serial = [r["serial"] for r in readings.values()]
    overlapped = [r["overlapped"] for r in readings.values()]
    return (
        f"; the {a['device']}, a card the step model was never validated on (chapter 09), in {len(readings)} "
        f"readings ({', '.join(readings)}): {min(serial):.0%}–{max(serial):.0%} without overlap, "
        f"{min(overlapped):.1%}–{max(overlapped):.1%} overlapped (last chunk's floor kept)"
    )


def _serial_shares(a: dict) -> list[float]:
    """The step with nothing overlapped, in the stated case and every assumed reading (a slower TP
    link, each reading of the extrapolated card): the exposed share and the operators' share are
    one number there (nothing is hidden)."""
    return [
        a["serial"],
        *a["serial_by_link"].values(),
        *(r["serial"] for r in a["by_device_reading"].values()),
    ]


def _floors(a: dict) -> list[float]:
    """The least exposed share any overlap reaches (the last chunk left exposed), in the stated case
    and every assumed reading."""
    return [
        *a["last_chunk_floor"].values(),
        *a["overlapped_by_link"].values(),
        *(r["overlapped"] for r in a["by_device_reading"].values()),
    ]


def a18_rule_decision(a: dict) -> str:
    """A18's lower threshold as the conditional the article states ("如果通信占比能压到10%以下，说明
    通信计算重叠做得不错": *if* the share can be pushed under 10%, the overlap is good; round
    seventeen's reader of chapter 02: a conditional, not a claim that 10% is reachable), judged
    where the article states it (one machine, 8 cards, TP 8). It misgrades when a step with
    nothing overlapped reads under 10% (good overlap where there is none); under both readings
    of the profiler figure that step's share is the same number. Refuted (analysis) when the stated
    case misgrades, analytic only when only an assumed reading (a slower TP link, a reading of the
    extrapolated card) does, confirmed (analysis) otherwise. The share is the one the article names
    as its only criterion, the time on the critical path spent waiting for communication (判断标准
    只有一个：关键路径上还有多少时间花在"等通信"上); its profiler recipe, the operators' total time, is
    the third row's question. ``a``: :func:`article_shares`."""
    if a["serial"] < GOOD_SHARE:
        return "refuted"
    return "confirmed" if all(x >= GOOD_SHARE for x in _serial_shares(a)) else "analytic only"


def a18_room_decision(a: dict) -> str:
    """A18's upper threshold as the conditional it states (over 25% ⇒ room left in scheduling or
    chunking), on the quantity the article names as its only criterion, the exposed wait on the
    critical path: a step over 25% has room when the least any overlap leaves exposed (the last
    chunk's floor, in every assumed reading) lies under 25%: confirmed (analysis), refuted
    (analysis) otherwise. The profiler recipe read as the operators' total time (which flags a
    well-overlapped step: its kernels run as long hidden as exposed, in a shorter step) is the
    third row's question (until 2026-12-07 it voted here, and the row read not checkable)."""
    return "confirmed" if all(x < ROOM_SHARE for x in _floors(a)) else "refuted"


def a18_claim(table, overlap_table, p: dict | None = None) -> list[Claim]:
    """A18 at the article's configuration (:func:`a18_rule_decision`, the step model for the 13B on
    one machine of ``A18_CARDS`` cards at TP 8); the emulated sweep over compute ÷ communication
    beside it, outside that configuration: without overlap the exposed share is 1/(1 + ratio), so
    a share's class moves with the ratio before it says anything about the overlap, and the
    thresholds hold only near the configuration they were stated for. Without ``p`` (no step
    model inputs) the row is not checkable."""
    emulated = overlap_table[overlap_table["mode"] == "emulated"]
    if not len(emulated):
        return []
    shares = emulated.comm_share_of_step
    sweep = f"emulated sweep over k: exposed share {shares.min():.0%}–{shares.max():.0%}"
    if table is not None and len(table):
        k = int(table.k.max())
        chunked = table[table.k == k].sort_values("compute_over_comm")
        serial = table[table.k == table.k.min()].set_index("compute_over_comm").exposed_share
        recovered = ", ".join(
            f"{r.compute_over_comm:g}: {1 - r.exposed_share / serial[r.compute_over_comm]:.0%}"
            for r in chunked.itertuples()
            if r.compute_over_comm in serial.index and serial[r.compute_over_comm] > 0
        )
        no_overlap = ", ".join(f"{1 / (1 + r):.0%}" for r in chunked.compute_over_comm)
        sweep += (
            f"; outside the stated configuration (compute ÷ comm {chunked.compute_over_comm.min():g} → "
            f"{chunked.compute_over_comm.max():g}), at k={k} the exposed share runs "
            f"{chunked.exposed_share.iloc[0]:.0%} → {chunked.exposed_share.iloc[-1]:.0%}; how far k={k} "
            f"lowers the serial step's exposed share (relative fall of the share), per ratio: {recovered}; "
            "with no overlap at all the "
            f"share is 1/(1 + ratio): {no_overlap}, so away from the stated configuration a share's class "
            "moves with the ratio before it says anything about the overlap"
        )
    if not p:
        return [
            Claim(
                "A18",
                "communication under 10% of the step is good overlap; over 25% leaves room",
                "exposed communication share per k, and per compute ÷ comm ratio at one k (emulated compute)",
                "not checkable",
                sweep + "; no step model inputs to judge the article's configuration",
                basis=verdicts.STATEMENT,
            )
        ]
    a = article_shares(p)
    setting = f"at the claim's setting (step model, the 13B on {A18_CARDS} {a['device']} cards, TP 8)"
    floors = ", ".join(f"{v:.1%} at k = {k}" for k, v in a["last_chunk_floor"].items())
    good = Claim(
        "A18",
        "communication under 10% of the step is good overlap (single machine, 8 cards, TP 8)",
        "the step model at the article's stated configuration, without and with the TP all-reduces "
        "overlapped, with slower TP links and each reading of the 910B; the sentence is a conditional "
        "(如果…能压到10%以下: if the share can be pushed under 10%), so it misgrades only where a step with "
        "nothing overlapped reads under 10% (the same number under both readings of the profiler "
        "figure); the overlapped shares and the emulated sweep beside it",
        a18_rule_decision(a),
        f"{setting}: {a['serial']:.0%} without overlap ({share_class(a['serial'])}), "
        f"{a['overlapped']:.0%} with the TP all-reduces overlapped (§2.2), the step model hiding them under "
        f"up to {a['tp_overlap_share']:.0%} of the GEMM time; hidden under "
        + ", ".join(f"{k:.0%}" for k in a["overlapped_by_tp_overlap_share"])
        + ": "
        + ", ".join(f"{v:.0%}" for v in a["overlapped_by_tp_overlap_share"].values())
        + f"; the last chunk of every forward TP all-reduce stays exposed (the next layer waits for it; "
        f"the backward's hide under the weight-gradient GEMMs, as A4's bound counts), a floor of {floors} "
        f"(overlap saves {a['saved_s']:.2f} s); with a slower TP link, overlapped with the larger "
        f"(k = {min(A18_CHUNKS)}) floor: "
        + ", ".join(
            f"{name}: {v:.1%} (serial {a['serial_by_link'][name]:.0%})"
            for name, v in a["overlapped_by_link"].items()
        )
        + f"{_readings_note(a)}; no step with nothing overlapped reads under 10% in any reading "
        f"({min(_serial_shares(a)):.0%}–{max(_serial_shares(a)):.0%}), so the 10% line grades no "
        "serial step good; whether an overlapped step gets under it is the floor's (above)"
        + f". At the step model's margin for a switch (±{SWITCH_MARGIN:.0%}) the lowest serial share's low "
        f"end is {min(_serial_shares(a)) / (1 + SWITCH_MARGIN):.1%}, "
        + (
            "still over 10%; "
            if min(_serial_shares(a)) / (1 + SWITCH_MARGIN) >= GOOD_SHARE
            else "under 10%; "
        )
        + sweep,
        basis=verdicts.ASSUMED,  # §8 states the 8 cards and TP 8, not the model or the batch
    )
    links = ", ".join(f"{name}: {v:.0%}" for name, v in a["serial_by_link"].items())
    room = Claim(
        "A18",
        "communication over 25% of the step leaves room in scheduling or chunking (single machine, 8 "
        "cards, TP 8)",
        "the conditional (over 25% ⇒ room) on the article's named criterion, the exposed wait on the "
        "critical path (判断标准只有一个), at the stated configuration, with slower TP links and each "
        "reading of the 910B: it holds when the least any overlap leaves exposed (the last chunk's "
        "floor) lies under 25%; the profiler recipe read as the operators' total time is the next row's",
        a18_room_decision(a),
        f"{setting}: exposed time: the floor {min(_floors(a)):.1%}–{max(_floors(a)):.1%} over the readings, "
        "so a step over 25% has room in every one; context: read as the operators' total time, "
        f"{a['kernel_share_serial']:.0%} with nothing overlapped, {a['kernel_share_overlapped']:.0%} with "
        "the TP all-reduces overlapped (the same kernels in a shorter step), a figure that would flag the "
        "well-overlapped step as room; nothing overlapped: "
        f"{a['serial']:.0%} of the step, with a slower TP link (rates.Assumptions): {links}"
        + _readings_note(a),
        basis=verdicts.ASSUMED,  # §8 states the 8 cards and TP 8, not the model or the batch
    )
    return [good, room]
