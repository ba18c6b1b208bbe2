"""What the source articles state for the ``parallelism`` claims, and the settings the
analytic rows read them at (article ids as in ``docs/claims.md``). Inputs under test or
named assumptions, not results."""

from mfulab.analytic.published_batches import MIN_TOKENS_PER_STEP_7B_70B
from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF
from mfulab.studykit.step_error import SWITCH_MARGIN

# A10 — article A §4.1: TP = 8 and DP = 16 on 128 cards. The article names no model for this
# example: we read it with the 13B model of its own A17/A19 example (llama2-13b shape), 4096
# tokens, micro-batch 1 and a global batch of 512 sequences (our assumption; the sensitivity
# table varies model and batch).
A10_LAYOUT = {"devices": 128, "tp": 8, "dp": 16, "devices_per_node": 8}
A10_MODEL = {"preset": "llama2-13b", "seq_len": 4096, "micro_batch": 1, "global_batch": 512}
# DP's gradients are reduced as Megatron-LM (which MindSpeed runs) reduces a bf16 run's: in fp32
# (rates.Assumptions.grad_reduce_bytes_per_elem, the step model's rule); TP's activations travel in
# bf16 (rates.Assumptions.bytes_per_elem)
A10_FRAMEWORK, A10_DTYPE = "megatron", "bf16"
# the global batches: the article's own command's 32 (its 8-card run) to 2048
A10_SENSITIVITY = {
    "presets": ("llama2-7b", "llama2-13b", "llama2-70b"),
    "global_batches": (32, 128, 512, 2048),
}
# the placement is priced on the article's own card (the 910B: HCCS inside a node, its network
# between nodes, devices.yaml) and on A100s (NVLink, InfiniBand: the step model's best-validated
# device, chapter 09)
A10_DEVICES = ("ascend-910b", "a100")
# A10's traffic row votes only the batches at or above the published floor for a 7B–70B model
# (analytic.published_batches, GPT-3's 2M tokens); the smaller ones (the article's
# 8-card command's 32 sequences, one micro-batch per DP rank on 128 cards) are printed, not voted.
A10_MIN_TOKENS_PER_STEP = MIN_TOKENS_PER_STEP_7B_70B

# A11 — article A §4.2: sequence parallelism splits LayerNorm and dropout along the sequence
# and (the article says) one all-reduce joins the slices. Korthikanti et al. 2022 §4.2.2:
# 4 all-gathers + 4 reduce-scatters per layer (forward + backward) replace TP's 4 all-reduces.
A11_KORTHIKANTI_COLLECTIVES = {"all_gather": 4, "reduce_scatter": 4}

# A12 — article A §4.2: ZeRO-3 gathers each layer's parameters on use: much less memory, more
# traffic; "在百亿参数模型、千卡规模以下这个范围, ZeRO-2 (with PP) is usually better value".
# 百亿 is 10¹⁰: a model of the ten-billion class (10–99 B parameters, the article's 13B), not
# "below 10B"; the range is that class of model on fewer than 1000 cards.
A12_RULE = {"min_params": 10e9, "max_params": 100e9, "max_cards": 1000}
# One case inside the range (a 13B on 512 cards) and one outside it (70B on 1024: past the card
# line), global batch = one sequence per card (our assumption); each at the planner's assumed DP
# overlap and with none ("ZeRO-3 needs overlap to pay off").
A12_PLANNER_CASES = ({"preset": "llama2-13b", "devices": 512}, {"preset": "llama2-70b", "devices": 1024})
A12_DP_OVERLAPS = (0.8, 0.0)
# the cards A12's overlap row and A13's layer-count rows are priced on: article A's own 910B (its
# stated cluster) first, the A100 (the step model's best-validated card) beside it
AT_SCALE_DEVICES = A10_DEVICES
# A planner margin (best ZeRO 0–2 step over best ZeRO-3 step) smaller than this decides nothing:
# the step model's held-out errors on FSDP and DeepSpeed runs are of this order (chapter 09's
# per-source table; our reading, not a fit).
A12_DECISIVE_MARGIN = SWITCH_MARGIN  # the course's rule for a switch (studykit.step_error)

