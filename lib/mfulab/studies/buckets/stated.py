"""What the source articles state for the ``buckets`` claims, and the interconnect the
simulator is run with at scale (article ids as in ``docs/claims.md``). These are inputs
under test, not results."""

# A6 — article A §2.3: one all-reduce per parameter tensor drowns in per-call set-up costs;
# 20–40 MB buckets are the sweet spot, and at about a thousand cards the bucket size moves MFU
# by 5–8 points. "A disaster" is our reading: at least 1.5× slower than the best cap.
A6_DISASTER_RATIO = 1.5

# B8 — article B §3.1 (and step 2 of §5.2): for a 7B model on 64 × A100, bucket_cap_mb
# 25 → 50–100 MB overlapped the backward pass better than DDP's default of 25.
B8_STATED = {"ranks": 64, "default_cap_mb": 25, "better_caps_mb": (50, 100)}

# The interconnect and device the simulator is run with at scale (the study's ``scale_*``
# defaults): 200 Gb/s InfiniBand HDR (25 GB/s) and 20 µs per ring step; A100 dense bf16
# peak 312 TFLOP/s (article B's cards) at 50% compute efficiency; 4096 tokens per rank.
STATED_INTERCONNECT = {
    "alpha_s": 2.0e-5,
    "link_bytes_per_s": 25.0e9,
    "device_flops_per_s": 312.0e12,
    "compute_efficiency": 0.5,
    "tokens_per_rank": 4096,
}
