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


def article_bucket_caps_mib(grad_bytes: float) -> tuple[float, float]:
    """Article B's bucket caps (§5.2 step 2: 25 → 50 MiB) scaled to a model whose ranks reduce
    ``grad_bytes`` of gradients, so that it has the article's number of buckets per step:

        article_grad_bytes = n_params / tensor_parallel * grad_bytes_per_param   (7e9 / 4 * 4 B)
        cap_here_mib = cap_article_mib * grad_bytes / article_grad_bytes

    (``stated.B15_BUCKETS``: 7 GB of fp32 gradients per rank, 267 buckets of 25 MiB)."""
    from mfulab.studies.anatomy.stated import B15_BUCKETS as b

    article_grad_bytes = b["n_params"] / b["tensor_parallel"] * b["grad_bytes_per_param"]
    scale = grad_bytes / article_grad_bytes
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
