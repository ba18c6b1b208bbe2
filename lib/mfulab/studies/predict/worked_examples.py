"""The predictor applied to the source articles' worked examples (claim ids as in the claims
page): what the step times should have been under the stated inputs, and which term each
optimisation changes. Inputs the articles do not give are named here with our reading."""

from __future__ import annotations

from mfulab.analytic import flops, step
from mfulab.analytic.articles import B15_STEPS
from mfulab.analytic.config import ATTENTION_KERNELS, preset
from mfulab.analytic.devices import peak_flops_per_s
from mfulab.units import MIB

# B15 — article B §5: 64 × A100 80GB in 8 nodes, "IB 200Gbps" (§5.1; read as 25 GB/s per GPU, the
# DGX A100's; per node is the other reading, in B15_READINGS), a 7B dense model, seq 4096,
# global batch 512, ZeRO-2 + TP 4 (so DP 16); 10.2 → 9.4 → 9.0 → 8.7 → 8.4 → 8.5 s.
# Our reading where the article is silent: the llama2-7b shape, micro-batch 1, bf16, no
# recompute, DeepSpeed's ZeRO-2 (its reduce buckets read as the article's 25 → 50 MB buckets of
# bf16 gradients), with its overlap of the gradient reduction; the baseline's exposed data wait is
# the 0.3 s the data rung saved (§5.2 step 4: 8.7 → 8.4 s, "the wait before each step basically
# disappeared"), the most of the trace's 1.5 s (§5.1: data arrived 1.5 s into the step) that can
# have been on the critical path; the 1.5 s all exposed is a sensitivity row (until 2026-12-07 the
# stated case; round fourteen's reader of chapter 09 showed the article's own rung bounds it).
B15_CASE = {
    "preset": "article-7b",
    "n_devices": 64,
    "tp": 4,
    "global_batch": 512,
    "micro_batch": 1,
    "zero_stage": 2,
    "device": "a100",
}
# What each rung changes in the predictor's inputs, in the order of ``articles.B15_STEPS`` (the
# article's steps); {} where the rung changes nothing the predictor has a figure for.
B15_CHANGES = (
    {"attention": "naive", "deepspeed_bucket_elems": 25 * MIB / 2, "data_s": 0.3},  # the baseline as read
    {"attention": "fused"},
    {"deepspeed_bucket_elems": 50 * MIB / 2},
    {},  # GPUDirect RDMA raises the inter-node bandwidth: no figure for this cluster (b15_sensitivity)
    {"data_s": 0.0},
    {},  # locked clocks: no term
)
# The readings the B15 sensitivity table moves, one at a time, from the baseline as read.
B15_READINGS = {
    "as read": {},
    "data wait 1.5 s": {"data_s": 1.5},
    "dp_overlap 0.6": {"dp_overlap": 0.6},
    "dp_overlap 0.4": {"dp_overlap": 0.4},
    "network 100 Gb/s per GPU": {"network_bytes_per_s": 12.5e9},
    "network 50 Gb/s per GPU": {"network_bytes_per_s": 6.25e9},
    "network 200 Gb/s per node": {"network_bytes_per_s": 200e9 / 8 / 8},
    # §4's DataLoader(batch_size=8): 4 micro-batches a step, so ZeRO-2 reduces 4 times, not 32
    "micro-batch 8": {"micro_batch": 8},
    "micro-batch 8, network 200 Gb/s per node": {"micro_batch": 8, "network_bytes_per_s": 200e9 / 8 / 8},
    # §4's knobs are PyTorch DDP's (bucket_cap_mb, gradient_as_bucket_view, static_graph): DDP with
    # no_sync reduces once per step, in 25 MiB buckets, and ZeRO-1 as torch's ZeroRedundancyOptimizer
    "DDP + ZeroRedundancyOptimizer": {"framework": "ddp", "zero_stage": 1},
    "DDP + ZeroRedundancyOptimizer, network 200 Gb/s per node": {
        "framework": "ddp",
        "zero_stage": 1,
        "network_bytes_per_s": 200e9 / 8 / 8,
    },
}


