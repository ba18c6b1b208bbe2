"""What the source articles state for the ``fusion`` claims, exactly as stated (article ids as
in ``docs/claims.md``). These are inputs under test, not results."""

from mfulab.analytic.articles import B_RUN
from mfulab.studykit.step_error import SWITCH_MARGIN

# "大约 N%" (about N%): a figure rounded to tens of percent holds where the reading lies within 5
# points of it. One rule for every "about" of the chapter (A7's 30%, A8's 40%).
ABOUT_TOLERANCE = 0.05
# A7 — article A §3.1: LayerNorm + residual + dropout fused into one kernel, "a layer's forward
# pass became about 30% faster". Read as time: −30% of the layer's forward time; "about" lets the
# cut fall to 25%, so the verdict's threshold is a speed-up of 1 / (1 − 0.25) = 1.33× (1.43× at
# exactly 30%), about a whole layer.
A7_STATED_TIME_REDUCTION = 0.30
A7_LAYER_SPEEDUP = 1 / (1 - (A7_STATED_TIME_REDUCTION - ABOUT_TOLERANCE))
# The article's layer for the analytic bound: its 13B model (config ``article-13b``: 40 × 5120,
# seq 4096, the A17 launch command) on its cards (Ascend 910B, A17) in bf16.
A7_ARTICLE_PRESET = "article-13b"
A7_ARTICLE_DEVICE = "ascend-910b"
A7_ARTICLE_DTYPE = "bf16"
# Its layout, from the same launch command (article A §6.1, the course's A17):
# --tensor-model-parallel-size 8, --pipeline-model-parallel-size 1, no --sequence-parallel.
# Each card then runs 1/8 of a layer's matmuls and the whole sub-block (article A §4.2).
A7_ARTICLE_TP = 8
A7_ARTICLE_SEQUENCE_PARALLEL = False
# Assumptions of the analytic bound (not stated by the article; the sensitivity table varies them):
# - the fraction of the datasheet peak the layer's matmuls reach: the article's own MFU, about
#   0.5 (article A §8, claim A19: MFU ≈ 0.497 for this 13B model on these cards);
# - the fraction of the datasheet memory bandwidth the unfused eager kernels reach: 0.8, a little
#   below what a tuned copy kernel reaches on HBM, since eager elementwise kernels do not beat a
#   tuned copy: on an A100 40GB (1.555 TB/s datasheet) a memcopy measures 1.355 TB/s, 87%
#   (github.com/PTsolvers/gpu-workshop-JuliaCon23 issue 7), and the gpu-benches streaming
#   kernels ~1.3-1.4 TB/s, 84-90% (github.com/RRZE-HPC/gpu-benches issue 13). A smaller value
#   favours the claim; the table reports the value below which the claim would hold.
A7_BANDWIDTH_EFFICIENCY_SOURCE = (
    "below a tuned copy's 84-90% of an A100's HBM (PTsolvers/gpu-workshop-JuliaCon23 #7, "
    "RRZE-HPC/gpu-benches #13)"
)
A7_ASSUMED_MATMUL_EFFICIENCY = 0.5
A7_ASSUMED_BANDWIDTH_EFFICIENCY = 0.8
# The article's second fusion mechanism, kernel launches: "kernel 启动次数也从三次变成一次" (three
# launches become one, per sub-block), at an assumed 5 µs per exposed launch (a GPU's driver and
# runtime path, about 4-6 µs measured on an RTX 5070 Ti, the pegainfer launch-overhead study; no
# figure is published for Ascend's runtime). A launch is exposed only when the device waits for
# the host, so the term is an upper bound on what fusing saves by launches. One call of the
# sub-block covers the micro-batch's tokens: sequence 4096 × micro-batch 1 (the A17 command).
A7_ARTICLE_KERNELS = (3, 1)  # (unfused, fused) launches per sub-block
# LayerNorm kernels timed against faster ones on an A100, by achieved bandwidth: torch's eager
# LayerNorm 936-993 GB/s forward against a Triton one's 1092-1409 GB/s (4096 tokens, hidden
# 4096 and 8192; backward 479-750 against 309-1524), github.com/allenai/OLMo issue 258; apex's
# LayerNorm 896 / 572 GB/s forward / backward against its fast LayerNorm's 1258 / 1163,
# github.com/NVIDIA/apex pull 1037 (B 32, S 512). Slower over faster: 0.47-0.91 (one backward
# pair has eager faster).
A7_EAGER_RATIO_SOURCE = "published A100 LayerNorm kernel pairs: 47-91% (allenai/OLMo #258, NVIDIA/apex #1037)"
# The lowest published eager/fused ratio per device (the pairs above). A device absent here (the
# 910B: no figure is published) takes the lowest published pair of any device in its place (an
# assumed input, named in the row: the break-even must lie below every published kernel pair)
A7_EAGER_RATIO_PUBLISHED_LOW = {"a100": 0.47}
A7_ASSUMED_LAUNCH_S = 5e-6
A7_TOKENS_PER_CALL = 4096 * 1
A7_SENSITIVITY = {
    "devices": ("ascend-910b", "a100", "h100-sxm"),
    # the highest: the best single GEMM measured on an A100 (MAMF, 271.2 of 312 TFLOP/s bf16,
    # devices.yaml's mamf_source): no layer's matmuls sustain more (until 2026-12-07 1.0, the
    # datasheet peak, which no kernel reaches, sat among the rows that kept the row open)
    "matmul_efficiencies": (0.3, 0.7, 0.87),
    "bandwidth_efficiencies": (0.2, 0.5, 1.0),
    # (tp, sequence_parallel): one card, and TP 8 with sequence parallelism
    "layouts": ((1, False), (8, True)),
    "launch_s": (0.0, 20e-6, 50e-6),  # no exposed launch; a slow runtime's 20 µs; a heavy NPU dispatch
    # the eager kernels' bandwidth efficiency as a fraction of the fused kernel's: the central case
    # gives both the same. Published LayerNorm kernel pairs on an A100 put the slower kernel's
    # bandwidth at 47-91% of the faster one's (A7_EAGER_RATIO_SOURCE), so the rows take 0.7 and
    # 0.5; no Ascend figure is published, and the GPU pairs stand in for it
    "eager_ratios": (0.7, 0.5),
}

