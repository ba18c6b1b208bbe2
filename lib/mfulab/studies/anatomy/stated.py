"""What the source article states for the ``anatomy`` claims, exactly as stated (article ids as
in ``docs/claims.md``). Inputs under test, not results."""

# B13 — article B §4.2: one card throttled by heat from 1410 MHz to 1200 MHz SM clock was 8%
# slower per step, and synchronous training ran the whole cluster at its pace.
B13_STATED = {"card_slowdown": 0.08, "sm_clock_from_mhz": 1410, "sm_clock_to_mhz": 1200}
# B13's clock advice (article B §4.2): "nvidia-smi -lgc 1410" locks the SM clock so that training
# speed is stable and predictable, where temperature and power margins allow; it needs admin
# rights. Its case study's step 5 (§5.2, analytic.articles.B15_STEPS) locked the clocks: 8.4 → 8.5
# s per step, "stable near 8.5 s". 1410 MHz is the A100 SXM's boost clock (NVIDIA A100 datasheet).
# What the tool does is NVML's documented behaviour: nvmlDeviceSetGpuLockedClocks (nvidia-smi
# -lgc, --lock-gpu-clocks, whose help takes the range as a pair <minGpuClock,maxGpuClock>, e.g.
# 1500,1500) sets the range the GPU clock runs in, "a setting to request constant performance",
# root/admin only, reset by a reboot or a driver reload (NVML API reference; cuda-python's
# nvml bindings, device_set_gpu_locked_clocks).
B13_CLOCK_LOCK = {
    "command": "nvidia-smi -lgc 1410",
    "boost_clock_mhz": 1410,
    "step_before_s": 8.4,
    "step_after_s": 8.5,
}
# B13's rule: the claim holds when at least half of the slow card's delay reaches the job, as the
# healthy ranks' wait at the next all-reduce (closer to lockstep, 1, than to the other ranks not
# waiting at all, 0). Ours: the article gives no threshold.
B13_REACHED = 0.5

# B2 — article B §1.2: lost time is eaten by four kinds of problem (slow operators, communication
# wait, data wait, scheduling waste). Its own case study names a loss of each kind: §5.2's ladder
# (analytic.articles.B15_STEPS: attention/TF32, buckets and NCCL, data IO, clocks), §5.1's data wait
# (the batch reached the GPU 1.5 s after the step began) and §5.3's checkpoint spike (3 s, a
# synchronous write every N steps).
B2_CASE_STUDY = {"data_wait_s": 1.5, "checkpoint_spike_s": 3.0}

# B15 — article B §5.2: the case study's ladder on a 7B model, 64 A100s, 10.2 s → 8.5 s per step;
# "the gain comes mainly from communication overlap and data IO".
B15_STATED = {
    "regime": "7B parameters on 64 A100s, 10.2 s → 8.5 s per step",
    "step_before_s": 10.2,
    "step_after_s": 8.5,
}

# B15's bucket step (article B §5.2, step 2): bucket_cap_mb 25 → 50 with gradient_as_bucket_view
# and static_graph, on its 7B at tensor parallelism 4 (§5.1: "ZeRO-2加张量并行4"). A DDP bucket
# never splits a tensor, so what a cap means is how many of the model's largest layer tensors, the
# MLP weight matrices, it holds: Llama 2 7B's is d_ff × d_model = 11008 × 4096 (Touvron et al.
# 2023; its Hugging Face config), 11008 / 4 × 4096 per rank at TP 4, in fp32 (DDP under autocast
# keeps fp32 parameters and gradients; our reading: the article names no gradient dtype): 45.1 MB,
# above 25 MiB and below 50 MiB, so the article's step takes each bucket from one MLP matrix to
# about two. The ladder scales both caps by this model's MLP matrix over the article's
# (``ladder.article_bucket_caps_mib``).
B15_BUCKETS = {
    "cap_before_mib": 25.0,
    "cap_after_mib": 50.0,
    "d_model": 4096,
    "d_ff": 11008,
    "tensor_parallel": 4,
    "grad_bytes_per_param": 4,
}
