"""Numbers the source articles state that more than one study reads (``docs/claims.md``
names the two articles, A and B, and every claim).

These are the claims under test, not results: each study recomputes from them.
"""

# Article B §5.2, the 7B / 64 × A100 case study: step time after each change, the change, and
# the loss category the change addresses (our reading; B15 is about this attribution).
B15_STEPS = (
    (10.2, "baseline", None),
    (9.4, "SDPA flash attention + TF32", "slow operators"),
    (9.0, "DDP bucket_cap_mb 25→50, gradient_as_bucket_view, static_graph", "communication overlap"),
    (8.7, "NCCL GPUDirect RDMA and buffer settings", "communication bandwidth"),
    (8.4, "webdataset tar shards, 12 workers, persistent workers, pin_memory", "data IO"),
    (8.5, "lock SM clocks, check no throttling", "scheduling"),
)


def b15_gain(change_prefix: str) -> tuple[float, float]:
    """(step before, step after) of the B15 change whose description starts with ``change_prefix``."""
    for (before, _, _), (after, change, _) in zip(B15_STEPS, B15_STEPS[1:]):
        if change.startswith(change_prefix):
            return before, after
    raise KeyError(change_prefix)
