"""A4's bound that needs no step model: what gradient overlap alone can hide, over the global
batches the 32-card run could have used (it states none; the 8-card command's 32 is borrowed)."""

from __future__ import annotations

from mfulab.studies.overlap.stated import A4_STATED

BACKWARD_SHARE_OF_COMPUTE = 2 / 3  # a layer's backward does twice its forward's FLOPs (no recompute)
# The GEMMs a tensor-parallel all-reduce can hide under, as a share of a layer's linear FLOPs (TP
# without sequence parallelism, as the article's command runs; the weights per layer are QKV 3h²,
# attention out h², MLP up 4h² and down 4h², 12h² in all). Article A's overlap sends each part as
# soon as it is ready while the rest is computed (准备好一部分，就先把这一部分发出去): forward, the
# all-reduces after the row-parallel GEMMs (out h², down 4h²) hide under those GEMMs, 5/12 of the
# forward's linear FLOPs; backward, the input-gradient all-reduces hide under the weight-gradient
# GEMMs of QKV and MLP up (3h² + 4h², 7/12 of the weight-gradient FLOPs). Forward, input gradients
# and weight gradients each do a third of the linear FLOPs, so the window is (5/12 + 7/12) / 3 = 1/3
# of them (round 33's reader of chapter 02). With sequence parallelism the all-gathers before the
# column-parallel GEMMs would hide too and the window would grow; the command does not set it.
TP_GEMM_WINDOW_SHARE = (5 / 12 + 7 / 12) / 3


def a4_grad_overlap_bound(m: dict) -> dict:
    """What gradient overlap alone (``--overlap-grad-reduce``, the one overlap flag the article's
    command prints) can save at most, with few assumptions: under gradient accumulation the buckets
    are reduced during the last micro-batch's backward only, so the most they can hide is that
    backward, ``BACKWARD_SHARE_OF_COMPUTE`` of one micro-batch's compute: at the modelled compute,
    and with the article's whole 2.1 s overlapped step taken as compute (an upper bound that needs
    no step model: overlap does not change the compute, and the overlapped step holds all of it).
    Either against the ≥ 1.1 s the article saved says whether the saving can come from gradient
    overlap at all."""
    m_steps = m["accumulation_steps"]
    modelled_s = m["compute_s"] * BACKWARD_SHARE_OF_COMPUTE / m_steps
    model_free_s = A4_STATED["step_after_s"] * BACKWARD_SHARE_OF_COMPUTE / m_steps
    saved_s = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    return {
        "micro_batches": m_steps,
        "bound_modelled_s": modelled_s,
        "bound_model_free_s": model_free_s,
        "saved_s": saved_s,
        "can_account": model_free_s >= saved_s,
    }


# the global batches the bound is read at: the command's 32 (borrowed from the 8-card command) with
# half, a quarter and twice it, and the smallest the 32-card layout allows (one micro-batch per DP rank)
A4_BOUND_GLOBAL_BATCHES = (8, 16, 32, 64)


def a4_bound_over_batches(cards: int) -> list[dict]:
    """:func:`a4_grad_overlap_bound`'s model-free bound at each global batch: the micro-batches per
    DP rank are global batch ÷ (micro-batch × DP), DP = cards ÷ (TP · PP); the smallest batch, one
    micro-batch per rank, first."""
    dp = cards // (A4_STATED["tp"] * A4_STATED["pp"])
    smallest = A4_STATED["micro_batch"] * dp
    out = []
    for global_batch in sorted({smallest, *A4_BOUND_GLOBAL_BATCHES}):
        m = global_batch // (A4_STATED["micro_batch"] * dp)
        if m < 1:
            continue
        b = a4_grad_overlap_bound({"compute_s": float("nan"), "accumulation_steps": m})
        out.append({"global_batch": global_batch, **b})
    return out


def a4_bound_text(cards: int, stated_batch: int) -> str:
    """The bound at each global batch, in words, the command's batch marked."""
    rows = a4_bound_over_batches(cards)
    return ", ".join(
        f"{r['bound_model_free_s']:.2f} s at global batch {r['global_batch']}"
        + (" (the command's)" if r["global_batch"] == stated_batch else "")
        for r in rows
    )


def a4_saving_bound(p: dict, k: int, **change) -> dict:
    """The most the article's overlap can save without the step model's hiding assumptions
    (round fifteen's reader of chapter 02): the saving is the communication hidden, and of it

        dp_hideable_s = min(DP comm, ⅔ of the last micro-batch's compute, the whole 2.1 s
                            overlapped step as compute)
        tp_hideable_s = min(TP comm − the last chunk of every forward TP all-reduce
                            (``exposed_share.tp_floor_s``, the floor A18 keeps too),
                            ``TP_GEMM_WINDOW_SHARE`` of the 2.1 s step as GEMMs)
        bound_s       = dp_hideable_s + tp_hideable_s

    at ``k`` chunks per TP all-reduce: a chunked all-reduce that the next layer depends on cannot
    hide its last chunk, which pays a whole call's latency and 1/k of its transfer. The TP and DP
    seconds are the link model's (α–β per call, ``step_at_scale.a4_model``'s own terms), nothing of
    the step model's compute or hidden shares. ``change``: assumed inputs of a sensitivity reading
    (a slower link, a reading of the extrapolated card), applied to the baseline."""
    from mfulab.studies.overlap.exposed_share import tp_floor_s as forward_floor_s
    from mfulab.studies.overlap.step_at_scale import a4_baseline, a4_model

    case = {**a4_baseline(p), **change}
    m = a4_model(**case)
    grad = a4_grad_overlap_bound({"compute_s": m["compute_s"], "accumulation_steps": m["accumulation_steps"]})
    # DeepSpeed's ZeRO-2 reduces every micro-batch's gradients under that micro-batch's backward:
    # its window is every backward of the step, not the last one's
    per_micro_batch = case.get("framework") == "deepspeed" and case.get("zero_stage", 0) >= 2
    window_s = grad["bound_model_free_s"] * (grad["micro_batches"] if per_micro_batch else 1)
    dp_hideable_s = min(m["dp_comm_s"], window_s)
    tp_floor_s = forward_floor_s(case, m, k)
    tp_window_s = TP_GEMM_WINDOW_SHARE * A4_STATED["step_after_s"]  # every second of the step a GEMM
    tp_hideable_s = min(m["tp_comm_s"] - tp_floor_s, tp_window_s)
    needed_s = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    bound_s = dp_hideable_s + tp_hideable_s
    return {
        "k": k,
        "tp_comm_s": m["tp_comm_s"],
        "tp_floor_s": tp_floor_s,
        "tp_window_s": tp_window_s,
        "tp_hideable_s": tp_hideable_s,
        "dp_comm_s": m["dp_comm_s"],
        "dp_hideable_s": dp_hideable_s,
        "bound_s": bound_s,
        "needed_s": needed_s,
        "model_saved_s": m["saved_s"],
        "can_save": bound_s >= needed_s,
    }