# A8 — article A §3.2: fused attention on a 7B model at sequence 4096 and batch 16 cut
# activation memory by about 40% and step time by about 18% (the model: config's article-7b).
A8_SETTING = {"preset": "article-7b", "seq_len": 4096, "micro_batch": 16}
A8_STATED = {"activation_reduction": 0.40, "step_time_reduction": 0.18}
# "大约 40%" (about 40%): the chapter's one rule for "about", a reading whose cut lies within 5 points
# of it reproduces it (35-45%), and one beyond does not
A8_MEMORY_TOLERANCE = ABOUT_TOLERANCE

# B3 — article B §2.1: "PyTorch 2.0+ picks flash or memory-efficient attention by input shape and
# hardware". The article's inputs, for PyTorch's CUDA flash-eligibility rules: its case study's 7B
# (Llama-2-7B: 4096 / 32 heads = head dim 128) on A100 80G (sm80), in bf16 (its MFU uses the
# 312 TFLOP/s bf16 peak), causal, no mask tensor, training (gradients), no attention dropout.
B3_ARTICLE_INPUTS = {
    "dtype": "bf16",
    "head_dim": 128,
    "sm": (8, 0),
    "is_causal": True,
    "has_attn_mask": False,
}

# B4 — article B §2.1: on A100 and newer GPUs, TF32 roughly doubles matmul throughput over fp32
# ("可以翻倍"). The stated quantity is 2×: a ratio inside this band reads as "doubles" (our
# reading: ±25% around 2), one outside it states the wrong size.
B4_DATASHEET_DEVICE = "a100"
B4_DOUBLING_BAND = (1.6, 2.5)

# B3 — article B §2.1 on FlashAttention: "the same attention computation, HBM reads and writes
# cut several-fold" (HBM读写量降低数倍). Published measurement: Dao et al. 2022, FlashAttention
# (arXiv:2205.14135v2), Figure 2 (left): forward + backward of GPT-2 medium's attention (sequence
# 1024, head dim 64, 16 heads, batch 64) on an A100: standard attention 66.6 GFLOPs, 40.3 GB of
# HBM reads and writes, 41.7 ms; FlashAttention 75.2 GFLOPs, 4.4 GB, 7.3 ms (the paper's first
# version printed 35.3 GB and 35.1 → 11.7 ms for the standard and flash runtimes). "Several-fold"
# read as 3× or more (our reading).
B3_FLASH_PUBLISHED = {
    "citation": "Dao et al. 2022, FlashAttention (arXiv:2205.14135v2), Figure 2 (left)",
    "workload": (
        "GPT-2 medium attention, sequence 1024, head dim 64, 16 heads, batch 64, A100, forward + backward"
    ),
    "standard": {"gflops": 66.6, "hbm_gb": 40.3, "runtime_ms": 41.7},
    "flash": {"gflops": 75.2, "hbm_gb": 4.4, "runtime_ms": 7.3},
    "v1_standard_hbm_gb": 35.3,
}
B3_SEVERAL_FOLD = 3.0

