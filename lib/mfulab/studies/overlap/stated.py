"""What the source articles state for the ``overlap`` claims, exactly as stated (article ids as
in ``docs/claims.md``). These are inputs under test, not results. The interconnect they are
checked against (ranks, α, link bandwidth) is a parameter: ``article_*`` in ``params``."""

from ...articles import b15_gain

# A4 — article A §2.1: a 13B model on 32 cards, 3.2 s → 2.1 s per step with overlap on.
A4_STATED = {
    "preset": "article-13b",
    "step_before_s": 3.2,
    "step_after_s": 2.1,
    "grad_bytes_per_param": 2,  # bf16 gradients
    "tp": 8,
}  # the tensor-parallel degree the article's 13B runs use (article A §8)

# A5 — article A §2.2 and §6.3: gradient tensors of about 200 MB; 4–8 chunks best, 16 worse.
A5_STATED = {"nbytes": 200e6, "chunks": (1, 2, 4, 8, 16, 32, 64)}

# B9 — article B §3.3: two-node busbw 11 → 21 GB/s against a 25 GB/s link, efficiency
# "busbw ÷ link × 2"; the same change is B15's NCCL step (article B §5.2), 9.0 → 8.7 s.
B9_STATED = {"link_bytes_per_s": 25e9, "busbw_before_bytes_per_s": 11e9, "busbw_after_bytes_per_s": 21e9}
B9_STEP_BEFORE_S, B9_STEP_AFTER_S = b15_gain("NCCL")
