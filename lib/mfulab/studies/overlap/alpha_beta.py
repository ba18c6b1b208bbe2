"""The α–β models of this study: chunked overlap, and the articles' scale (A4, A5) with the
sensitivity of each conclusion to the assumed inputs.

**Chunked overlap** (``chunked_overlap``): compute of total time C produces a tensor of S bytes
in k equal chunks; chunk i is ready at i·C/k and its all-reduce (ring α–β cost of S/k bytes,
``comm.ring_all_reduce_time``) starts as soon as the chunk is ready *and* the previous
all-reduce has finished (one communication channel). The step ends when the last all-reduce
ends. Bounds: max(C, M_k) ≤ step ≤ C + M_k, with M_k = k·t(S/k) the communication time per
step, which grows with k because every call pays the latency 2(n−1)·α again (claim A5).

**A4** lives in ``step_at_scale`` (the step model at the article's configuration); ``article_scale``
sums A4 and A5 up.

**A5** (``a5_model``): the 200 MB tensor's communication per step at 4 and 16 chunks, k·t(S/k),
and the model's best k with compute proportional to the one-shot all-reduce. Accumulation
steps do not enter: they change how often the tensor is reduced, not what one reduction costs.
"""

from __future__ import annotations

from mfulab.analytic import comm, rates
from mfulab.analytic.devices import device_spec
from mfulab.errors import ParameterError
from mfulab.studies.overlap.stated import (
    A4_STATED,
    A5_MINDSPEED_COC,
    A5_REASONABLE_STEP_SHARE,
    A5_STATED,
    B9_STATED,
    B9_STEP_AFTER_S,
    B9_STEP_BEFORE_S,
)
from mfulab.studies.overlap.step_at_scale import (
    ALPHAS_S,
    CALL_OVERHEADS_S,
    IB_EDR_BYTES_PER_S,
    IB_HDR_BYTES_PER_S,
    NVLINK3_BYTES_PER_S,
    a4_baseline,
    a4_model,
    a4_reading,
)
from mfulab.units import GB


# ---------------------------------------------------------------------------- chunked overlap
def chunked_overlap(
    *, compute_s: float, nbytes: float, k: int, n: int, alpha_s: float, link_bytes_per_s: float, call_s=None
) -> dict:
    """Step time and exposed communication of k-chunk overlap (module docstring), with the
    per-chunk schedule for a timeline. ``call_s(nbytes)``, when given, prices one all-reduce
    (e.g. NCCL's cost model, :func:`a5_call`) in place of the ring α–β cost."""
    if k < 1:
        raise ParameterError("k must be at least 1")
    chunk_comm_s = (
        call_s(nbytes / k)
        if call_s is not None
        else comm.ring_all_reduce_time(nbytes / k, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s)
    )
    ready = [i * compute_s / k for i in range(1, k + 1)]
    channel = comm.fifo_channel(ready, [chunk_comm_s] * k)
    schedule = [
        {
            "chunk": i,
            "compute_start_s": i * compute_s / k,
            "compute_end_s": ready[i],
            "comm_start_s": start,
            "comm_end_s": end,
        }
        for i, (start, end) in enumerate(channel)
    ]
    comm_end = channel[-1][1]
    total_comm = k * chunk_comm_s
    step = max(compute_s, comm_end)
    return {
        "k": k,
        "step_s": step,
        "exposed_comm_s": step - compute_s,
        "total_comm_s": total_comm,
        "lower_bound_s": max(compute_s, total_comm),
        "upper_bound_s": compute_s + total_comm,
        "schedule": schedule,
    }


def best_chunks(
    *, compute_s, nbytes, n, alpha_s, link_bytes_per_s, ks=tuple(2**i for i in range(11)), call_s=None
) -> dict:
    rows = [
        chunked_overlap(
            compute_s=compute_s,
            nbytes=nbytes,
            k=k,
            n=n,
            alpha_s=alpha_s,
            link_bytes_per_s=link_bytes_per_s,
            call_s=call_s,
        )
        for k in ks
    ]
    best = min(rows, key=lambda r: r["step_s"])
    return {"best_k": best["k"], "rows": rows}


