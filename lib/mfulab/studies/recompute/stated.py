"""What the source articles state for the ``recompute`` claims, the planner cases built from
them, and the published constants the checks compare against (article ids as in
``docs/claims.md``). These are inputs under test or cited figures, not results."""

from pathlib import Path

import yaml

from mfulab.analytic.config import preset
from mfulab.studykit.step_error import SWITCH_MARGIN

# The planner's cases (the ``planner_cases`` default), with their sources, in planner_cases.yaml.
PLANNER_CASES = tuple(yaml.safe_load(Path(__file__).with_name("planner_cases.yaml").read_text()))

# B7 — article B §2.3 (and §6.3): full recompute took MFU from 50% to 40% (an anecdote), in
# global MFU ("在全局MFU的公式里"): the whole step, of which recompute stretches only the compute.
B7_MFU_PERCENT = (50, 40)
# The compute stream's share c of the anecdote's step (global MFU = local MFU × c). The anecdote
# states its global 50% but no local MFU, so c lies in [0.50, 1]: at least 0.50, since local MFU
# cannot pass 100%. Article B's only local figure, §1.1's illustration (local 80% where global
# reads 44%), read at the anecdote's own 50% gives c = 0.50 / 0.80 = 0.625: a reading, not a
# stated share. A compute slowdown r stretches the step by 1 + (r − 1)·c.
B7_ARTICLE_LOCAL_MFU = 0.80
B7_MIN_COMPUTE_SHARE = B7_MFU_PERCENT[0] / 100  # local MFU ≤ 100%
B7_ARTICLE_COMPUTE_SHARE = B7_MFU_PERCENT[0] / 100 / B7_ARTICLE_LOCAL_MFU
# What full recompute costs in FLOPs by Megatron's count: 96·B·s·l·h²(…) per iteration with
# full recompute (Narayanan et al. 2021, Eq. 3) against 72·B·s·l·h²(…) without (Korthikanti
# et al. 2022, Sec. 6): one more forward pass of every layer, +33% FLOPs. At equal hardware
# efficiency the step takes 96/72 = 1.33× as long and MFU falls to 72/96 of its value.
MEGATRON_FULL_RECOMPUTE_FLOPS_RATIO = 96 / 72
# B7 at article B's own configuration: its §5 case (64 A100 80GB, 8 per node, IB 200 Gb/s, a 7B
# dense model, sequence 4096, ZeRO-2 with TP 4, global batch 512) is this planner case; its SDPA
# runs a flash kernel (§5.2, step 1). "Selective recompute" is read as Megatron's (Korthikanti's
# attention core) and as the article's own ("the attention module and the FFN's first layer"),
# which frees more than the MLP alone and less than full recompute: both are priced as bounds.
B7_CONFIG_CASE = "7B TP4 dp16 A100-80GiB"
# Two more readings of B7's case, each a scenario that votes. "IB 200Gbps" read as one port per
# node of 8 GPUs (article B §3.3 puts its two-node busbw's physical limit at 25 GB/s; chapter 05's
# B8 takes it as its stated case), against the step model's A100 entry of one port per GPU. And
# "the batch doubled" read as the global batch: the recompute policy runs twice the micro-batch at
# twice the global batch (the same accumulation), no recompute its own largest at 512 sequences.
B_NODE_PORT_BYTES_PER_S = 25e9 / 8
B7_NETWORK_READING = "network: one 200 Gb/s port per node of 8 (article B §3.3, chapter 05's reading)"
B7_GLOBAL_BATCH_READING = "the batch read as the global batch: doubled with the micro-batch"
B7_CONFIG_POLICIES = ("selective", "mlp", "full")
# Where a policy doubles the micro-batch, its tokens/s against no recompute decide only beyond
# this margin: the step model's held-out error is of this order (chapter 09), as A12's margin
B7_CONFIG_DECISIVE_MARGIN = SWITCH_MARGIN  # the course's rule for a switch (studykit.step_error)

# A14 — article A §5.1: "for models around 100B parameters" recompute the MLP and keep the
# attention activations. Its premise (the attention keeps "the attention-score intermediates")
# holds only without a fused kernel; article A's own runs use Flash Attention (§3.2, §6.2). Both
# are judged, each as its own row. The check takes one layer (bf16, dropout, Table 2) of two shapes: the
# 145.6B GPT of Narayanan et al. 2021, Table 1 (96 heads, hidden 12288, 80 layers, vocabulary
# 51,200, sequence 2048: the published Megatron configuration nearest 100B; its layer is
# GPT-3 175B's), and the article's own 13B (40 heads, hidden 5120, sequence 4096).
A14_PRESET = "article-13b"
A14_CLAIM_CONFIGS = (
    preset("gpt3-175b").with_(n_layers=80, vocab_size=51200, name="megatron-145.6b"),
    preset(A14_PRESET),
)
# Sequence lengths of the sensitivity table (the per-FLOP comparison depends on s when the
# attention is fused: the MLP frees 19·s/16·a times more per FLOP than the core).
A14_SEQ_LEN_GRID = (1024, 2048, 4096, 8192)
# with Flash Attention the MLP and the whole attention block free nearly the same bytes per FLOP:
# a ratio within 20% either way decides nothing (the same margin as A12's throughput sentence)
A14_DECISIVE_MARGIN = 0.2
# A14 priced in seconds as well as per FLOP: what each re-run costs on the article's own card
# (article A trains on Ascend 910B), from the course's one step model (``step_terms.layer_terms``:
# the GEMMs at their share of the card's MAMF, the memory-bound ops at its bandwidth), one layer
# at TP 1 as Table 2 counts it
A14_DEVICE = "ascend-910b"

