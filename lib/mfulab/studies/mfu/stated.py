"""What the source articles state for the ``mfu`` claims, exactly as stated (article ids as
in ``docs/claims.md``). These are inputs under test, not results."""

from ...articles import B15_STEPS  # noqa: F401  (article B §5.2; shared with the overlap study)

# A19 — article A §8: a 13B model, global batch 32 × 4096 tokens, 2.4 s per step on 8 cards of
# 3.2e14 FLOP/s; the article writes total FLOPs ≈ 6N × 3 × tokens ≈ 3.06e16 and MFU ≈ 0.497.
A19_STATED = {
    "n_params": 13e9,
    "global_batch": 32,
    "seq_len": 4096,
    "step_time_s": 2.4,
    "n_devices": 8,
    "peak_flops_per_s": 3.2e14,
    "stated_total_flops": 3.06e16,
    "stated_mfu": 0.497,
}

# B1 — article B §1/§5: 7B, 512 × 4096 tokens per step on 64 × A100 (312 TFLOP/s dense bf16);
# 8.8e16 FLOPs per step, ≈ 4.4 s at 100% MFU; 10.2 s → 43%, 8.5 s → 52%.
B1_STATED = {
    "n_params": 7e9,
    "tokens_per_step": 512 * 4096,
    "n_devices": 64,
    "peak_flops_per_s": 312e12,
    "stated_flops_per_step": 8.8e16,
    "stated_ideal_step_s": 4.4,
    "step_times_s": {10.2: 0.43, 8.5: 0.52},
}