# A17/A19 — article A: 13B (40 layers, hidden 5120, 40 heads, seq 4096) on one machine of 8 ×
# 910B, TP 8, PP 1, micro-batch 1, global batch 32; 2.4 s per step stated. The recompute flags of
# its command (--recompute-method uniform --recompute-num-layers 12) act only with
# --recompute-granularity full, which the command omits: nothing is recomputed, chapter 04's
# configuration of record for A17, and the layout chapter 08 prices for A15. Attention kernel not
# stated: both shown.
A19_CASE = {
    "preset": "article-13b",
    "n_devices": 8,
    "tp": 8,
    "micro_batch": 1,
    "global_batch": 32,
    "recompute": "none",
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
    for (stated_s, rung, _category), change in zip(B15_STEPS, B15_CHANGES):
        inputs.update(change)
        out = step.step_time(cfg, **case, **{**assumptions, **inputs})
        rows.append(
            {
                "rung": rung,
                "article_step_s": stated_s,
                "predicted_step_s": out["step_s"],
                "predicted_gain_s": None if previous is None else previous["step_s"] - out["step_s"],
                "changed": ", ".join(f"{k}={v}" for k, v in change.items()) or "no figure the predictor has",
                **{k: out[k] for k in step.TERMS},
                "dp_comm_s": out["dp_comm_s"],
                "mfu_palm": out["mfu_palm"],
            }
        )
        previous = out
    df = pd.DataFrame(rows)
    df["article_gain_s"] = -df.article_step_s.diff()
    return df


def b15_sensitivity(**assumptions):
    """The baseline step under each reading of :data:`B15_READINGS`, with its DP traffic, how
    much of it is exposed, and whether its layout fits the card (the memory model's answer: the
    micro-batch 8 readings with unfused attention do not)."""
    import pandas as pd

    from mfulab.analytic.rates import Assumptions

    case = dict(B15_CASE)
    cfg = preset(case.pop("preset"))
    rows = []
    for reading, change in B15_READINGS.items():
        inputs = {**assumptions, **B15_CHANGES[0], **change}
        if inputs.get("framework") == "ddp":
            inputs.pop("deepspeed_bucket_elems", None)  # DDP's own 25 MiB buckets
        out = step.step_time(cfg, **{**case, **inputs})  # a reading may set the case's micro-batch
        rows.append(
            {
                "reading": reading,
                "baseline_step_s": out["step_s"],
                "dp_comm_s": out["dp_comm_s"],
                "dp_comm_exposed_s": out["dp_comm_exposed_s"],
                "dp_overlap": inputs.get("dp_overlap", Assumptions().dp_overlap),
                "framework": inputs.get("framework", "deepspeed"),
                "zero_stage": inputs.get("zero_stage", case["zero_stage"]),
                # the memory model's answer: a reading whose layout does not fit the card is context
                "memory_gib": out["memory_gib"],
                "fits": out["fits"],
            }
        )
    return pd.DataFrame(rows)


# The command's recompute flags act only with --recompute-granularity full, which it omits (the
# stated case: nothing recomputed); had it set it, --recompute-method uniform
# --recompute-num-layers 12 would recompute every layer in chunks of 12 (Megatron's uniform), and
# the article's own explanation (the first 12 layers) is the block reading: both shown beside it.
A19_RECOMPUTE_READINGS = ("uniform:12", "block:12")


def a19_case(**assumptions):
    """The 13B example's step under both attention kernels with nothing recomputed (the command
    as parsed), then the command's own unfused attention under each reading of its recompute
    flags (:data:`A19_RECOMPUTE_READINGS`), with its MFU."""
    import pandas as pd

    case = dict(A19_CASE)
    cfg = preset(case.pop("preset"))
    tokens = case["global_batch"] * cfg.seq_len
    model_flops = flops.flops_per_token(cfg, convention="palm") * tokens
    model_flops_6n = flops.flops_per_token(cfg, convention="6n") * tokens  # the article's own convention
    peak_total = case["n_devices"] * peak_flops_per_s(case["device"])
    rows = []
    cases = [(attention, case["recompute"]) for attention in ATTENTION_KERNELS]
    cases += [("naive", r) for r in A19_RECOMPUTE_READINGS]
    for attention, recompute in cases:
        out = step.step_time(cfg, **{**case, "recompute": recompute}, attention=attention, **assumptions)
        rows.append(
            {
                "attention": attention,
                "recompute": recompute,
                "stated_step_s": A19_STATED_STEP_S,
                "stated_mfu_palm": model_flops / (peak_total * A19_STATED_STEP_S),
                "stated_mfu_6n": model_flops_6n / (peak_total * A19_STATED_STEP_S),
                "step_at_full_mfu_s": model_flops / peak_total,
                "predicted_step_s": out["step_s"],
                "mfu_palm": out["mfu_palm"],
                "hfu_palm": out["hfu_palm"],
                "fits_memory": out["fits"],
                "memory_gib": out["memory_gib"],
                **{k: out[k] for k in step.TERMS},
            }
        )
    return pd.DataFrame(rows)


def terms_table(row):
    """One predicted step (a row of :func:`b15_ladder`, or any mapping with ``step.TERMS``) term
    by term: seconds and share of the step, the terms that are zero left out; the seconds sum to
    the step (``step.step_time``: step = m·t_mb + bubble + p2p + dp_exposed + optimizer + data)."""
    import pandas as pd

    seconds = {k.removesuffix("_s"): float(row[k]) for k in step.TERMS if float(row[k]) > 0}
    total = sum(seconds.values())
    return pd.DataFrame([{"term": k, "seconds": v, "share_of_step": v / total} for k, v in seconds.items()])