# A13 — article A §4.3: no interleaving at ~40 layers; it clearly pays above ~80; start from
# 2 layers per virtual stage.
A13_LAYERS = (40, 80)
A13_LAYERS_PER_VIRTUAL_STAGE = 2
# The article's own 40-layer model (article A's 13B) at one pipeline layout, the micro-batches per
# step swept: TP 8 inside a node, PP 4 (10 layers a stage: v = 5 at 2 layers per virtual stage),
# DP 2 on 64 cards, micro-batch 1, ZeRO-1, selective recompute (our choice of layout: the article
# names none for this sentence). m = global batch ÷ DP.
A13_M_SWEEP = {
    "preset": "article-13b",
    "devices": 64,
    "layout": {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "zero_stage": 1, "recompute_policy": "selective"},
    "m": (4, 8, 16, 32, 64, 128),
    # the global batch of article A's own 13B command (analytic.articles.A_LAUNCH_COMMAND,
    # --global-batch-size 32): m = 16 at DP 2, the sweep's stated row
    "stated_global_batch": 32,
}

# A15 — article A §5.2, three sentences: offload "significantly adds communication"; the host
# link's bandwidth and latency are "完全不在一个量级" (not in the same order of magnitude) as the
# card-to-card link's, so overdoing it turns training I/O-bound; use it only when memory is just
# short ("my own experience": the article's words alone). Datasheet figures (per direction):
# PCIe 3.0 / 4.0 / 5.0 x16 15.75 / 31.5 / 63 GB/s (PCI-SIG: 8, 16, 32 GT/s × 16 lanes, 128b/130b);
# the card-to-card links are devices.yaml's intra_node figures (910B HCCS, A100 NVLink3, H100
# NVLink4). The stated case is article A's own: its 13B on one machine of 8 910B cards, TP 8,
# DP 1 (its launch command, analytic.articles.A_LAUNCH_COMMAND: global batch 32, micro-batch 1, no
# --use-flash-attn, the recompute flags inert), every card holding 1/8 of the weights and all of
# their optimizer states (DP 1: ZeRO has nothing to shard over). Its step comes from the course's
# step model at that command, not from the article's 2.4 s (its MFU example, claim A19: that
# step implies an MFU of 1.66, impossible), which is kept beside it. Host link: PCIe 4.0 x16 (our
# assumption: the Kunpeng 920 hosts of Atlas 800T A2 servers are PCIe 4.0); 3.0 and 5.0 are its
# sensitivity. Article B's 7B (§5.1: ZeRO-2 with TP 4 on 64 A100s, so DP 16 shards the states; a
# 9 s step) is context.
A15_HOST_LINKS = {"pcie3_x16": 15.75e9, "pcie4_x16": 31.5e9, "pcie5_x16": 63.0e9}
A15_STATED_HOST_LINK = "pcie4_x16"
A15_CASES = (
    {
        "name": "article A: 13B, 8 × 910B, TP 8, DP 1, global batch 32",
        "preset": "article-13b",
        "tp": 8,
        "dp": 1,
        "layout": {
            "n_devices": 8,
            "tp": 8,
            "pp": 1,
            "micro_batch": 1,
            "global_batch": 32,
            "device": "ascend-910b",
            "devices_per_node": 8,
            "attention": "naive",
            "recompute": "none",
        },
        "article_step_s": 2.4,
        "links": ("pcie3_x16", "pcie4_x16", "pcie5_x16"),
        "device": "ascend-910b",
        "stated": True,
    },
    {
        "name": "article B: 7B, 64 A100, TP 4, DP 16, 9 s step",
        "preset": "llama2-7b",
        "tp": 4,
        "dp": 16,
        "step_s": 9.0,
        "links": ("pcie4_x16",),
        "device": "a100",
        "stated": False,
    },
)
# "Overdoing offload turns training I/O-bound" is conditional: how much the offload weighs
# depends on the step it joins, which shrinks with the global batch (fewer micro-batches on the
# same cards). The §6.1 command's 32 is the stated case; the row is read at smaller batches of
# the same command too, each a scenario the sentence covers (our choice of values)
A15_GLOBAL_BATCHES = (32, 16, 8)
# 量级, order of magnitude: a factor of 10 on the literal reading. 完全不在一个量级 is also an
# idiom ("not in the same league"), under which any several-fold gap holds: the two readings are
# both shown. The pairings the ratio is read over: the article's card with each host link, and
# two GPU generations for context (devices.yaml keys).
A15_ORDER_OF_MAGNITUDE = 10.0
# The idiom's reading: two figures are in the same order of magnitude when log10 of their ratio
# rounds to 0, i.e. the ratio is under √10 (our reading of "not in the same order", short of 10×)
A15_ROUNDED_ORDER = 10**0.5
# Cards behind one host uplink when every card offloads at once: a DGX A100 hangs two A100s (and
# two NICs) off each of its four PCIe Gen4 switches, one x16 uplink to the CPU per switch (NVIDIA
# DGX A100 System Architecture whitepaper, 2020, system topology). The 910B's Atlas 800 topology
# is not published at this level: 1 (a link per card) is its datasheet reading.
A15_CARDS_PER_HOST_UPLINK = {"a100": 2}
A15_LINK_PAIRS = (
    ("ascend-910b", "pcie4_x16", True),
    ("ascend-910b", "pcie5_x16", True),
    ("a100", "pcie4_x16", False),
    ("h100-sxm", "pcie5_x16", False),
)
# I/O-bound (IO 密集型): the host transfers and host work take at least half of the step that
# contains them, as long as the rest of the step (our line); a third, a milder reading, votes
# beside it as an assumed input.
A15_IO_BOUND_SHARE = 0.5
A15_IO_BOUND_SHARE_LOW = 1 / 3
# ZeRO-Offload's host-side Adam reads and writes fp32 parameters, momentum and variance and reads
# the fp16 gradient: 4·2 + 4·2 + 4·2 + 2 = 26 bytes per parameter, memory-bound. Host memory
# bandwidth per card: a 2-socket host with 8 channels of DDR4-3200 per socket (2 × 204.8 GB/s)
# shared by 8 cards, 51.2 GB/s each (our assumption; a DGX A100's 2 × AMD EPYC 7742).
A15_CPU_ADAM_BYTES_PER_PARAM = 26
A15_HOST_MEMORY_BYTES_PER_S_PER_CARD = 2 * 204.8e9 / 8
# The share of that bandwidth the host Adam reaches (assumed, varied): 1 is the bound, a fused,
# vectorised CPU Adam streaming at the DRAM's peak; an unfused one that makes several passes over
# its tensors, or a host whose cores cannot saturate the channels, reaches a fraction of it.
A15_HOST_ADAM_BANDWIDTH_SHARES = (1.0, 0.5, 0.2)