A4_BOUND_K = 8  # the most chunks of the article's 4–8 (§2.2): the largest saving the bound allows


def a4_bound_readings(p: dict, k: int = A4_BOUND_K) -> dict:
    """:func:`a4_saving_bound` in the stated case and in every assumed reading that moves it: the
    slower TP links of A18 (``exposed_share.A18_LINK_READINGS``), each reading of the
    extrapolated card (``extrapolated.device_readings``) and the DP framework and gradient
    precision the run does not state (round thirty-five's reader of chapter 02: the command's
    --zero-stage 2 read as DeepSpeed's reduces every micro-batch, each under its own backward);
    with the fastest TP link at which the bound still reaches the article's saving
    (``step_at_scale.a4_saving_frontier``)."""
    from mfulab.analytic import extrapolated
    from mfulab.studies.overlap.exposed_share import A18_LINK_READINGS
    from mfulab.studies.overlap.step_at_scale import a4_saving_frontier

    readings = {
        "stated case": {},
        **A18_LINK_READINGS,
        **extrapolated.device_readings(p["article_device"]),
        # the DP framework the 32-card run does not state: the 8-card command's --zero-stage 2 read
        # as DeepSpeed's (a reduction per micro-batch, each under its own backward), in fp32 and bf16
        "DP framework: --zero-stage 2 as DeepSpeed's": {"framework": "deepspeed", "zero_stage": 2},
        "DP framework: --zero-stage 2 as DeepSpeed's, bf16 gradients": {
            "framework": "deepspeed",
            "zero_stage": 2,
            "grad_bytes_per_elem": 2,
        },
        "gradient reduction in bf16 (--grad-reduce-in-bf16)": {"grad_bytes_per_elem": 2},
    }
    rows = {name: a4_saving_bound(p, k, **change) for name, change in readings.items()}
    frontier = a4_saving_frontier(p, saved_fn=lambda change: a4_saving_bound(p, k, **change)["bound_s"])
    return {"k": k, "rows": rows, "frontier_bytes_per_s": frontier["frontier_bytes_per_s"]}


def a4_bound_decision(b: dict) -> str | None:
    """The bound's own answer: refuted (analysis) when it stays under the article's saving in every
    reading (no overlap of the kind described can save 1.1 s); None (the step model decides)
    where any reading lets it."""
    return None if any(r["can_save"] for r in b["rows"].values()) else "refuted"


def a4_bound_lead(b: dict) -> str:
    """The chain in one sentence, for the head of A4's evidence."""
    s = b["rows"]["stated case"]
    open_ = [name for name, r in b["rows"].items() if r["can_save"]]
    frontier = b["frontier_bytes_per_s"]
    return (
        f"bound without the step model: the overlap saves only the communication it hides, at most "
        f"{s['dp_hideable_s']:.2f} s of the gradient reduction (⅔ of the last micro-batch's backward) plus "
        f"{s['tp_hideable_s']:.2f} s of the TP all-reduces ({s['tp_comm_s']:.2f} s less the last of "
        f"{b['k']} chunks of the forward's, {s['tp_floor_s']:.2f} s, which the next layer waits for, and "
        f"no more than the GEMMs they can hide under, a third of the linear FLOPs: "
        f"{s['tp_window_s']:.2f} s even were the whole 2.1 s step GEMMs): {s['bound_s']:.2f} s "
        f"against the {s['needed_s']:.1f} s saved (the step model, which keeps no last chunk, saves "
        f"{s['model_saved_s']:.2f} s)"
        + (
            f"; the bound reaches it only where the TP link's table figure is ≤ {frontier / 1e9:.0f} GB/s "
            "per direction (before the link efficiency)"
            if frontier
            else ""
        )
        + (
            f"; it reaches it in the reading{'s' if len(open_) > 1 else ''} {', '.join(open_)}, so the "
            "bound does not decide"
            if open_
            else f"; it stays under it in all {len(b['rows'])} readings"
        )
    )


def a4_bound_table(b: dict):
    """:func:`a4_bound_readings` as a table, one row per reading (seconds per step)."""
    import pandas as pd

    cols = ("tp_comm_s", "tp_floor_s", "tp_window_s", "tp_hideable_s", "dp_comm_s", "dp_hideable_s")
    cols += ("bound_s", "needed_s")
    return pd.DataFrame(
        [
            {"reading": name, **{c: r[c] for c in cols}, "can_save": r["can_save"]}
            for name, r in b["rows"].items()
        ]
    )
