"""The chapter's lesson in one rule: how large a bucket must be before a call's latency stops
mattering, from the course's one collective cost model (``comm.nccl_call_s``, NCCL's own latency
model and the link's bandwidth).

One all-reduce of S bytes over n ranks costs its latency L (the algorithm's, by NCCL's model)
plus its transfer, f · S ÷ B (f the algorithm's bytes factor: 2(n − 1)/n for a ring, 2 for a
tree; B the link per GPU). The latency is at most ``share`` of the transfer when

    S ≥ L · B ÷ (share · f)          (share = 0.1: S ≳ 5 · L · B for f ≈ 2)

Below that size the calls' count is what a bucket cap buys; above it the cap only delays the
first call. Megatron-Core's default, max(40M, 1M · DP) parameters (``comm.MEGATRON_*``), grows
with the DP width for that reason; the article's 20–40 MB does not.
"""

from __future__ import annotations

from mfulab.analytic import comm
from mfulab.analytic.devices import device_spec
from mfulab.analytic.rates import Assumptions

LATENCY_SHARE = 0.1  # the latency at most a tenth of the transfer (our line)
GPUS_PER_NODE = 8
# one 200 Gb/s port per GPU: devices.yaml's A100 inter-node figure (25 GB/s)
LINK_GB_PER_S = device_spec("a100").inter_node_bytes_per_s / 1e9
DP_WIDTHS = (16, 64, 128, 256, 1024)
# The DP group's layout: pure data parallelism packs 8 DP ranks in a node; at the articles' TP 8
# (A6's 13B, the simulator's scale case) each node holds one rank of the DP group, so every ring
# step crosses nodes. The lesson prices both with the latencies the scale case uses.
TP_LAYOUTS = (1, 8)
GRAD_BYTES = 4  # fp32 gradient buckets (DDP under autocast, Megatron's default for bf16 runs)


def latency_bound_bytes(
    n: int, *, link_bytes_per_s: float, share: float = LATENCY_SHARE, ranks_per_node: int = GPUS_PER_NODE
) -> dict:
    """``{algorithm: (latency_s, bytes)}``: NCCL's per-call latency of an all-reduce over ``n``
    DP ranks (``ranks_per_node`` of them a node) and the bucket size at which it is ``share`` of
    the transfer."""
    latency = comm.nccl_latency_s(
        "all_reduce", n, max(1, n // ranks_per_node), **Assumptions().nccl_latencies()
    )
    factor = {"ring": comm.bus_factor("all_reduce", n), "tree": 2.0}
    return {algo: (lat, lat * link_bytes_per_s / (share * factor[algo])) for algo, lat in latency.items()}


def lesson_table(widths=DP_WIDTHS, link_gb_per_s: float = LINK_GB_PER_S):
    """One row per DP width and algorithm: the per-call latency, the bucket size at which it is a
    tenth of the transfer, and Megatron-Core's default bucket at that width (fp32 gradients)."""
    import pandas as pd

    link = link_gb_per_s * 1e9 * Assumptions().link_efficiency
    rows = []
    for tp in TP_LAYOUTS:
        per_node = GPUS_PER_NODE // tp
        for n in widths:
            megatron_mb = (
                max(comm.MEGATRON_MIN_BUCKET_ELEMS, comm.MEGATRON_BUCKET_ELEMS_PER_RANK * n)
                * GRAD_BYTES
                / 1e6
            )
            bounds = latency_bound_bytes(n, link_bytes_per_s=link, ranks_per_node=per_node)
            rows += [
                {
                    "tp": tp,
                    "dp_ranks_per_node": per_node,
                    "dp": n,
                    "algorithm": algo,
                    "latency_us": lat * 1e6,
                    "bucket_for_10pct_latency_mb": nbytes / 1e6,
                    "megatron_default_mb": megatron_mb,
                }
                for algo, (lat, nbytes) in bounds.items()
            ]
    return pd.DataFrame(rows)


def lesson_text(t) -> str:
    """The rule and what the table gives, for the top of the chapter."""
    lat = Assumptions().nccl_latencies()

    def span(algo: str, tp: int) -> str:
        mb = t[(t.algorithm == algo) & (t.tp == tp)].bucket_for_10pct_latency_mb
        return f"{mb.min():,.0f}–{mb.max():,.0f} MB"

    return (
        "**The lesson.** A bucket cap trades two costs. Every call pays a fixed latency, so small buckets "
        "pay it many times; a bucket's all-reduce starts only once all its gradients exist, so one huge "
        "bucket starts after the backward is over. The latency stops mattering once a call's transfer is "
        "ten times it: S ≳ L·B ÷ (0.1·f), about 5·L·B (S the bucket's bytes, L the call's latency, B the "
        "link per GPU, f the algorithm's bytes factor: 2(n − 1)/n for a ring, 2 for a tree). With NCCL's "
        "latency model on one "
        f"{LINK_GB_PER_S:g} GB/s port per GPU (at the step model's link efficiency; a ring step "
        f"{lat['intra_step_s'] * 1e6:.1f} µs inside a node, {lat['inter_step_s'] * 1e6:.0f} µs between "
        f"nodes, a tree level {lat['tree_inter_step_s'] * 1e6:.0f} µs, NCCL's Simple protocol), over "
        f"{t.dp.min()}–{t.dp.max()} DP ranks that is {span('tree', 1)} for a tree and {span('ring', 1)} "
        f"for a ring with 8 DP ranks a node (pure data parallelism), and {span('tree', 8)} and "
        f"{span('ring', 8)} at TP 8, where each node holds one DP rank and every ring step crosses "
        "nodes (the articles' layouts, the scale case below); the ring's latency grows with the width, "
        "the tree's with its logarithm. Megatron-Core's default grows with the width for that reason, "
        "and the articles' 20–40 MB (A6) and 25 → 50 MB (B8) sit at the small end. The other side is "
        "the late start: under gradient accumulation only the last micro-batch's backward can hide the "
        "reduction, so a cap can save at most that backward. The sections below measure both sides on "
        "this machine, then price the articles' clusters."
    )
