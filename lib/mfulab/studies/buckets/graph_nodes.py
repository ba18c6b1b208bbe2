"""The autograd graph DDP searches every step with ``find_unused_parameters=True``
(reducer.cpp, ``search_unused_parameters``: a C++ walk from the outputs over every node), for
B6's bound at scale: this study's toy stack, and article B's 7B model's layer structure at a
width that changes nothing in the graph's shape (the node count does not depend on the width),
with the time a Python walk over it takes here (an upper bound on DDP's C++ walk)."""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.studies.buckets.stated import B6_ARTICLE

GRAPH_WIDTH = {"d_model": 64, "n_heads": 4, "n_kv_heads": 4, "d_ff": 176, "seq_len": 16, "vocab_size": 256}


def count_nodes(loss) -> int:
    """Distinct autograd nodes reachable from ``loss.grad_fn`` (AccumulateGrad included)."""
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return len(seen)


WALK_REPEATS = 7


def gpt_nodes(preset_name: str) -> dict:
    """Nodes of the course's GPT (``measure.gpt.GPT``) with ``preset_name``'s layer structure:
    per layer (2 layers minus 1), the rest (embedding, final norm, head, loss), the whole model
    at the preset's depth (built at that depth, counted), and ``walk_s``: the median time of a
    Python walk over that whole graph (:func:`count_nodes`, ``WALK_REPEATS`` times). DDP's own
    search is a C++ breadth-first walk over the same nodes (reducer.cpp), which a Python walk,
    paying an interpreter round trip per node, does not beat: an upper bound on its cost."""
    import statistics
    import time

    import torch

    from mfulab.measure.gpt import GPT

    base = preset(preset_name)
    counts, losses = {}, {}
    torch.manual_seed(0)
    for n_layers in (1, 2, base.n_layers):
        cfg = base.with_(n_layers=n_layers, **GRAPH_WIDTH)
        idx = torch.randint(0, cfg.vocab_size, (1, cfg.seq_len))
        _, losses[n_layers] = GPT(cfg)(idx, idx)
        counts[n_layers] = count_nodes(losses[n_layers])
    walks = []
    for _ in range(WALK_REPEATS):
        t0 = time.perf_counter()
        count_nodes(losses[base.n_layers])
        walks.append(time.perf_counter() - t0)
    per_layer = counts[2] - counts[1]
    return {
        "per_layer": per_layer,
        "rest": counts[1] - per_layer,
        "total": counts[base.n_layers],
        "walk_s": statistics.median(walks),
    }


def search_bound_at_scale(records) -> dict | None:
    """What static_graph could save in article B's 7B step with ``find_unused_parameters=True``:
    DDP's per-step search is a C++ walk over every autograd node (reducer.cpp), and a Python walk
    over the 7B's graph (``graph_nodes.gpt_nodes``: its layer structure at a small width, the
    same nodes; TP keeps the graph's shape), timed here, bounds it from above. None without the
    walk (records from before it)."""
    article = (records.get("graph_nodes") or {}).get("article") or {}
    if "walk_s" not in article:
        return None
    return {
        "article_nodes": article["total"],
        "walk_s": article["walk_s"],
        "per_node_s": article["walk_s"] / article["total"],
        "share": article["walk_s"] / B6_ARTICLE["step_s"],
    }