# A17 — article A §6.1: the first planner case is the launch command (planner_cases.yaml).
# ``--recompute-method uniform --recompute-num-layers 12`` has two readings:
# - ``uniform:12``: what Megatron-LM and MindSpeed do (megatron/core/transformer/
#   transformer_block.py, ``_checkpointed_forward``): the 40 layers are checkpointed in
#   chunks of 12 (12, 12, 12, 4), so *every* layer is recomputed, and one chunk's activations
#   are alive while that chunk runs its backward;
# - ``block:12``: what ``--recompute-method block`` does, and what the article's own
#   explanation says the flag controls: "控制重计算的层数" (it sets how many layers are
#   recomputed; tune it from more to fewer by measured memory): the first 12 layers.
# - ``none``: the command with the flags Megatron-LM does not know dropped (its parser refuses
#   them): --recompute-method and --recompute-num-layers act only with
#   --recompute-granularity full (transformer_block.py checkpoints only when
#   ``recompute_granularity == 'full'``), which the command omits, so nothing is recomputed.
#   The command's other flags as Megatron-LM reads them: ``analytic.articles.A_LAUNCH_COMMAND``.
A17_CASE = PLANNER_CASES[0]
A17_READINGS = {"uniform": "uniform:12", "block": "block:12", "as written": "none"}
A17_ARTICLE_READING = "block"  # the article's explanation, not its command
A17_MICRO_BATCH = 1
# The gradients' bytes per parameter in A17's model states, an assumed input that votes (the
# verdict is confirmed only where every value fits): the memory model keeps gradients in the
# weights' 2 bytes (Rajbhandari et al. 2020, Fig. 1: (2 + 2 + K)·Ψ, 16 B/param); Megatron-LM
# and MindSpeed, the article's stack, accumulate a bf16 model's gradients in fp32 ``main_grad``
# buffers (megatron/training/arguments.py: bf16 "requires gradient accumulation and all-reduce
# to be done in fp32"; the step model reduces them in 4 bytes, ``Assumptions.grad_reduce_bytes_per_elem``
# and chapters 02/05), 4 bytes: 18 B/param.
A17_GRAD_BYTES_PER_PARAM = (2, 4)
MODEL_STATE_GRAD_BYTES = 2  # what ``memory.model_state_bytes_per_device`` counts

# A12 — article A §4.2 (also article B §6.3): ZeRO-3 over ZeRO-2 for the 13B model at TP = 8
# on 64 GB cards at several data-parallel widths, with the global batch of the article's
# command (32 sequences, micro-batch 1): dp = 4 accumulates 8 micro-batches per optimizer step.
# "Zero-3 省下来的显存确实很可观" (the memory ZeRO-3 saves is indeed considerable), for ~10B models
# below a thousand cards: the saving over ZeRO-2 is read as considerable from this share of the
# card (our line, assumed); the article's command runs TP 8, the other tensor-parallel widths are
# the readings it leaves open (the saving is the bf16 parameters, 2Ψ/tp less one shard).
A12_CONSIDERABLE_SHARE_OF_CARD = 0.10
A12_TP_READINGS = (4, 2, 1)
A12_ZERO = {
    "preset_name": "article-13b",
    "tp": 8,
    "dp_values": [4, 8, 16, 32],
    "device_memory_gib": 64,
    "global_batch": 32,
    "micro_batch": 1,
}

