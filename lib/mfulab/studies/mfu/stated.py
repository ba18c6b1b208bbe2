"""What the source articles state for the ``mfu`` claims, exactly as stated (article ids as
in ``docs/claims.md``). These are inputs under test, not results."""

from mfulab.analytic.articles import A_MFU_EXAMPLE, B_RUN

# A19 — article A §8: a 13B model, global batch 32 × 4096 tokens, 2.4 s per step on 8 cards of
# 3.2e14 FLOP/s; the article writes total FLOPs ≈ 6N × 3 × tokens ≈ 3.06e16 and MFU ≈ 0.497
# (``analytic.articles.A_MFU_EXAMPLE``, which chapter 04 reads too).
A19_STATED = A_MFU_EXAMPLE
# The 910B SKUs in ``devices.yaml`` (cube peaks, approximate: Huawei publishes no per-SKU
# datasheet): the article's 3.2e14 lies between the 910B2's and the 910B3's.
A19_SKUS = ("ascend-910b1", "ascend-910b2", "ascend-910b3", "ascend-910b4")

# B1 — article B §1.1 (the numbers return in §5.1–5.2): 7B, 512 × 4096 tokens per step on 64 × A100
# (312 TFLOP/s dense bf16, 1.9968e16 FLOP/s together); 512 × 4096 × 6 × 7e9 ≈ 8.8e16 FLOPs per step;
# §1.1: a step at 100% MFU takes "about 5 s" (5秒左右) and a step of about 10 s is 44% global MFU;
# §5.1: 10.2 s → 43%; §5.2: 8.5 s → 52%.
B1_STATED = {
    **B_RUN,  # its parameters, tokens per step, cards and stated FLOPs per step (analytic.articles)
    "peak_flops_per_s": 312e12,
    "stated_ideal_step_s": 5.0,
    "step_times_s": {10.0: 0.44, 10.2: 0.43, 8.5: 0.52},
}

# B9's text (article B §3.3), checked here because its MFU figures are arithmetic on B1's step:
# "tuning GDR and InfiniBand settings ... cut the step by 4% and lifted global MFU from 48% to
# 52%"; "12.5 GB/s for 100G HDR InfiniBand" as the per-card link bandwidth.
B9_TEXT_STATED = {
    "step_gain": 0.04,
    "mfu_before": 0.48,
    "mfu_after": 0.52,
    "link_gbit_per_s": 100,
    "link_name": "HDR",
    "link_bytes_per_s": 12.5e9,
}

# InfiniBand data rate of a 4x port (4 lanes) per generation, Gb/s: InfiniBand Trade Association,
# InfiniBand roadmap. HDR100 is an HDR port run on 2 lanes (2 × 50 Gb/s), as NVIDIA (Mellanox)
# ConnectX-6 HDR100 adapters do.
INFINIBAND_GBIT_PER_S = {"EDR (4x)": 100, "HDR (4x)": 200, "HDR100 (2 lanes of HDR)": 100, "NDR (4x)": 400}

# Korthikanti et al. 2022 (arXiv:2205.05198), Table 5: model FLOPs and hardware FLOPs utilisation
# with sequence parallelism + selective recomputation on A100s; Table 3: the shapes (s = 2048,
# V = 51200). Per model: (attention heads, h, l, MFU, HFU).
KORTHIKANTI_TABLE5 = {
    "22B": (64, 6144, 48, 0.415, 0.437),
    "175B (GPT-3)": (96, 12288, 96, 0.514, 0.528),
    "530B (MT-NLG)": (128, 20480, 105, 0.560, 0.570),
    "1T": (160, 25600, 128, 0.563, 0.570),
}
KORTHIKANTI_SEQ_LEN, KORTHIKANTI_VOCAB = 2048, 51200

