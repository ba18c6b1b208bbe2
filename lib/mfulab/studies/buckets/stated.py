"""What the source articles state for the ``buckets`` claims, the interconnect the simulator
is run with at scale, and the ranges its sensitivity table sweeps (article ids as in
``docs/claims.md``). These are inputs under test or named assumptions, not results."""

from mfulab.analytic.articles import B_RUN
from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF
from mfulab.units import MB

# A6 — article A §2.3: one all-reduce per parameter tensor ("hundreds to a thousand tensors"
# for 13B) drowns in per-call set-up costs; 20–40 MB buckets are the sweet spot, and at about
# a thousand cards the bucket size moves MFU by 5–8 points. "A disaster" is our reading: at
# least 1.5× slower than the best cap.
A6_DISASTER_RATIO = 1.5
A6_SWEET_SPOT_BYTES = (20 * MB, 40 * MB)  # the article's "20–40 MB" (decimal MB: 19.1–38.1 MiB)
A6_MFU_POINTS = (5.0, 8.0)  # "moves MFU by 5–8 points"
A6_CARDS = 1024  # "about a thousand cards"
# Article A §2.1 trains its 13B on 32 cards ("在 32 卡环境训练一个 13B 模型"): at TP 8, DP 4. The
# per-tensor sentence names no scale; this cluster is priced beside the thousand cards, not voted.
A6_SMALL_CARDS = 32
# A6's at-scale runs take a realistic global batch: article A states none for its thousand-card
# sentence (its 8-card command's 32 sequences is one node's). Llama 2 trained every size, 7B to
# 70B, at 4M tokens per step (Touvron et al. 2023, §2.2 and Table 1: "global batch-size of 4M
# tokens"): 1024 sequences of 4096 tokens. Each DP rank accumulates 1024 ÷ (DP × micro-batch)
# micro-batches, at least one and at least the pipeline's stages (13B at 1024 cards, TP 8: 8);
# only the last one's backward overlaps the all-reduce. One micro-batch per step, the bucket
# cap's most exposed regime, is a row of the sensitivity table.
# Article A §1: after moving to the 910B with MindSpeed, "MFU 拉到了 45% 以上" (above 45%): the
# regime its thousand-card tuning sentence comes from, set beside the simulated stated case's MFU.
A_REPORTED_MFU = 0.45
A6_GLOBAL_BATCH_SEQUENCES = 1024
A6_GLOBAL_BATCH_SOURCE = "Touvron et al. 2023 (Llama 2), Table 1: every size at a global batch of 4M tokens"
# A6's per-tensor sentence at the article's own configuration: its 13B (config ``article-13b``,
# the 40 × 5120 model of its launch command, the preset chapters 02 and 04 use) trained at tensor
# parallelism 8 (its launch command, §6.1; the course's A17), so DP = A6_CARDS / 8 ranks each
# all-reduce the gradients of 1/8 of the model.
A6_PER_TENSOR_CASE = {"preset": "article-13b", "tp": 8}
# A bucket cap below the smallest gradient tensor: DDP closes a bucket at every tensor, i.e. one
# all-reduce per parameter tensor (the case the claim calls a disaster).
PER_TENSOR_CAP_MB = 1e-6
# Megatron-Core's default DDP bucket when --ddp-bucket-size is unset: max(40,000,000, 1,000,000 × DP)
# parameters (megatron/core/distributed/distributed_data_parallel.py and its config's docstring:
# "larger DP sizes need larger buckets to ensure collectives do not become latency-bound"); with
# --overlap-grad-reduce off, one bucket. MindSpeed runs Megatron-Core's DDP.
MEGATRON_BUCKET_RULE_SOURCE = (
    "Megatron-Core DistributedDataParallel (megatron/core/distributed/distributed_data_parallel.py; "
    "DistributedDataParallelConfig.bucket_size): max(40,000,000, 1,000,000 × DP) parameters when unset"
)
# MindSpeed's own DDP initialiser keeps that rule: Ascend/MindSpeed
# mindspeed/core/distributed/distributed_data_parallel.py @ 3ada125a (distributed_data_parallel_init:
# bucket_size = max(40000000, 1000000 × DP) when unset, None when overlap_grad_reduce is off)
MINDSPEED_BUCKET_RULE_SOURCE = (
    "MindSpeed's own DDP initialiser (Ascend/MindSpeed mindspeed/core/distributed/"
    "distributed_data_parallel.py @ 3ada125a, distributed_data_parallel_init): the same rule, and no "
    "bucketing when overlap_grad_reduce is off"
)
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
B8_STATED = {"ranks": B_RUN["n_devices"], "default_cap_mb": 25, "better_caps_mb": (50, 100)}
# B8's stated case is article B's own run (§1 and §5): 64 A100 80G, 8 nodes of 8, "IB 200Gbps",
# the 7B at TP 4 (DP 16), global batch 512 sequences of 4096 tokens; step 2 of §5.2 (the cap
# 25 → 50 with gradient_as_bucket_view and static_graph) took the step from 9.4 s to 9.0 s.
# The network is one 200 Gb/s port per node (B9: the two-node busbw's "physical limit" is
# 25 GB/s), shared by its 8 GPUs. The micro-batch is not stated: 1 sequence (assumed; then
# each DP rank accumulates 512 / 16 = 32 micro-batches and only the last one's backward overlaps
# the all-reduce); the accumulation rows of the sensitivity table vary it.
B8_ARTICLE = {
    "global_batch": B_RUN["sequences_per_step"],  # analytic.articles: 512 sequences of 4096 tokens
    "micro_batch": 1,
    "network_bytes_per_s": 25e9 / 8,
    "step_before_s": 9.4,
    "step_after_s": 9.0,
    "step2_cap_mb": 50,  # step 2 set 50 MB (§5.2), B8's sentence "50 to 100"
}
# Article B's network before and after §5.2's step 3 (NCCL's GDR and buffers), as §3.3 measured
# it: the two-node all-reduce busbw "只有11GB/s" with NCCL's defaults, 21 GB/s after tuning; and
# what step 3 did to the step (§5.2: 9.0 → 8.7 s). B8's step 2 ran on the untuned network
# (b8_consistency holds every reading of the run against both).
B8_BUSBW_GBPS = {"before": 11.0, "after": 21.0}
B8_STEP3_S = {"before": 9.0, "after": 8.7}
# The step-2 row: the article's 0.4 s is explained by its mechanisms when the simulated saving of
# the cap plus the most the two flags can save (B6's copy bound) reaches at least half of it
# (our reading: the rest could be run-to-run noise the article does not report).
B8_STEP2_EXPLAINED_SHARE = 0.5
# The smallest change of a step the article could see: it reports steps to 0.1 s on 9-10 s
# steps, about 1%. A simulated gain below it is no gain the article measured (B8's "tied").
B8_VISIBLE_SHARE = 0.01