# ---------------------------------------------------------------------------- A5
def a5_call(
    *,
    n: int,
    n_nodes: int,
    link_bytes_per_s: float,
    alpha_s: float | None = None,
    call_overhead_s: float = 0.0,
):
    """One all-reduce's seconds and its per-call (latency) part, as functions of its bytes: NCCL's
    cost model (``comm.nccl_call_s``: the faster of ring and tree, with the step model's
    latencies, ``rates.Assumptions.nccl_latencies``), the course's one model of a collective; or,
    with ``alpha_s``, a ring alone with that per-step latency (``NCCL_ALGO=Ring``, the α–β model
    the chapter measures here), a sensitivity row. ``call_overhead_s``: a fixed cost added to
    every call (a collective library heavier per call than NCCL's model, a sensitivity row)."""
    if alpha_s is not None:

        def ring_s(size):
            return comm.ring_all_reduce_time(size, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s)

        return (
            lambda size: ring_s(size) + call_overhead_s,
            lambda size: 2 * (n - 1) * alpha_s + call_overhead_s,
        )
    lat = rates.Assumptions().nccl_latencies()

    def call_s(size):
        return comm.nccl_call_s("all_reduce", size, n, n_nodes, link_bytes_per_s=link_bytes_per_s, **lat)

    def latency_s(size):
        algorithm = call_s(size)[1]
        return comm.nccl_latency_s("all_reduce", n, n_nodes, **lat)[algorithm] + call_overhead_s

    return (lambda size: call_s(size)[0] + call_overhead_s), latency_s


def a5_model(
    *,
    n: int,
    link_bytes_per_s: float,
    n_nodes: int | None = None,
    alpha_s: float | None = None,
    compute_over_comm: float = 1.0,
    call_overhead_s: float = 0.0,
) -> dict:
    """200 MB over n ranks on ``n_nodes`` nodes: communication per step at k = 4 and 16
    (k·t(S/k)), the share of one 16-chunk call that is per-call latency, and the model's best k
    with compute equal to ``compute_over_comm`` × the one-shot all-reduce. ``t`` is
    :func:`a5_call`'s: NCCL's cost model, or a ring with per-step ``alpha_s``."""
    nbytes = A5_STATED["nbytes"]
    n_nodes = n_nodes or 1
    t, latency = a5_call(
        n=n,
        n_nodes=n_nodes,
        link_bytes_per_s=link_bytes_per_s,
        alpha_s=alpha_s,
        call_overhead_s=call_overhead_s,
    )
    one_shot_s = t(nbytes)
    best = best_chunks(
        compute_s=compute_over_comm * one_shot_s,
        nbytes=nbytes,
        n=n,
        alpha_s=alpha_s or 0.0,
        link_bytes_per_s=link_bytes_per_s,
        ks=A5_STATED["chunks"],
        call_s=t,
    )
    steps = {r["k"]: r["step_s"] for r in best["rows"]}
    return {
        "one_shot_s": one_shot_s,
        "comm_k4_s": 4 * t(nbytes / 4),
        "comm_k16_s": 16 * t(nbytes / 16),
        "ratio_16_over_4": 16 * t(nbytes / 16) / (4 * t(nbytes / 4)),
        "latency_share_k16": latency(nbytes / 16) / t(nbytes / 16),
        "best_k": best["best_k"],
        "steps_s": steps,
        # how far the article's range lies from the best k: its slowest k's step over the best's
        "range_gap": max(steps[k] for k in A5_STATED["best_chunks"]) / steps[best["best_k"]] - 1,
        # the looser reading (a round-fifteen reader's): the range's best k against the best k
        "range_best_gap": min(steps[k] for k in A5_STATED["best_chunks"]) / steps[best["best_k"]] - 1,
    }