# Published MFU figures, each with its source and the convention behind it (what is counted in
# the numerator, and against which peak). Inputs for comparison, not results of this study.
PUBLISHED_MFU = (
    {
        "system": "PaLM 540B, 6144 TPU v4",
        "large_run": True,
        "mfu": 0.462,
        "hfu": 0.578,
        "source": "Chowdhery et al. 2022, PaLM (arXiv:2204.02311), §4.1 and Table 3",
        "convention": "model FLOPs 6N + 12·L·H·Q·T per token (their App. B; no rematerialisation) over "
        "the TPU v4 peak of 275 TFLOP/s; HFU adds the rematerialised forward (57.8% is in the text, "
        "Table 3 lists MFU)",
    },
    {
        "system": "Megatron-LM GPT 1T (1008B), 3072 A100",
        "large_run": True,
        "mfu": 163e12 / 312e12,
        "kind": "of peak (hardware FLOPs, recompute counted)",
        "hfu": None,
        "source": "Narayanan et al. 2021, Megatron-LM (arXiv:2104.04473), abstract and Table 1: "
        "163 TFLOP/s per GPU, 502 PFLOP/s aggregate, printed as 52% of peak (163 / 312 = 52.2%)",
        "convention": "their Eq. 3 counts the recomputed forward (96·B·s·l·h²(…)): a hardware-FLOPs "
        "figure (HFU-like) over the A100's 312 TFLOP/s dense bf16/fp16 peak, end to end",
    },
    {
        "system": "Llama 3 405B, 8192–16384 H100",
        "large_run": True,
        "mfu": 0.38,
        "mfu_hi": 0.43,
        "hfu": None,
        "source": "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Table 4: "
        "380–430 TFLOP/s per GPU, BF16 MFU 38–43%",
        "convention": "BF16 model FLOPs utilisation over the H100's dense BF16 peak (989 TFLOP/s), per "
        "GPU, for three parallelism configurations (the lower figures at 16K GPUs); the paper does not "
        "print its FLOPs formula",
    },
    {
        "system": "MegaScale 175B, 12288 GPUs",
        "large_run": True,
        "mfu": 0.552,
        "hfu": None,
        "source": "Jiang et al. 2024, MegaScale (NSDI 2024, arXiv:2402.15627), abstract: 55.2% MFU training "
        "a 175B model on 12,288 GPUs, 1.34× Megatron-LM's",
        "convention": "model FLOPs over the GPUs' dense peak; the best figure of the paper's sweep (its "
        "model uses parallel transformer blocks and sliding-window attention)",
    },
    {
        "system": "GPT-style models with FlashAttention-2, A100",
        "mfu": 0.72,
        "hfu": None,
        "source": "Dao 2023, FlashAttention-2 (arXiv:2307.08691), abstract and §4.2: up to 225 TFLOP/s "
        "per A100 GPU, 72% model FLOPs utilisation",
        "convention": "model FLOPs 6·seqlen·N + 12·L·H·seqlen² (§4.2: the attention term is not halved "
        "for the causal mask) over the A100's 312 TFLOP/s dense peak; the best case, GPT3-2.7B at 8k "
        "context on 8 A100s, where that term is about a third of the count: ≈ 60% under the `causal` "
        "convention",
    },
)

# FlashAttention-2's best case (Dao 2023, §4.2: GPT3-2.7B at 8k context), its shape from the GPT-3
# paper (Brown et al. 2020, Table 2.1: 32 layers, d_model 2560): to restate its 72% (6N plus the
# full T×T attention term) in another count.
FA2_BEST_CASE = {"n_params": 2.7e9, "n_layers": 32, "d_model": 2560, "seq_len": 8192, "mfu": 0.72}

# Article B, introduction: "real operating data show many training jobs stuck at 35% to 50% MFU";
# §1.1: at 10 s a step (44% global MFU), "local MFU may show the compute pipeline 80% busy".
B_TYPICAL_MFU_BAND = (0.35, 0.50)
B_LOCAL_MFU_EXAMPLE = {"global": 0.44, "local": 0.80, "step_s": 10.0}

