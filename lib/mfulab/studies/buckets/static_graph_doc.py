"""Article B §2.2's wording on static_graph, against DDP's documentation (a row of its own,
beside the timed flags of ``flags``)."""

from __future__ import annotations

from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def static_graph_first_iteration() -> Claim:
    """Article B §2.2's wording, "static_graph=True ... 减少DDP第一次前向反向时对autograd图的重复分析开销",
    against DDP's documentation, at the article's own call (§2.2 and §5.2: ``gradient_as_bucket_view``
    and ``static_graph``, no ``find_unused_parameters``, so DDP's default False). The sentence reads
    two ways: the saving happens *in* DDP's first forward and backward (false: the first iteration
    is where static_graph records the graph), or the analysis DDP does at its first forward and
    backward is not *repeated* afterwards (the documented saving, but only where
    find_unused_parameters=True searches the graph every iteration; with the default there is no
    search to repeat). At the article's call both readings are false: refuted (documented
    specification); where find_unused_parameters=True, the second reading holds (the timed row
    beside it)."""
    return Claim(
        "B6",
        "static_graph reduces the repeated analysis of the autograd graph at DDP's first forward and "
        "backward (第一次前向反向时), in the article's DDP call",
        "PyTorch's DistributedDataParallel documentation (static_graph, find_unused_parameters) and its "
        "reducer, under both readings of the sentence, at the article's call (no find_unused_parameters: "
        "DDP's default False)",
        "refuted",
        "read as a saving in the first forward and backward: false, the first iteration is where "
        "static_graph records which parameters the graph uses (its all-reduce delayed to the end of "
        "that backward), so nothing is spared there; read as the first iteration's analysis not being "
        "repeated: the documented saving is that DDP 'will not search graph in each iteration to detect "
        "unused parameters', which it does only with find_unused_parameters=True; the article's call "
        "(§2.2, §5.2 step 2) leaves it at False, where DDP searches nothing after the first iteration, "
        "so there is no repeated analysis to reduce. Both readings false at the article's call; with "
        "find_unused_parameters=True the second would hold (the timed row beside it)",
        basis=verdicts.DOCUMENTED,
    )


def with_default_reading(c: Claim, table) -> Claim:
    """static_graph against the default flags is no claims row (with no per-step graph search
    there is nothing to spare, expected 1.00×: the flags table shows it); its reading goes into
    the evidence of the row that tests the claim, against find_unused_parameters=True."""
    plain = table[table.speed_verdict == "not checkable"]
    if "find_unused_parameters=True" not in c.claim or not len(plain):
        return c
    r = plain.iloc[0]
    extra = (
        f"; against the default flags, where DDP searches nothing, static_graph measures "
        f"{r.speedup:.3f}× [{r.lo:.3f}, {r.hi:.3f}] (expected 1.00×)"
    )
    return Claim(c.id, c.claim, c.measured, c.verdict, c.evidence + extra, c.basis)
