"""The B15 ladder's configurations: each rung turns on one knob over the rung before it
(``LADDER``, the first rung the naive configuration), and for each knob the last rung with that
knob alone turned off (``leave_one_out``). A knob's gain up the ladder depends on the knobs
already on (a faster loader matters less once the step waits on something else); its
leave-one-out gain, the last rung against the last rung without it, is the attribution that does
not depend on the ladder's order."""

from __future__ import annotations

# each rung: the rung before it with one knob turned on (the first is the naive configuration:
# article B §5.1's baseline as this machine can run it: DDP at its defaults, which overlap the
# all-reduce with backward, standard attention, small JSON files read inline, a synchronous
# checkpoint). The knobs follow §5.2's order: SDPA (step 1), the DDP buckets (step 2), the loader
# (step 4); its NCCL step (3) and clock lock (5) have no counterpart on gloo and a CPU, and the
# background checkpoint is §5.3's, after the ladder.
LADDER = (
    ("naive", {}),
    ("fused attention", {"attention": "fused"}),  # config.ATTENTION_KERNELS
    ("buckets", {"buckets": True}),
    ("format + workers", {"format": "good", "workers": True}),
    ("background checkpoint", {"background": True}),
)


# the knobs of §5.2's 10.2 → 8.5 s ladder, the gain the article splits between its causes; the
# background checkpoint (§5.3) came after it and is credited on its own
ARTICLE_LADDER_KNOBS = ("fused attention", "buckets", "format + workers")


def article_bucket_caps_mib(mlp_matrix_bytes: float) -> tuple[float, float]:
    """Article B's bucket caps (§5.2 step 2: 25 → 50 MiB) scaled to a model whose largest layer
    tensor, an MLP weight matrix, holds ``mlp_matrix_bytes`` of gradient, so that a bucket holds
    as many of those matrices as the article's (a DDP bucket never splits a tensor):

        article_matrix_bytes = d_ff / tensor_parallel * d_model * grad_bytes_per_param
                             = 11008 / 4 * 4096 * 4 B = 45.1 MB
        cap_here_mib = cap_article_mib * mlp_matrix_bytes / article_matrix_bytes

    (``stated.B15_BUCKETS``)."""
    from mfulab.studies.anatomy.stated import B15_BUCKETS as b

    article_matrix_bytes = b["d_ff"] / b["tensor_parallel"] * b["d_model"] * b["grad_bytes_per_param"]
    scale = mlp_matrix_bytes / article_matrix_bytes
    return b["cap_before_mib"] * scale, b["cap_after_mib"] * scale


LEAVE_ONE_OUT_PREFIX = "all but "


def rungs() -> list[tuple[str, dict]]:
    """Each rung's cumulative knob settings."""
    out, knobs = [], {}
    for name, change in LADDER:
        knobs = {**knobs, **change}
        out.append((name, dict(knobs)))
    return out


def leave_one_out() -> list[tuple[str, dict]]:
    """For each knob of the ladder, the last rung's settings without it (its keys left at the
    naive default): ``("all but <rung>", knobs)``."""
    everything = rungs()[-1][1]
    return [
        (LEAVE_ONE_OUT_PREFIX + name, {k: v for k, v in everything.items() if k not in change})
        for name, change in LADDER[1:]
    ]
