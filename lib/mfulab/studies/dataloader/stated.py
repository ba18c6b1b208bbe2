"""What the source articles state for the ``dataloader`` claims, exactly as stated (article
ids as in ``docs/claims.md``). These are inputs under test, not results."""

from mfulab.analytic.articles import B15_STEPS

# B11 — article B §4.1 (and step 4 of §5.2): packing many small files into webdataset tar
# shards gains "5% or more" throughput; on ordinary SSDs 8–16 DataLoader workers are enough.
B11_STATED = {"min_throughput_gain": 1.05, "workers_enough": (8, 16), "workers_per_gpu": 12}

# The case study's job (article B §1.3's worked example and §5.2: a 7B dense model on 64 A100s
# with ZeRO-2 and tensor parallelism 4, so 16 data-parallel ranks, sequences of 4096 tokens, a
# global batch of 512 sequences); its step after the loader change is the §5.2 ladder's
# (articles.B15_STEPS).
CASE_STUDY_JOB = {"gpus": 64, "tp": 4, "seq_len": 4096, "global_batch": 512}

# Bytes of text per token of a BPE tokenizer on English text: about 4 ("one token generally
# corresponds to ~4 characters of text for common English text", OpenAI's tokenizer guide, on
# GPT-2/3's BPE). An assumption for turning the case study's tokens into bytes to read; this
# corpus has no tokenizer (its tokens are bytes).
BYTES_PER_TOKEN = 4.0

# B2 (data part) — article B §1.2 and §5.1: slow input shows as idle time at the start of each
# step; in the case study's trace the batch reached the GPU 1.5 s after the step began. §1.2
# names four kinds of lost time (slow operators / compute, communication, data, scheduling).
B2_STATED = {"case_study_wait_s": 1.5}

# B12 — article B §4.2 and §5.3: synchronous checkpoint writes cause periodic step-time spikes;
# asynchronous checkpoints shrank them from 3 s to 0.3 s in the case study. The spikes sat on
# the tuned run, whose step is the last of the §5.2 ladder (8.5 s, articles.B15_STEPS), so the
# case study's spike is a step (8.5 + 3) / 8.5 ≈ 1.35× the others (our reading). The case study
# trains a 7B model on 64 A100s (§5).
B12_STATED = {
    "sync_spike_s": 3.0,
    "async_spike_s": 0.3,
    "case_study_step_s": B15_STEPS[-1][0],
    "case_study_params": 7e9,
    "case_study_gpus": 64,
    # §5: "ZeRO-2 加张量并行 4" (ZeRO-2 with tensor parallelism 4): the bf16 weights are replicated
    # over the data-parallel ranks and split over 4 tensor-parallel ranks; the optimizer states are
    # sharded over every card
    "case_study_tp": 4,
    "case_study_zero_stage": 2,
}

# The CV job the loader advice of §4.1 speaks to, as NVIDIA publishes it: ResNet-50 v1.5 trained
# on a DGX A100 (8 × A100 80GB), DeepLearningExamples at commit 729963dd,
# PyTorch/Classification/ConvNets/resnet50v1.5/README.md ("Training performance: NVIDIA DGX A100
# (8x A100 80GB)"): 2,470 img/s on 1 GPU and 16,621 on 8 with mixed precision, 938 and 7,248 with
# TF32 (per GPU at 8 GPUs: 2,078 and 906); its configs.yml: 256 images per GPU, 10 loader workers
# per GPU with prefetch 4 on the DGXA100 platform, and data_backend: pytorch for the ResNet recipes
# (torchvision's ImageFolder: JPEGs decoded with PIL on the CPU, not DALI). A DGX A100 has 2 ×
# 64-core AMD EPYC 7742 for its 8 GPUs: 16 cores per GPU (NVIDIA DGX A100 datasheet).
A100_RESNET50 = {
    "images_per_s_per_gpu": {"amp, 1 GPU": 2470.0, "amp, 8 GPUs": 16621.0 / 8, "tf32, 8 GPUs": 7248.0 / 8},
    "batch_per_gpu": 256,
    "workers_per_gpu": 10,
    "cpu_cores_per_gpu": 16,
}
# ImageNet-1k's training JPEGs: 1,281,167 images in the archive image-net.org lists as 138 GB
# (ILSVRC2012_img_train.tar), about 108 kB each (116 kB if that figure is GiB); a JPEG of that
# size is what the decode probe times.
IMAGENET_MEAN_JPEG_BYTES = 108_000
