"""The size of the autograd graph DDP searches every step with ``find_unused_parameters=True``
(reducer.cpp, ``search_unused_parameters``: a traversal from the outputs over every node), for
B6's bound at scale: this study's toy stack, and one layer of article B's 7B model at a width
that changes nothing in the graph's shape (the node count does not depend on the width)."""

from __future__ import annotations

from mfulab.analytic.config import preset

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


def stack_nodes(layers: int, hidden: int) -> int:
    """Nodes of the toy stack's graph (``bench.build_stack``) for one batch."""
    import torch

    from mfulab.studies.buckets.bench import build_stack

    model = build_stack(layers, hidden)
    return count_nodes(model(torch.randn(2, hidden)).sum())


def gpt_nodes(preset_name: str) -> dict:
    """Nodes of the course's GPT (``measure.gpt.GPT``) with ``preset_name``'s layer structure:
    per layer (2 layers minus 1), the rest (embedding, final norm, head, loss), and the whole
    model at the preset's depth."""
    import torch

    from mfulab.measure.gpt import GPT

    base = preset(preset_name)
    counts = {}
    for n_layers in (1, 2):
        cfg = base.with_(n_layers=n_layers, **GRAPH_WIDTH)
        idx = torch.randint(0, cfg.vocab_size, (1, cfg.seq_len))
        _, loss = GPT(cfg)(idx, idx)
        counts[n_layers] = count_nodes(loss)
    per_layer = counts[2] - counts[1]
    rest = counts[1] - per_layer
    return {"per_layer": per_layer, "rest": rest, "total": rest + per_layer * base.n_layers}