# Article B §5.1: in the case study's trace the batch reached the GPU 1.5 s after each step
# began (数据加载在每步开始后1.5秒才把数据送到GPU); §5.2's data step (8.7 → 8.4 s) says that wait
# "basically disappeared" (基本消失). B15's row sets the two side by side.
B_CASE_DATA_WAIT_S = 1.5

# Article B §1.2: "even just logging GPU utilisation and memory utilisation with nvidia-smi dmon,
# and printing each step's time, you can quickly tell which of the four losses dominates". What
# nvidia-smi reports (NVML, nvmlUtilization_t; the same figure torch.cuda.utilization returns):
# "gpu: percent of time over the past sample period during which one or more kernels was
# executing on the GPU"; "memory: percent of time ... during which global (device) memory was
# being read or written"; a sample period of 1/6 s to 1 s (NVML API reference, nvmlUtilization_t).
# Per loss of the four: whether a kernel is resident on the GPU while it happens (the NCCL
# kernel of a collective stays resident while it waits for its peers; a slow operator is a kernel).
B2_DMON_SEES = {
    "slow operators": {
        "kernel_resident": True,
        "why": "a slow kernel is resident: 100% like a fast one",
        # memory utilisation high beside it flags a memory-bound kernel, one kind of slow operator;
        # a tensor-core-starved GEMM reads like a fast one on both columns
        "memory_column": "partly: a memory-bound phase reads high on memory; a starved GEMM does not show",
        "memory_tells_apart": True,
    },
    "communication wait": {
        "kernel_resident": True,
        "why": "an NCCL kernel waiting on its peers is resident: it reads as busy",
        # NVML's memory figure is the share of the sample in which device memory was read or
        # written; NCCL's kernels do move memory while they transfer (unmeasured here), so the column
        # may read low or high: either way it matches a compute phase
        "memory_column": "no, either way: low reads like a compute-bound GEMM, high like a "
        "memory-bound kernel",
        "memory_tells_apart": False,
    },
    "data wait": {
        "kernel_resident": False,
        "why": "no kernel while the batch is awaited: utilisation drops",
        "memory_column": "drops with it",
        "memory_tells_apart": True,
    },
    "scheduling waste": {
        "kernel_resident": False,
        "why": "gaps between kernels drop it, when longer than the sample period resolves",
        "memory_column": "drops with it",
        "memory_tells_apart": True,
    },
}
# The losses article B's own case study (§5.2) works on: its ladder credits communication
# (bucket overlap, NCCL tuning) and data IO with most of its gain (B15). The quick diagnosis holds
# in the article's configuration only if both columns can see those.
B2_CASE_STUDY_LOSSES = ("communication wait", "data wait")
B2_DMON_SOURCE = "NVML API reference, nvmlUtilization_t (gpu, memory; sample period 1/6–1 s)"
# Published readings of a communication wait on nvidia-smi: ranks blocked in NCCL collectives read as
# fully busy, at low power.
B2_DMON_PUBLISHED = (
    "NVIDIA/nccl#968 (a large job hung in NCCL collectives: 'GPU util is 100%', power about 70 W)",
    "cupy/cupy#3557 (three GPUs blocked in an NCCL allGather: 100% in nvidia-smi, temperature low)",
)

# Goodput at scale (published): Llama 3 405B's pre-training on up to 16K H100s (Dubey et al. 2024,
# "The Llama 3 Herd of Models", §3.3.4): in a 54-day snapshot, 466 job interruptions, 419 of them
# unexpected, and "higher than 90% effective training time". What a one-process run cannot show of
# global MFU: the wall clock lost to failures, restarts and the work redone since the last
# checkpoint. 0.90 is the stated lower bound of the share kept.
LLAMA3_GOODPUT = {
    "effective_training_time_at_least": 0.90,
    "snapshot_days": 54,
    "interruptions": 466,
    "unexpected_interruptions": 419,
}