# B5 — article B §2.2: torch.compile cut the step of an 8B model by 8–12%: a step time × 0.92
# to × 0.88, i.e. step-time speed-ups 1/(1 − 0.08) = 1.087× to 1/(1 − 0.12) = 1.136×.
B5_STATED_TIME_CUT = (0.08, 0.12)
B5_STATED_SPEEDUP = tuple(1 / (1 - cut) for cut in B5_STATED_TIME_CUT)
# The published measurement at the claim's model size: torchtitan's Llama 3 8B on H100s, FSDP
# eager against FSDP + torch.compile (benchmarks/llama3_h100_202412_torchtitan.md, Table 1 on 8 GPUs
# and Table 3 on 128), the
# rows of chapter 10's published-runs file (eager id, compiled id), read from there by id.
B5_PUBLISHED_FILE = "studies/predict/published_runs.yaml"
B5_PUBLISHED_PAIRS = (
    ("titan-2412-llama3-8b-8gpu-fsdp", "titan-2412-llama3-8b-8gpu-fsdp-compile"),
    ("titan-2412-llama3-8b-128gpu-fsdp", "titan-2412-llama3-8b-128gpu-fsdp-compile"),
)
# Assumptions behind the analytic A8 row (the article states none of them; the sensitivity
# table ``attention_memory.sensitivity`` varies them one at a time, plus the combination that gives
# the smallest cut). Central: Korthikanti Table 2 as printed (attention dropout on, no tensor
# parallelism), activations only, the stated batch 16 read as the micro-batch of one device.
# - micro_batches: "batch 16" may be a global batch over data-parallel devices (what one
#   device holds then is 1–2 sequences); matters only once model states are counted;
# - tensor_parallel: TP without sequence parallelism keeps the LayerNorm/dropout activations
#   whole on every device while the a·s² terms are split, a smaller cut (with sequence
#   parallelism every term is split and the cut is unchanged);
# - attention dropout off: no mask and no dropout output per a·s² (the hidden dropouts kept);
#   all dropout off (most LLM pre-training, e.g. Llama 2): the hidden dropouts' masks go too;
# - model states counted: mixed-precision Adam, 16 bytes per parameter (ZeRO-0 on one device,
#   or ZeRO-1 over ``zero1_devices``).
A8_SENSITIVITY = {"micro_batches": (2, 1), "tensor_parallel": (2, 8), "zero1_devices": 8}
# A8's step time (−18%), priced by the course's step model on article A's cards (its 910B entry
# in devices.yaml), one machine of 8 cards: naive against fused attention over the same readings
# (TP 1, 2, 8; micro-batch 16, 2, 1). A reading that fits the card votes: it reproduces the cut
# when the modelled cut lies within A8_STEP_MARGIN of 18% (relative), misses it beyond twice that
# (the step model's error on published runs is of this order: chapter 10).
A8_STEP_DEVICE = "ascend-910b"
A8_STEP_CARDS = 8
A8_STEP_MARGIN = SWITCH_MARGIN  # the course's rule for a switch (studykit.step_error)
# The step model's assumptions that price naive attention's memory-bound passes, varied at the
# central reading that fits (rates.Assumptions: memory_efficiency 0.85, backward_traffic_factor 2,
# the GEMMs' share of MAMF, 1.0 by default): (what, field, value)
A8_STEP_ASSUMPTIONS = (
    ("HBM efficiency of memory-bound kernels", "memory_efficiency", 0.6),
    ("HBM efficiency of memory-bound kernels", "memory_efficiency", 1.0),
    ("backward traffic ÷ forward", "backward_traffic_factor", 1.5),
    ("backward traffic ÷ forward", "backward_traffic_factor", 3.0),
    ("GEMM share of MAMF", "matmul_share_of_mamf", 0.6),
    ("GEMM share of MAMF", "matmul_share_of_mamf", 0.8),
)

# B4's part in B15 (article B §1.1, the figures chapter 01 checks as B1): the baseline step does
# 8.8e16 FLOPs over 64 A100s; with B15's baseline step time (10.2 s, ``articles.B15_STEPS``) that
# is the per-GPU rate the baseline already ran at, compared with the A100's fp32 peak.
B15_STATED_FLOPS_PER_STEP = B_RUN["stated_flops_per_step"]  # analytic.articles
B15_STATED_DEVICES = B_RUN["n_devices"]
