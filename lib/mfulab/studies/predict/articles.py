"""The predictor applied to the source articles' worked examples (claim ids as in the claims
page): what the step times should have been under the stated inputs, and which term each
optimisation changes. Inputs the articles do not give are named here with our reading."""

from __future__ import annotations

from ... import predict
from ...config import preset

# B15 — article B §5: 64 × A100 80GB in 8 nodes, 200 Gb/s IB, a 7B dense model, seq 4096,
# global batch 512, ZeRO-2 + TP 4 (so DP 16); 10.2 → 9.4 → 9.0 → 8.7 → 8.4 → 8.5 s.
# Our reading where the article is silent: the llama2-7b shape, micro-batch 1, bf16, no
# recompute, DDP-style overlap of the gradient reduction; the baseline's data wait is the
# "1.5 s after the step starts" the article's trace showed.
B15_CASE = {
    "preset": "article-7b",
    "n_devices": 64,
    "tp": 4,
    "global_batch": 512,
    "micro_batch": 1,
    "zero_stage": 2,
    "device": "a100",
}
B15_LADDER = (  # (rung, the article's step after it, what changes in the predictor's inputs)
    ("baseline", 10.2, {"attention": "unfused", "dp_bucket_bytes": 25 * 2**20, "data_s": 1.5}),
    ("SDPA flash attention + TF32", 9.4, {"attention": "flash"}),
    ("DDP bucket 25 → 50 MB, static graph", 9.0, {"dp_bucket_bytes": 50 * 2**20}),
    ("NCCL GPUDirect RDMA, buffers", 8.7, {}),  # no term of the predictor: GDR's effect is not modelled
    ("tar shards, 12 workers, pinned memory", 8.4, {"data_s": 0.0}),
    ("locked SM clocks", 8.5, {}),  # no term either
)

# A17/A19 — article A: 13B (40 layers, hidden 5120, 40 heads, seq 4096) on one machine of 8 ×
# 910B, TP 8, PP 1, micro-batch 1, global batch 32, Megatron's uniform recompute of every layer
# (A17's first reading); 2.4 s per step stated. Attention kernel not stated: both shown.
A19_CASE = {
    "preset": "article-13b",
    "n_devices": 8,
    "tp": 8,
    "micro_batch": 1,
    "global_batch": 32,
    "recompute": "full",
    "device": "ascend-910b",
}
A19_STATED_STEP_S = 2.4


def b15_ladder(**assumptions):
    """Each rung's predicted step with the inputs changed so far, beside the article's."""
    import pandas as pd

    case = dict(B15_CASE)
    cfg = preset(case.pop("preset"))
    inputs: dict = {}
    rows, previous = [], None
    for rung, stated_s, change in B15_LADDER:
        inputs.update(change)
        out = predict.step_time(cfg, **case, **{**assumptions, **inputs})
        rows.append(
            {
                "rung": rung,
                "article_step_s": stated_s,
                "predicted_step_s": out["step_s"],
                "predicted_gain_s": None if previous is None else previous["step_s"] - out["step_s"],
                "changed": ", ".join(f"{k}={v}" for k, v in change.items()) or "nothing the predictor models",
                **{k: out[k] for k in predict.TERMS},
                "mfu_palm": out["mfu_palm"],
            }
        )
        previous = out
    df = pd.DataFrame(rows)
    df["article_gain_s"] = -df.article_step_s.diff()
    return df


def a19_case(**assumptions):
    """The 13B example's step under both attention kernels, with its MFU."""
    import pandas as pd

    case = dict(A19_CASE)
    cfg = preset(case.pop("preset"))
    rows = []
    for attention in ("unfused", "flash"):
        out = predict.step_time(cfg, **case, attention=attention, **assumptions)
        rows.append(
            {
                "attention": attention,
                "stated_step_s": A19_STATED_STEP_S,
                "predicted_step_s": out["step_s"],
                "mfu_palm": out["mfu_palm"],
                "hfu_palm": out["hfu_palm"],
                "fits_memory": out["fits"],
                "memory_gib": out["memory_gib"],
                **{k: out[k] for k in predict.TERMS},
            }
        )
    return pd.DataFrame(rows)
