"""What the source articles state for the ``buckets`` claims, the interconnect the simulator
is run with at scale, and the ranges its sensitivity table sweeps (article ids as in
``docs/claims.md``). These are inputs under test or named assumptions, not results."""

MB = 1e6
MIB = 2**20

# A6 — article A §2.3: one all-reduce per parameter tensor ("hundreds to a thousand tensors"
# for 13B) drowns in per-call set-up costs; 20–40 MB buckets are the sweet spot, and at about
# a thousand cards the bucket size moves MFU by 5–8 points. "A disaster" is our reading: at
# least 1.5× slower than the best cap.
A6_DISASTER_RATIO = 1.5
A6_SWEET_SPOT_BYTES = (20 * MB, 40 * MB)  # the article's "20–40 MB" (decimal MB: 19.1–38.1 MiB)
A6_MFU_POINTS = (5.0, 8.0)  # "moves MFU by 5–8 points"
A6_CARDS = 1024  # "about a thousand cards"
# The caps a practitioner plausibly sets, over which "the bucket size moves MFU" is read
# (max − min MFU): from DDP's 1 MiB first bucket to 400 MiB, past the simulated best
# (200–400 MiB). Larger caps put a large share of the model in a few buckets whose
# all-reduce starts only near the end of the backward — the "late start" extreme the claim
# contrasts, not a tuning choice (the whole grid's spread is reported beside it).
A6_PLAUSIBLE_CAPS_MIB = (1.0, 400.0)
# The claim's regime, in the two numbers that make per-tensor calls "drown in set-up costs":
# hundreds of tensors, and a per-call set-up latency at least the call's transfer time.
A6_REGIME = {"min_tensors": 100, "min_latency_to_transfer": 1.0}

# B8 — article B §3.1 (and step 2 of §5.2): for a 7B model on 64 × A100, bucket_cap_mb
# 25 → 50–100 MB overlapped the backward pass better than DDP's default of 25.
B8_STATED = {"ranks": 64, "default_cap_mb": 25, "better_caps_mb": (50, 100)}

# B6 — article B §2.2: gradient_as_bucket_view saves a copy, static_graph spares repeated
# graph analysis; "这些参数对大规模训练的性能影响不算巨大，但组合起来可以省掉好几个百分点的开销"
# (not huge for large-scale training, but together they save several percentage points).
# Our reading of "several percent": at least 3%, a 1.03× speed-up.
B6_SEVERAL_PERCENT_RATIO = 1.03
# The mechanism's bound at the article's scale (article B §5.2: 7B on 64 × A100, 9.0 s per
# step after the DDP change, articles.B15_STEPS): fp32 gradients (the larger case under mixed
# precision), one copy avoided per step at the A100 40 GB HBM2 bandwidth (1.555 TB/s, the
# lower of the two A100 datasheet figures, devices.yaml): the largest saving the copy allows.
B6_ARTICLE = {"preset": "llama2-7b", "grad_bytes_per_param": 4, "hbm_bytes_per_s": 1.555e12, "step_s": 9.0}

# The interconnect and device the simulator is run with at scale (the study's ``scale_*``
# defaults): 200 Gb/s InfiniBand HDR (25 GB/s) and 20 µs per step of the collective; A100
# dense bf16 peak 312 TFLOP/s (article B's cards) at 50% compute efficiency; 4096 tokens per
# rank. The all-reduce algorithm is an assumption too: "best" costs each call by the faster
# of the ring (2(n−1)·α + 2(n−1)/n·S/B) and the pipelined tree (2·log2(n)·α + 2·S/B), as
# NCCL chooses between ring and tree per call by message size and rank count (its tuning
# model); at 1024 ranks the tree always wins: 2·log2(1024)·20 µs = 0.4 ms of latency per
# call against the ring's 2·1023·20 µs = 41 ms. The sensitivity table adds ring only.
STATED_INTERCONNECT = {
    "algorithm": "best",
    "alpha_s": 2.0e-5,
    "link_bytes_per_s": 25.0e9,
    "device_flops_per_s": 312.0e12,
    "compute_efficiency": 0.5,
    "tokens_per_rank": 4096,
}

# The sensitivity table (issue §4): one assumption varied at a time from STATED_INTERCONNECT.
# - per-step latency 2–20 µs (NCCL's per-hop latency: a few µs on NVLink, up to ~20 µs across
#   InfiniBand switches);
# - links: NVLink 3 inside an A100 node, 300 GB/s per direction (A100 datasheet: 600 GB/s
#   total), with 3 µs per step, as if every rank of the ring sat on NVLink (true only for
#   ≤ 8 ranks: an upper bound on the interconnect); InfiniBand NDR 400 Gb/s (50 GB/s);
# - compute efficiency 0.3–0.7 of the peak;
# - tensor/pipeline parallel sharding of the gradients: TP 4 (article B's case study), TP 8
#   (article A's 13B command), TP 8 × PP 4; the DP ranks are the cards / (TP·PP);
# - gradient accumulation: only the last micro-batch's backward overlaps the all-reduce;
# - the all-reduce algorithm: ring only (a ring over every rank, 2(n−1) latency steps per call).
SENSITIVITY = {
    "algorithm": ("ring",),
    "alpha_s": (2e-6, 5e-6, 10e-6),
    "links": {"NVLink (A100, all ranks)": (300e9, 3e-6), "InfiniBand NDR 400 Gb/s": (50e9, 2e-5)},
    "compute_efficiency": (0.3, 0.7),
    "sharding": ((4, 1), (8, 1), (8, 4)),
    "accumulation": (4, 16),
}