# B8's sentence is what article B saw on a timeline (§3.1: "默认25MB时通信等待尾巴明显，改成50MB到
# 100MB后部分层的通信能更平滑地跟反向计算重叠": at 25 MB an obvious communication-wait tail, at
# 50-100 MB some layers' communication overlapped the backward more smoothly). Its quantity is the
# tail: the all-reduce still running after the backward. Our reading of "smoother": the tail
# shrinks by at least a tenth of itself, a change a profiler timeline shows (assumed; the row
# gives the largest cut found beside it).
B8_VISIBLE_TAIL_CUT = 0.10
# The micro-batch reads two ways: one sequence (assumed, the stated case: 32 micro-batches per DP
# rank) or the 8 of §4's DataLoader(batch_size=8) (512 / (16 x 8) = 4 micro-batches per rank).
B8_MICRO_BATCH_READINGS = (1, 8)
# "IB 200Gbps" reads two ways, one port per node or one per GPU (a DGX A100's eight): §3.3's
# two-node busbw (21 GB/s, "close to the 25 GB/s physical limit") is one port's figure either way
# if its test ran one GPU per node, so it does not settle the count; §5.2's own step times do
# (``b8_consistency``), and B8 is decided on the readings that hold them.

# B6 — article B §2.2: gradient_as_bucket_view saves a copy, static_graph spares repeated
# graph analysis; "这些参数对大规模训练的性能影响不算巨大，但组合起来可以省掉好几个百分点的开销"
# (not huge for large-scale training, but together they save several percentage points).
# Our reading of "several percent": at least 3%, a 1.03× speed-up.
B6_SEVERAL_PERCENT_RATIO = 1.03
# The mechanism's bound at the article's scale (article B §5.2: 7B on 64 × A100 80G at TP 4, 9.0 s
# per step after the DDP change, articles.B15_STEPS): each GPU holds a quarter of the gradients
# (TP 4), in fp32 (the larger case under mixed precision); the copy the flag avoids (DDP's copy
# back to .grad; the copy in becomes an in-place division) at the step model's memory rate for the
# card (``rates.machine_rates``: its ``memory_efficiency`` × devices.yaml ``a100``'s 2.039 TB/s).
B6_ARTICLE = {"preset": "llama2-7b", "grad_bytes_per_param": 4, "device": "a100", "tp": 4, "step_s": 9.0}
# The bound's sensitivity to that achieved share of the datasheet bandwidth (the step model assumes
# 0.85, rates.Assumptions; a copy kernel's share differs by size and kernel): the verdict holds
# only where every share keeps the bound under "several percent".
B6_MEMORY_EFFICIENCIES = (0.7, 0.85, 1.0)