# B10 — article B §3.4: the all-to-all is costlier than a cross-machine all-reduce; uneven
# routing makes cards wait for the most loaded expert. A rank waits when it finishes its
# experts before the most loaded one: our threshold, at least half of the wait the imbalance
# predicts (the rest is noise of the emulated compute).
B10_WAIT_SHARE = 0.5

# The cluster the at-scale rows are computed on (article B's cards; the articles give no link
# figure): devices.yaml's `a100` (A100 80 GB SXM: 312 TFLOP/s dense bf16, MAMF 271.2, NVLink 3
# inside a node, one 200 Gb/s HDR port per GPU between nodes, each with its source there), 8 per
# node. The planner's one assumption of its own: GEMMs sustain 0.8 of the device's MAMF (the
# share chapter 09 fits on the Korthikanti et al. rows is of that order; the sensitivity table
# varies it); every other figure is rates.Assumptions' default.
CLUSTER = {
    "device": "a100",
    "devices_per_node": 8,
    "assumptions": {"matmul_share_of_mamf": AT_SCALE_MATMUL_SHARE_OF_MAMF},
}

# The planner's answers the notebook shows: the article's 13B on 8 cards as its §6.1 command runs
# it (the 40 × 5120 ``article-13b``, --global-batch-size 32; A17/A19), its A10 example (13B on 128
# cards: what layout the planner picks against TP 8 × DP 16), and a 70B on 1024 cards; global
# batch there: one sequence per card, at least 64 (our assumption), except the A10 case, which
# keeps A10's 512 sequences (4 per card).
PLANNER_CASES = (
    {"preset": "article-13b", "devices": 8, "global_batch": 32},
    {"preset": "llama2-13b", "devices": 128, "global_batch": 512},
    {"preset": "llama2-70b", "devices": 1024, "global_batch": 1024},
)
# The planner's assumptions varied one at a time around their defaults (layouts.plan), for the
# 70B case: each row's best layout and step.
PLANNER_SENSITIVITY = {
    "matmul_share_of_mamf": (0.6, 0.8, 1.0),
    "dp_overlap": (0.0, 0.5, 0.8, 1.0),
    "memory_margin": (0.05, 0.1, 0.2),
    "alpha_inter_s": (7.0e-6, 14.0e-6, 28.0e-6),
    "link_efficiency": (0.6, 0.78, 0.9),
}