# A12's throughput sentence (article A §4.2: for ~10B models below a thousand cards ZeRO-2 is
# usually the better buy, ZeRO-3's parameter all-gathers cost too much): the step model at the
# article's 13B on its 910B at TP 8 (its launch command), at cluster sizes below a thousand cards,
# micro-batch 1, with two global batches (assumed: the article states none at this scale): 4
# micro-batches per DP rank, and 1024 sequences. Both stages run DeepSpeed's collectives (the
# command's --zero-stage is DeepSpeed's flag) and unfused attention (the command passes no
# --use-flash-attn, as chapter 04's A17 and chapter 02's A4 read it).
A12_THROUGHPUT = {
    "preset_name": "article-13b",
    "device": "ascend-910b",
    "tp": 8,
    "cards": (64, 128, 256, 512),
    "micro_batches_per_rank": 4,
    "global_batch": 1024,
    "matmul_share_of_mamf": 0.8,
    "frameworks": ("deepspeed", "deepspeed"),
    "attention": "naive",
}
# What the stated case assumes and the article does not state ("assumed": voted by
# verdicts.at_stated_case), and what changes the command itself ("configuration": reported, not
# voted), one at a time at the smallest and largest cluster (the stated case's other inputs kept):
# each stage in the framework usually run for it (DeepSpeed ZeRO-2, FSDP ZeRO-3), FSDP for both
# (SHARD_GRAD_OP against FULL_SHARD), Flash Attention (the article's §3.2 runs), a 400 Gb/s
# network per card (50 GB/s) instead of the 910B's 200 Gb/s, one micro-batch per DP rank (no
# accumulation: ZeRO-3 then gathers once per step), and micro-batch 4 (the command states 1).
A12_THROUGHPUT_VARIATIONS = (
    {"name": "DeepSpeed ZeRO-2, FSDP ZeRO-3", "frameworks": ("auto", "auto"), "kind": "assumed"},
    {"name": "FSDP for both stages", "frameworks": ("fsdp", "fsdp"), "kind": "assumed"},
    {"name": "Flash Attention", "attention": "fused", "kind": "assumed"},
    {"name": "400 Gb/s per card", "network_bytes_per_s": 50e9, "kind": "assumed"},
    {"name": "no accumulation", "micro_batches_per_rank": 1, "kind": "assumed"},
    {"name": "micro-batch 4", "micro_batch": 4, "kind": "configuration"},
)
# A margin (ZeRO-3's step over ZeRO-2's) within this of 1 decides nothing: the step model's
# held-out errors on FSDP and DeepSpeed runs are of this order (chapter 09's per-source table;
# our reading, not a fit). Chapter 08 judges its A12 row with the same figure (a test pins them).
A12_DECISIVE_MARGIN = SWITCH_MARGIN  # the course's rule for a switch (studykit.step_error)

# Memory the planner keeps free on every card: allocator fragmentation, the runtime's context
# and communication buffers. Rajbhandari et al. 2020 (ZeRO), Sec. 3.2: fragmentation caused
# "out of memory issue with over 30% of memory still available in some extreme cases". The
# default (10%) is our assumption; the sensitivity tables run 0 to that 30%.
FRAGMENTATION_MARGIN_GRID = (0.0, 0.1, 0.2, 0.3)

# The planner runs the course's step model (step.step_time); what it assumes without a
# measurement is varied one at a time in the sensitivity tables: the GEMMs' share of the
# device's MAMF (0.8 stated, as chapter 08 states it; chapter 09 fits 0.81 on published
# Megatron runs) scales every plan nearly alike, and t₀, one GEMM kernel's launch and tail
# (5 µs stated: a CUDA launch round trip), decides how much a small micro-batch under-fills
# the device, hence the choice between recomputing and a smaller micro-batch.
MATMUL_SHARE_GRID = (0.5, 0.65, 0.8, 1.0)
MATMUL_LATENCY_GRID_S = (5e-6, 20e-6, 50e-6)

# A12: micro-batches accumulated per optimizer step in the traffic sensitivity table.
ACCUMULATION_STEPS_GRID = (1, 2, 4, 8, 16, 32)

# B7, published: Korthikanti et al. 2022 (MLSys 2023, arXiv:2205.05198), Table 4: one transformer
# layer of the 22B model on A100s (TP 8), forward + backward in ms: no recompute 19.6, full
# recompute 27.2, selective 20.9, selective + sequence parallelism 20.3 (the paper attributes full
# recompute's 39% over the FLOP count's 33% to lost overlap in the backward pass).
KORTHIKANTI_TABLE4_22B_LAYER_MS = {"none": 19.6, "full": 27.2, "selective": 20.9, "selective+sp": 20.3}

# Article A §1: "if the recompute ratio is too high, it amounts to wasting double the compute"
# (等于白白浪费了一倍的计算量): a doubling, 2× the FLOPs of a step without recompute.
A_RECOMPUTE_WASTE_RATIO = 2.0

# Article A §1: "for GPT-3 175B the activations alone may take several hundred GB; without any
# optimisation they do not fit a single 80 GB card". Its configuration: GPT-3 175B (Brown et al.
# 2020, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048), one sequence, bf16 with
# dropout, no parallelism and no fused attention (Korthikanti Table 2's setting). "Several
# hundred GB" read as at least 200 GB (our reading).
A_GPT3_ACTIVATIONS = {
    "preset": "gpt3-175b",
    "micro_batch": 1,
    "several_hundred_bytes": 200e9,
    "card_bytes": 80e9,
}

# Article A §6.1 on its command's --zero-stage 2: "the gradients are sliced before reduction,
# which reduces the communication volume" (梯度归约前先做一次 Slice，减少通信量). The command runs 8
# cards at TP 8, so DP 1 (the stated case); DP 4 (A12's smallest width, with its accumulation) is
# reported beside it, a change of the configuration, not an input of the claim.
A_ZERO2_COMM_CASE = {"preset_name": "article-13b", "tp": 8, "dp": 1, "global_batch": 32, "micro_batch": 1}
A_ZERO2_COMM_WIDER_DP = 4
