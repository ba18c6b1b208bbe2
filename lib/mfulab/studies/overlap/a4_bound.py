"""A4's bound that needs no step model: what gradient overlap alone can hide, over the global
batches the 32-card run could have used (it states none; the 8-card command's 32 is borrowed)."""

from __future__ import annotations

from mfulab.studies.overlap.stated import A4_STATED

BACKWARD_SHARE_OF_COMPUTE = 2 / 3  # a layer's backward does twice its forward's FLOPs (no recompute)


def a4_grad_overlap_bound(m: dict) -> dict:
    """What gradient overlap alone (``--overlap-grad-reduce``, the one overlap flag the article's
    command prints) can save at most, with few assumptions: under gradient accumulation the buckets
    are reduced during the last micro-batch's backward only, so the most they can hide is that
    backward, ``BACKWARD_SHARE_OF_COMPUTE`` of one micro-batch's compute: at the modelled compute,
    and with the article's whole 3.2 s serial step taken as compute (an upper bound that needs no
    step model). Either against the ≥ 1.1 s the article saved says whether the saving can come
    from gradient overlap at all."""
    m_steps = m["accumulation_steps"]
    modelled_s = m["compute_s"] * BACKWARD_SHARE_OF_COMPUTE / m_steps
    model_free_s = A4_STATED["step_before_s"] * BACKWARD_SHARE_OF_COMPUTE / m_steps
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