# B10 at published MoE configurations (article B §3.4 states none: "每轮迭代都伴随着大量的all-to-all
# 通信，这比多机间的allreduce还要昂贵", every iteration carries a lot of all-to-all traffic, costlier than a
# cross-node all-reduce). Each case is a published training layout, run on the course's one step
# model (step.step_time, chapter 09) in BF16, nothing overlapped, so each term is what it costs:
# the expert-parallel all-to-alls per step against the data-parallel gradient reduction per step.
# - DeepSeek-V3 on 2048 H800s (DeepSeek-AI 2024, arXiv:2412.19437v2, §3.1-3.2): 16-way PP, 64-way
#   EP over 8 nodes, ZeRO-1 DP (128), no TP; global batch 15360 sequences of 4096 (§4.2); micro-batch
#   1 (our assumption), selective recompute (§3.4.1's RMSNorm and MLA up-projections); 61 layers
#   over 16 stages with fewer on the end stages. Its §3.2.1 states the measured consequence: cross-node
#   EP gives "an inefficient computation-to-communication ratio of approximately 1:1".
# - Qwen3-30B-A3B on 16 H100s, two nodes (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive
#   "26.04.01 NeMo Container", DGX-H100 16 GPUs; its workload config QWEN3_30B_A3B_PRETRAIN_CONFIG_H100):
#   TP 1, PP 1, EP 16, global batch 1024, micro-batch 1, no recompute, Megatron's distributed optimizer.
# B10 decided on bytes (no timing split): the all-to-alls' bytes that cross nodes against every
# byte of the DP reductions, per device and step. Decisive beyond an order of magnitude, our line:
# it covers DeepSeek-V3's node-limited routing, which sends a token's activations to at most 4
# nodes once each (≤ 4h bytes against top-8 × h counted here: at most halves them), and an
# all-to-all's per-byte cost no lower than a ring all-reduce's (no in-node reduction shrinks it).
B10_BYTES_DECISIVE = 10.0
B10_SCALE_CASES = (
    {
        "name": "DeepSeek-V3, 2048 H800 (PP 16, EP 64, DP 128)",
        "preset": "deepseek-v3",
        "layout": {
            "n_devices": 2048,
            "tp": 1,
            "pp": 16,
            "expert_parallel": 64,
            "global_batch": 15360,
            "micro_batch": 1,
            "device": "h800",
            "devices_per_node": 8,
            "recompute": "selective",
            "framework": "megatron",
            "zero_stage": 1,
            "uneven_end_stages": True,
        },
        "published_compute_over_comm": 1.0,  # §3.2.1, "approximately 1:1"
    },
    {
        "name": "Qwen3-30B-A3B, 16 H100 on two nodes (EP 16)",
        "preset": "qwen3-30b-a3b",
        "layout": {
            "n_devices": 16,
            "tp": 1,
            "pp": 1,
            "expert_parallel": 16,
            "global_batch": 1024,
            "micro_batch": 1,
            "device": "h100-sxm",
            "devices_per_node": 8,
            "recompute": "none",
            "framework": "megatron",
            "zero_stage": 1,
        },
        "published_compute_over_comm": None,
    },
)
