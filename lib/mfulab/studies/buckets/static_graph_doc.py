"""Article B §2.2's wording on static_graph, against DDP's documentation (a row of its own,
beside the timed flags of ``flags``)."""

from __future__ import annotations

from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def static_graph_first_iteration() -> Claim:
    """Article B §2.2's wording, "static_graph=True ... 减少DDP第一次前向反向时对autograd图的重复分析开销",
    against DDP's documentation. The sentence reads two ways: the saving happens *in* DDP's first
    forward and backward (false: the first iteration is where static_graph records the graph),
    or the analysis DDP does at its first forward and backward is not *repeated* afterwards (true
    where find_unused_parameters=True would search every iteration). The readings disagree: not
    checkable, both in the evidence."""
    return Claim(
        "B6",
        "static_graph reduces the repeated analysis of the autograd graph at DDP's first forward and "
        "backward (第一次前向反向时)",
        "PyTorch's DistributedDataParallel documentation (static_graph) and its reducer, under both "
        "readings of the sentence",
        "not checkable",
        "read as a saving in the first forward and backward: false, the first iteration is where "
        "static_graph records which parameters the graph uses (its all-reduce delayed to the end of "
        "that backward), so nothing is spared there; read as the first iteration's analysis not being "
        "repeated: true, the documented saving is that DDP 'will not search graph in each iteration to "
        "detect unused parameters', every iteration after the first, where find_unused_parameters=True "
        "would search. The readings disagree",
        basis=verdicts.DOCUMENTED,
    )
