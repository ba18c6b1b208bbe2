"""Numbers the source articles state that more than one study reads (``docs/claims.md``
names the two articles, A and B, and every claim).

These are the claims under test, not results: each study recomputes from them.
"""

# Article A §8, its MFU example: a 13B model, global batch 32 × 4096 tokens, 2.4 s per step on 8
# cards of 3.2e14 FLOP/s; the article writes total FLOPs ≈ 6N × 3 × tokens ≈ 3.06e16 and MFU ≈
# 0.497. Chapter 01 judges the arithmetic (A19); chapter 04 sets the step beside its planner's for
# the same configuration (its launch command's).
A_MFU_EXAMPLE = {
    "n_params": 13e9,
    "global_batch": 32,
    "seq_len": 4096,
    "step_time_s": 2.4,
    "n_devices": 8,
    "peak_flops_per_s": 3.2e14,
    "stated_total_flops": 3.06e16,
    "stated_mfu": 0.497,
}

# Article B §1.1, its 7B run (the numbers return in §5.1-5.2): 512 sequences of 4096 tokens per
# step on 64 A100s, and its own count of a step's FLOPs, 512 × 4096 × 6 × 7e9 ≈ 8.8e16 (the 6·N
# rule with N rounded to 7e9). Chapter 01 checks the arithmetic (B1); chapter 03 reads the
# per-GPU rate it implies (B4's part in B15).
B_RUN = {
    "n_params": 7e9,
    "sequences_per_step": 512,
    "seq_len": 4096,
    "tokens_per_step": 512 * 4096,
    "n_devices": 64,
    "stated_flops_per_step": 8.8e16,
}

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


# Article A §6.1, "13B on one 910B machine of 8 cards": the launch command, flag by flag, with how
# Megatron-LM (which MindSpeed patches) reads each one; the configuration of record for every
# chapter that prices this command (02's A4, 04's A17, 05's A6). Statuses: ``megatron`` (a
# Megatron-LM flag, taken as written), ``inert`` (a Megatron-LM flag that does nothing here),
# ``not megatron`` (Megatron-LM has no such flag; its counterpart named), ``not checked``.
# Checked against Megatron-LM's megatron/training/arguments.py and megatron/core/transformer/
# transformer_block.py; MindSpeed's own additions were not read.
A_LAUNCH_COMMAND = (
    ("--model-type", "GPT", "not checked", "no flag of that name found in Megatron-LM's arguments"),
    ("--tensor-model-parallel-size", "8", "megatron", "TP 8 over the 8 cards"),
    ("--pipeline-model-parallel-size", "1", "megatron", "PP 1, so DP = 8 / (8 · 1) = 1"),
    ("--num-layers", "40", "megatron", ""),
    ("--hidden-size", "5120", "megatron", ""),
    ("--num-attention-heads", "40", "megatron", ""),
    ("--seq-length", "4096", "megatron", ""),
    ("--micro-batch-size", "1", "megatron", ""),
    ("--global-batch-size", "32", "megatron", "32 micro-batches per step at DP 1"),
    ("--optimizer", "adam", "megatron", ""),
    (
        "--zero-stage",
        "2",
        "not megatron",
        "a DeepSpeed / Megatron-DeepSpeed flag; Megatron-LM shards optimizer states with "
        "--use-distributed-optimizer, and at DP 1 any ZeRO stage shards nothing",
    ),
    (
        "--recompute-method",
        "uniform",
        "inert",
        "acts only with --recompute-granularity full, which the command omits",
    ),
    ("--recompute-num-layers", "12", "inert", "acts only with --recompute-granularity full"),
    (
        "--gradient-bucket-size",
        "25",
        "not megatron",
        "Megatron-LM's is --ddp-bucket-size, in parameters (default max(40M, 1M × DP))",
    ),
    ("--overlap-grad-allreduce", "", "not megatron", "Megatron-LM's is --overlap-grad-reduce"),
    ("--profile", "", "megatron", ""),
)


def launch_command_rows() -> list[dict]:
    """:data:`A_LAUNCH_COMMAND` as table rows (flag, value, status, note)."""
    return [dict(zip(("flag", "value", "status", "note"), row)) for row in A_LAUNCH_COMMAND]
