"""What the source articles state for the ``fusion`` claims, exactly as stated (article ids as
in ``docs/claims.md``). These are inputs under test, not results."""

# A7 — article A §3.1: LayerNorm + residual + dropout fused into one kernel, "a layer's forward
# pass became about 30% faster": a speed-up of 1.3×.
A7_STATED_SPEEDUP = 1.3

# A8 — article A §3.2: fused attention on a 7B model at sequence 4096 and batch 16 cut
# activation memory by about 40% and step time by about 18% (the model: config's article-7b).
A8_SETTING = {"preset": "article-7b", "seq_len": 4096, "micro_batch": 16}
A8_STATED = {"activation_reduction": 0.40, "step_time_reduction": 0.18}

# B4 — article B §2.1: on A100 and newer GPUs, TF32 roughly doubles matmul throughput over fp32.
B4_DATASHEET_DEVICE = "a100"

# B5 — article B §2.2: torch.compile cut the step of an 8B model by 8–12%, as step-time
# speed-ups 1.08× to 1.12×.
B5_STATED_SPEEDUP = (1.08, 1.12)