# The case the simulator is run at scale (the study's ``scale_*`` defaults): article B's A100s
# (``devices.yaml`` key ``a100``: peak, MAMF, HBM, NVLink 3 inside a node and one 200 Gb/s HDR
# port per GPU between nodes, all from the table), the course's step model with its GEMMs at 0.8
# of the A100's MAMF (chapter 09 fits 0.81 on published Megatron runs; chapter 08 states 0.8),
# one 4096-token sequence per rank and micro-batch, and each bucket's all-reduce by the faster
# of NCCL's ring and tree (NCCL's own choice by message size and rank count). Per-call latency
# and link efficiency are the step model's ``Assumptions`` (NCCL's tuning model).
# Gradients are bucketed and all-reduced in fp32 (4 bytes): PyTorch DDP under autocast keeps fp32
# parameters, so its gradients and buckets are fp32; Megatron-LM (and MindSpeed, which runs it)
# reduces bf16 models' gradients in fp32 unless --grad-reduce-in-bf16 is given (chapter 02's A4
# states the same); bf16 reduction is a row of the sensitivity table.
SCALE_GRAD_BYTES_PER_ELEM = 4
SCALE_CASE = {
    "device": "a100",
    "grad_bytes_per_elem": SCALE_GRAD_BYTES_PER_ELEM,
    "matmul_share_of_mamf": AT_SCALE_MATMUL_SHARE_OF_MAMF,
    "micro_batch": 1,
    "algorithm": "best",
}

# A6 is article A's claim, made on Ascend 910B cards (its §1 and launch command): A6's rows run
# on the 910B's devices.yaml entry (HCCS inside a node, 200 Gb/s RoCE between nodes, both
# approximate) in place of SCALE_CASE's device; HCCL's per-call latencies are priced by NCCL's
# model (assumed: Huawei publishes none), and article B's A100s are a sensitivity row.
A6_DEVICE = "ascend-910b"

# The layouts the simulator runs at scale: each model at its tensor parallelism, DP = cards ÷ TP.
# The articles' own: article A's 13B at TP 8 (its launch command, §6.1: --tensor-model-parallel-size
# 8), article B's 7B at TP 4 (§5: "ZeRO-2加张量并行4" on 64 A100s; the simulator prices DDP's
# buckets at ZeRO 0, so its ZeRO-2 is not modelled); the 70B at TP 8, one node's width (assumed:
# no article runs a 70B, and at TP 1 its 16 bytes per parameter fit no 80 GB card). Pure data
# parallelism (TP 1 for every model) is a row of the sensitivity table.
SCALE_TP = {"llama2-7b": 4, "article-13b": 8, "llama2-70b": 8}
STATED_TP_FALLBACK = 1  # a model the articles do not run: pure data parallelism

# The sensitivity table: one assumption varied at a time from SCALE_CASE (each a field of
# rates.Assumptions or a layout input).
# - NCCL's per-call latencies (base, ring and tree steps inside and between nodes) all scaled
#   by 0.25, 2, 4 and 8 (at 1024 ranks NCCL picks the tree, so a ring step alone would test
#   nothing; 4 and 8 stand for HCCL, whose per-call cost on the 910B is not published);
# - links: NVLink 3 for every rank (300 GB/s per direction, 3 µs per step: true only for ≤ 8
#   ranks, an upper bound on the interconnect); InfiniBand NDR 400 Gb/s (50 GB/s); one
#   200 Gb/s port per node, as article B's two-node busbw suggests (B9);
# - the GEMMs' share of MAMF, 0.5 and 1.0;
# - tensor/pipeline parallel sharding of the gradients, the same for every model in place of
#   SCALE_TP: pure data parallelism (TP 1), TP 4, TP 8, TP 8 × PP 4; DP = cards / (TP·PP);
# - gradient accumulation: only the last micro-batch's backward overlaps the all-reduce (1: none,
#   the regime where the cap matters most; A6's stated case accumulates to A6_GLOBAL_BATCH_SEQUENCES,
#   B8's to its 512);
# - the gradients reduced in bf16 (Megatron's --grad-reduce-in-bf16) instead of fp32;
# - the all-reduce algorithm: ring only (NCCL_ALGO=Ring).
SENSITIVITY = {
    "algorithm": ("ring",),
    # × 4 and × 8: a collective library with a heavier fixed cost per call than NCCL's model (article
    # A's per-tensor "disaster" is about HCCL's set-up per call on the 910B, for which no source this
    # course cites publishes a latency): where a heavier fixed cost would move the answer
    "nccl_latency_scale": (0.25, 2.0, 4.0, 8.0),
    "links": {
        "NVLink (A100, all ranks)": (300e9, 3e-6),
        "InfiniBand NDR 400 Gb/s": (50e9, None),
        # article B §3.3: "IB 200Gbps" with a two-node busbw of 11 → 21 GB/s against 25 GB/s (B9):
        # one 200 Gb/s port for the node's 8 GPUs, each GPU's share an eighth of it
        "one 200 Gb/s port per node of 8 (article B)": (25e9 / 8, None),
        # devices.yaml's a100 entry: one 200 Gb/s HDR port per GPU (a DGX A100's eight)
        "one 200 Gb/s port per GPU": (25e9, None),
    },
    "matmul_share_of_mamf": (0.5, 1.0),
    "sharding": ((1, 1), (4, 1), (8, 1), (8, 4)),
    "accumulation": (1, 4, 16),
    "grad_bytes_per_elem": (2,),
}
# sensitivity rows that probe the model rather than read the article: no cluster of about a thousand
# cards puts every rank on NVLink. Reported, never voted (round sixteen's reader of chapter 05)
PROBE_LINKS = ("NVLink (A100, all ranks)",)