def a5_baseline(p: dict) -> dict:
    """A5's stated case, A4's run: 200 MB of gradients over the data-parallel ranks of
    ``article_n`` cards at A4's TP (``A4_STATED["tp"]``: TP 8 fills a node, so 4 DP ranks, one per
    node), on ``article_n ÷ article_gpus_per_node`` nodes and the ``article_link_bytes_per_s``
    network, priced by NCCL's cost model."""
    return {
        "n": max(2, p["article_n"] // A4_STATED["tp"]),
        "n_nodes": max(1, p["article_n"] // p["article_gpus_per_node"]),
        # the step model's achieved share of a link's line rate, as A4 prices the same port
        "link_bytes_per_s": LINK_EFFICIENCY * p["article_link_bytes_per_s"],
    }


# the step model's link efficiency (rates.Assumptions: NCCL busbw over line rate), applied to every
# link A5 prices, as A4 does; the raw line rate is a sensitivity row
LINK_EFFICIENCY = rates.Assumptions().link_efficiency


def a5_sensitivity(p: dict):
    """One row per assumed input varied alone from the baseline (200 MB, ``article_*``): the
    communication at 4 and 16 chunks, the model's best k, and whether the two readings of the
    claim (16 slower than 4; best k in 4–8) hold. A value equal to the baseline's own input is
    left out (it would restate the baseline and vote twice)."""
    import pandas as pd

    node = p["article_gpus_per_node"]
    base = a5_baseline(p)
    hccs_bytes_per_s = device_spec("ascend-910b").intra_node_bytes_per_s
    cases = [("baseline", "", {})]
    cases += [
        ("algorithm: ring only (NCCL_ALGO=Ring), per-step latency α", f"{a * 1e6:.0f} µs", {"alpha_s": a})
        for a in sorted({*ALPHAS_S, p["article_alpha_s"]})
    ]
    cases += [
        ("link efficiency", "1.0 (the raw line rate)", {"link_bytes_per_s": p["article_link_bytes_per_s"]}),
        ("link", "InfiniBand HDR 25 GB/s", {"link_bytes_per_s": LINK_EFFICIENCY * IB_HDR_BYTES_PER_S}),
        ("link", "InfiniBand EDR 12.5 GB/s", {"link_bytes_per_s": LINK_EFFICIENCY * IB_EDR_BYTES_PER_S}),
        (
            "link",
            f"NVLink 3, 300 GB/s ({node} ranks, one node)",
            {"link_bytes_per_s": LINK_EFFICIENCY * NVLINK3_BYTES_PER_S, "n": node, "n_nodes": 1},
        ),
        (  # §2.2's own setting: TP inside one 910B node, over HCCS (devices.yaml, approximate)
            "link",
            f"HCCS {hccs_bytes_per_s / 1e9:.0f} GB/s, Ascend 910B ({node} ranks, one node; approximate)",
            {"link_bytes_per_s": LINK_EFFICIENCY * hccs_bytes_per_s, "n": node, "n_nodes": 1},
        ),
    ]
    cases += [
        ("compute ÷ one-shot comm (efficiency)", f"{r:g}", {"compute_over_comm": r}) for r in (0.5, 1.0, 2.0)
    ]
    cases += [  # the article's library is HCCL on 910B cards, whose fixed cost per call is not published
        (
            "fixed cost per call added (a heavier library than NCCL's model: HCCL's is unpublished)",
            f"{o * 1e6:.0f} µs",
            {"call_overhead_s": o},
        )
        for o in CALL_OVERHEADS_S
    ]
    cases += [
        (
            "layout: DP ranks (pure data parallelism)",
            f"{p['article_n'] // tp} (TP = {tp})",
            {"n": p["article_n"] // tp, "n_nodes": base["n_nodes"]},
        )
        for tp in (1, 2)
        if p["article_n"] // tp >= 2 and tp != A4_STATED["tp"]
    ]
    rows = []
    for varied, value, change in cases:
        defaults = {"compute_over_comm": 1.0}  # a5_model's own default, the baseline's
        if varied != "baseline" and all(base.get(k, defaults.get(k)) == v for k, v in change.items()):
            continue  # the baseline's own input restated: it would vote twice
        m = a5_model(**{**base, **change})
        rows.append(
            {
                "varied": varied,
                "value": value,
                "comm_k4_s": m["comm_k4_s"],
                "comm_k16_s": m["comm_k16_s"],
                "ratio_16_over_4": m["ratio_16_over_4"],
                "latency_share_k16": m["latency_share_k16"],
                "best_k": m["best_k"],
                "k16_slower_than_k4": m["ratio_16_over_4"] > 1,
                "best_k_in_4_to_8": min(A5_STATED["best_chunks"])
                <= m["best_k"]
                <= max(A5_STATED["best_chunks"]),
                "range_gap": m["range_gap"],
                "range_reasonable": m["range_gap"] <= A5_REASONABLE_STEP_SHARE,
                "range_best_gap": m["range_best_gap"],
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- summaries (A4, A5, B9)
def article_scale(records) -> dict:
    """A4 on the step model (``article_device``'s figures) and A5 with the stated α–β link
    (parameters ``article_*``)."""
    p = records["params"]
    a4 = a4_model(**a4_baseline(p))
    a5 = a5_model(**a5_baseline(p))
    saved = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    return {
        "n": p["article_n"],
        "alpha_s": p["article_alpha_s"],
        "link_bytes_per_s": p["article_link_bytes_per_s"],
        "a4_device": p["article_device"],
        "a4_implied_min_comm_s": saved,
        "a4_implied_min_comm_share": saved / A4_STATED["step_before_s"],
        **{f"a4_{k}": v for k, v in a4.items() if k != "sources"},
        "a4_tp_link": a4["sources"]["intra_node"],
        "a4_tp_link_gb_per_s": device_spec(p["article_device"]).intra_node_bytes_per_s / GB,
        "a4_dp_link": a4["sources"]["inter_node"],
        "a4_reading": a4_reading(a4),
        **{f"a5_{k}": v for k, v in a5.items()},
        "a5_dp": a5_baseline(p)["n"],
    }


def b9_check(records) -> dict:
    """B9: 11 → 21 GB/s busbw against a 25 GB/s link, with and without the article's ×2."""
    link = B9_STATED["link_bytes_per_s"]
    before, after = B9_STATED["busbw_before_bytes_per_s"], B9_STATED["busbw_after_bytes_per_s"]
    # B15's step from this change; if the exposed comm time T scaled as 1/busbw
    saved = B9_STEP_BEFORE_S - B9_STEP_AFTER_S
    exposed_before = saved / (1 - before / after)
    return {
        "link_bytes_per_s": link,
        "efficiency_before": before / link,
        "efficiency_after": after / link,
        "article_x2_before": 2 * before / link,
        "article_x2_after": 2 * after / link,
        "step_before_s": B9_STEP_BEFORE_S,
        "step_after_s": B9_STEP_AFTER_S,
        "implied_exposed_comm_before_s": exposed_before,
        "step_gain": saved / B9_STEP_BEFORE_S,
    }


def a5_scale_claims(art: dict, sens) -> list:
    """A5 at the article's scale (200 MB of gradients over A4's DP ranks, the ``article_*``
    α and link), one row per half of the sentence. "16 chunks communicate longer than 4" holds by
    construction of an α–β model (the bandwidth term does not depend on k, the per-call term grows
    with it): *shown (by construction)*, every sensitivity row's ratio beside it. "4–8 chunks are a
    reasonable range" (every k of 4–8 steps within ``stated.A5_REASONABLE_STEP_SHARE`` of the best
    k's step) depends on α, the link and the compute: confirmed (analysis) when every sensitivity
    row says yes, refuted (analysis) when none does, analytic only otherwise (until 2026-12-07 the
    two halves were one row). Whether the best k itself lies in 4–8 (the stricter reading) is
    reported beside it."""
    from mfulab.studykit import verdicts
    from mfulab.studykit.verdicts import Claim

    lo, hi = A5_STATED["best_chunks"]
    changed = [
        f"{r.varied} {r.value} ({r.range_gap:.0%} over best k {r.best_k})"
        for r in sens.itertuples()
        if not r.range_reasonable
    ]
    stated = sens.iloc[0]
    setting = (
        "NCCL's cost model as a proxy for the article's HCCL, whose per-call costs are unpublished "
        "(comm.nccl_call_s: the faster of ring and tree, the step model's latencies): "
        f"{A5_STATED['nbytes'] / 1e6:.0f} MB over the {art['a5_dp']} DP ranks of A4's {art['n']} cards at "
        f"its TP {A4_STATED['tp']} (the article calls it a gradient tensor in §2.2's TP context; read as DP "
        "gradients), "
        f"{LINK_EFFICIENCY:g} × {art['link_bytes_per_s'] / GB:.0f} GB/s per direction (the step model's link "
        "efficiency × the 910B's 200 Gb/s RoCE per card, devices.yaml, as A4 prices it), compute equal "
        "to the one-shot all-reduce (assumed); a ring alone with 2–20 µs "
        "per step, a fixed cost of 50 and 100 µs added to every call, the links and the compute varied "
        "in the sensitivity rows"
    )
    lengthens = Claim(
        "A5",
        "at the article's scale 4 → 16 chunks lengthens the communication",
        setting + "; the communication per step k·(per-call latency + bytes / k / bandwidth) grows with k "
        "whatever the inputs: true by construction",
        "confirmed",  # by construction: shown
        f"16 chunks take {art['a5_ratio_16_over_4']:.2f}× the communication of 4 (12 more calls' latency; "
        f"per-call share of one 16-chunk call {art['a5_latency_share_k16']:.0%}); 16 slower than 4 in "
        f"{int(sens.k16_slower_than_k4.sum())} of {len(sens)} sensitivity rows",
        basis=verdicts.CONSTRUCTION,
    )
    reasonable = Claim(
        "A5",
        f"at the article's scale {lo}–{hi} chunks are a reasonable range",
        setting + f"; reasonable: every k of {lo}–{hi} steps within {A5_REASONABLE_STEP_SHARE:.0%} of the "
        "best k's step, in every sensitivity row",
        verdicts.over_scenarios(sens.range_reasonable),
        f"best k {art['a5_best_k']}, and the slower of k = {lo} and {hi} "
        f"steps {stated.range_gap:.1%} over it; {lo}–{hi} within "
        f"{A5_REASONABLE_STEP_SHARE:.0%} of the best in {int(sens.range_reasonable.sum())} of {len(sens)} "
        f"sensitivity rows (not under: {', '.join(changed) or 'none'}); the stricter reading, the best k "
        f"itself in {lo}–{hi}, holds in {int(sens.best_k_in_4_to_8.sum())} of {len(sens)}; the looser one, "
        f"the better of k = {lo} and {hi} within {A5_REASONABLE_STEP_SHARE:.0%} of the best, in "
        f"{int((sens.range_best_gap <= A5_REASONABLE_STEP_SHARE).sum())} of {len(sens)} (stated case "
        f"{stated.range_best_gap:.1%}: at balanced compute k = {lo} leaves a quarter chunk's tail exposed, "
        "which no latency removes); documented beside it (not voted): the "
        f"article's stack offers {', '.join(map(str, A5_MINDSPEED_COC['splits']))} pieces and warns that its "
        "script-side split turns host-bound when the pieces are many, a cost of many chunks this model "
        f"does not price ({A5_MINDSPEED_COC['source']})",
        basis=verdicts.ASSUMED,  # DP group, library, compute and "reasonable": the article states none
    )
    return [lengthens, reasonable]
