"""A4, the article's 13B step without and with overlap, on the course's one step model.

``a4_model``: the article's 13B run on the course's one step model
(``step.step_time``, chapter 09), on the article's own device (``article_device``, a
``devices.yaml`` key: its peak, memory and the links inside and between its nodes), TP 8,
micro-batch 1, the global batch split into accumulation steps. The step model issues Megatron's
4 TP all-reduces per layer and micro-batch (6 under full recompute; Shoeybi et al. 2019 Fig. 4,
Narayanan et al. 2021 §3.2) and the DP framework's gradient buckets, each priced by NCCL's
latency model, and the GEMMs at ``article_matmul_share_of_mamf`` of the device's best GEMM.
Run once with nothing overlapped and once with the DP reduction under the backward and the TP
collectives under the GEMMs. The 3.2 → 2.1 s step says that at least 1.1 s of communication
was exposed before overlap; ``a4_reading`` says which communication could account for it, and
``a4_flip_link`` at which intra-node bandwidth that reading changes.
"""

from __future__ import annotations

from mfulab.analytic import rates, step
from mfulab.analytic.config import preset
from mfulab.studies.overlap.stated import A4_STATED, TP_ALLREDUCES_PER_LAYER
from mfulab.studykit.step_error import reproduces_ratio

# Link bandwidths per card and direction for the sensitivity tables (B = bytes/s).
IB_EDR_BYTES_PER_S = 12.5e9  # InfiniBand EDR, 100 Gb/s (IBTA roadmap)
IB_HDR_BYTES_PER_S = 25e9  # InfiniBand HDR, 200 Gb/s
IB_NDR_BYTES_PER_S = 50e9  # InfiniBand NDR, 400 Gb/s
NVLINK3_BYTES_PER_S = (
    300e9  # NVLink 3 on an A100: 12 links × 25 GB/s (NVIDIA A100 datasheet: 600 GB/s both ways)
)
NVLINK_CLASS_LOW_BYTES_PER_S = 100e9  # a slower intra-node fabric (a third of NVLink 3), for the table
ALPHAS_S = (2e-6, 5e-6, 10e-6, 20e-6)  # per-step latency: NCCL-class 2 µs to a slow software path 20 µs
# A fixed cost added to every all-reduce call, for A5 at the article's scale: no per-call figure
# for HCCL (the article's library) is published in a source this course cites, so these are
# illustrative, from a few times NCCL's own latency at 32 ranks to a heavy runtime's
CALL_OVERHEADS_S = (50e-6, 100e-6)


# The interconnect rows of A4's sensitivity table (per device and direction, before the step
# model's link_efficiency), each replacing the article device's devices.yaml figure: an A100's
# NVLink 3 inside a node, a slower intra-node fabric, TP across nodes, and InfiniBand between
# nodes at half and twice the 910B's 200 Gb/s RoCE.
A4_LINKS = {
    "TP link": (
        ("NVLink 3, 300 GB/s (A100)", {"intra_node_bytes_per_s": NVLINK3_BYTES_PER_S}),
        ("intra-node 100 GB/s", {"intra_node_bytes_per_s": NVLINK_CLASS_LOW_BYTES_PER_S}),
        ("InfiniBand HDR 25 GB/s (TP across nodes)", {"intra_node_bytes_per_s": IB_HDR_BYTES_PER_S}),
    ),
    "DP link": (
        ("InfiniBand EDR 12.5 GB/s", {"network_bytes_per_s": IB_EDR_BYTES_PER_S}),
        ("InfiniBand NDR 50 GB/s", {"network_bytes_per_s": IB_NDR_BYTES_PER_S}),
    ),
}


def a4_model(
    *,
    device: str,
    cards: int,
    tp: int,
    pp: int,
    gpus_per_node: int,
    global_batch: int,
    micro_batch: int = A4_STATED["micro_batch"],
    recompute: str = "none",
    attention: str = A4_STATED["attention"],
    zero_stage: int = 0,
    framework: str = "megatron",
    tp_comm_overlap: bool = False,
    **assumptions,
) -> dict:
    """The article's 13B step on the course's one step model (``step.step_time``), once with
    nothing overlapped (``overlap=False``: every DP call exposed, the TP all-reduces on the
    critical path) and once with the DP reduction under the backward and, with
    ``tp_comm_overlap``, Megatron's TP overlap on (off: ``--overlap-grad-reduce`` alone, the TP
    all-reduces stay on the critical path). ``device`` is a ``devices.yaml`` key (its peak, memory
    and links); ``assumptions`` set fields of ``rates.Assumptions`` (the share of MAMF the
    GEMMs reach, the link figures of a sensitivity row). At a fixed global batch the
    micro-batch sets the accumulation steps, global_batch ÷ (micro_batch · dp): larger
    micro-batches mean fewer, larger TP all-reduces."""
    cfg = preset(A4_STATED["preset"])
    layout = {
        "n_devices": cards,
        "tp": tp,
        "pp": pp,
        "micro_batch": micro_batch,
        "global_batch": global_batch,
        "device": device,
        "devices_per_node": gpus_per_node,
        "recompute": recompute,
        "attention": attention,
        "zero_stage": zero_stage,
        "framework": framework,
        **assumptions,
    }
    serial = step.step_time(cfg, **layout, overlap=False)
    overlapped = step.step_time(cfg, **layout, overlap=True, tp_comm_overlap=tp_comm_overlap)
    compute_s = sum(serial[k] for k in step.COMPUTE_TERMS) + serial["optimizer_s"] + serial["pp_bubble_s"]
    tp_message_bytes = micro_batch * cfg.seq_len * cfg.d_model * A4_STATED["activation_bytes"]
    return {
        "dp": serial["layout"]["dp"],
        "micro_batch": micro_batch,
        "accumulation_steps": serial["layout"]["m"],
        "tp_message_bytes": tp_message_bytes,
        "tp_comm_s": serial["tp_comm_s"],
        "dp_comm_s": serial["dp_comm_s"],
        "dp_calls": overlapped["dp_calls"],  # the bucketed calls (without overlap Megatron issues one)
        "pp_p2p_s": serial["pp_p2p_s"],
        "total_comm_s": serial["tp_comm_s"] + serial["dp_comm_s"] + serial["pp_p2p_s"],
        "compute_s": compute_s,
        "step_serial_s": serial["step_s"],
        "step_overlapped_s": overlapped["step_s"],
        "saved_s": serial["step_s"] - overlapped["step_s"],
        "mfu_serial": serial["mfu_palm"],
        "mfu_overlapped": overlapped["mfu_palm"],
        # the memory model's verdict on the layout (None: the device has no memory figure)
        "fits": overlapped["fits"],
        "memory_gib": overlapped["memory_gib"],
        "sources": serial["sources"],
    }


def a4_reading(m: dict) -> str:
    """Which communication could account for the ≥ 1.1 s that overlap saved (A4); a modelled
    compute above the 2.1 s step says the inputs are inconsistent only beyond the step model's
    error (``decisive_margin``, studykit.step_error.SWITCH_MARGIN)."""
    saved = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    after, margin = A4_STATED["step_after_s"], A4_STATED["decisive_margin"]
    if m["compute_s"] > after * (1 + margin):
        return "compute alone exceeds the 2.1 s step beyond the model's error: inputs inconsistent"
    if m["compute_s"] > after:
        return "compute alone is at the 2.1 s step, within the model's error: needs every collective hidden"
    if m["total_comm_s"] < saved:
        return "all communication < the 1.1 s saved"
    if m["dp_comm_s"] < saved:
        return "needs the TP all-reduces hidden too"
    return "the gradient all-reduce suffices"


def a4_baseline(p: dict) -> dict:
    """The A4 model's inputs from the study parameters (``article_*``) and ``stated``."""
    return {
        "device": p["article_device"],
        "cards": p["article_n"],
        "tp": A4_STATED["tp"],
        "pp": A4_STATED["pp"],
        "gpus_per_node": p["article_gpus_per_node"],
        "global_batch": p["article_global_batch"],
        "matmul_share_of_mamf": p["article_matmul_share_of_mamf"],
        "grad_bytes_per_elem": A4_STATED["grad_bytes_per_param"],
        # the article's own overlap (§2.1–2.2: the TP all-reduces chunked under computation);
        # the 8-card command's gradient overlap alone is a sensitivity row (stated.A4_STATED)
        "tp_comm_overlap": A4_STATED["tp_comm_overlap"],
        "attention": A4_STATED["attention"],  # the command as parsed (stated.A4_STATED)
    }


def a4_sensitivity(p: dict):
    """One row per input varied alone from the baseline (the study parameters): the
    communication and compute per step, the step model's step without and with overlap, the
    reading, whether it matches the baseline's, whether it reproduces the article's steps, the
    memory per device and whether the layout fits the card (a layout that does not cannot run,
    so it neither reproduces nor misses the article), and its ``kind``: an *assumed input* (one
    the article leaves unstated) or *other configuration* (a change to the command's own flags or
    sharding, reported beside the verdict, not voted)."""
    import pandas as pd

    base = a4_baseline(p)
    dp_base = base["cards"] // (base["tp"] * base["pp"])
    gb = base["global_batch"]
    intra_alpha = rates.Assumptions().alpha_intra_s
    cases = [("baseline", "", {})]
    cases += [
        (
            "per-step latency α (NVLink/HCCS, network)",
            f"{a * 1e6:.0f} µs",
            {"alpha_intra_s": a, "alpha_inter_s": a},
        )
        for a in ALPHAS_S
        if a != intra_alpha
    ]
    cases += [(varied, value, change) for varied, rows in A4_LINKS.items() for value, change in rows]
    cases += [
        ("GEMM share of MAMF", f"{share:.2f}", {"matmul_share_of_mamf": share})
        for share in (0.5, 0.65, 1.0)
        if share != base["matmul_share_of_mamf"]
    ]
    cases += [
        ("sharding (TP × PP)", f"{tp} × {pp}", {"tp": tp, "pp": pp}) for tp, pp in ((4, 2), (2, 4), (1, 1))
    ]
    # gradient accumulation at the fixed global batch: the micro-batch sets the steps
    cases += [
        (
            f"micro-batch (global batch {gb})",
            f"{mb} → {gb // (mb * dp_base)} accumulation steps",
            {"micro_batch": mb},
        )
        for mb in (2, 4, 8)
        if gb % (mb * dp_base) == 0
    ]
    # the 32-card run's global batch is not stated (the stated case borrows the 8-card command's 32)
    cases += [
        ("global batch (unstated for 32 cards)", f"{g} sequences", {"global_batch": g})
        for g in (gb // 2, gb * 2)
        if g % dp_base == 0
    ]
    cases += [
        ("gradient reduction", "bf16 (--grad-reduce-in-bf16)", {"grad_bytes_per_elem": 2}),
        ("activation recompute", "full (6 TP all-reduces per layer)", {"recompute": "full"}),
        ("attention", "fused (Flash Attention, as the article's §3.2 runs use it)", {"attention": "fused"}),
        (
            "TP communication overlap",
            "off (the 8-card command's --overlap-grad-allreduce alone; Megatron-LM would refuse "
            "--tp-comm-overlap without --sequence-parallel): the TP all-reduces stay exposed",
            {"tp_comm_overlap": False},
        ),
        (
            "DP framework",
            "the 8-card command's --zero-stage 2 (DeepSpeed: a reduce-scatter per micro-batch)",
            {"framework": "deepspeed", "zero_stage": 2},
        ),
        (
            "DP framework",
            "PyTorch DDP at its 25 MiB cap (whole tensors per bucket; the command's 25 MB, read as DDP's)",
            {"framework": "ddp"},
        ),
    ]
    # rows that change the command's own configuration rather than an input it leaves unstated
    # (the sharding is not one: the 32-card run states no TP or PP, its TP 8 is read from the
    # 8-card command, so TP × PP is an assumed input)
    configuration = {f"micro-batch (global batch {gb})", "gradient reduction"}
    configuration |= {"activation recompute"}
    baseline_reading = a4_reading(a4_model(**base))
    rows = []
    for varied, value, change in cases:
        m = a4_model(**{**base, **change})
        reading = a4_reading(m)
        rows.append(
            {
                "varied": varied,
                "value": value,
                "micro_batch": m["micro_batch"],
                "accumulation_steps": m["accumulation_steps"],
                "tp_comm_s": m["tp_comm_s"],
                "dp_comm_s": m["dp_comm_s"],
                "total_comm_s": m["total_comm_s"],
                "compute_s": m["compute_s"],
                "step_serial_s": m["step_serial_s"],
                "step_overlapped_s": m["step_overlapped_s"],
                "reading": reading,
                "same_as_baseline": reading == baseline_reading,
                "reproduces_article": a4_reproduces(m),
                "consistent_with_stated_step": a4_consistent(m),
                "fits": m["fits"],
                "memory_gib": m["memory_gib"],
                "kind": "stated case"
                if varied == "baseline"
                else "other configuration"
                if varied in configuration
                else "assumed input",
            }
        )
    return pd.DataFrame(rows)


def a4_consistent(m: dict) -> bool:
    """Whether a case is a reading of the article at all: its modelled serial step lies within
    the step model's margin of the article's stated 3.2 s (a case whose compute alone, or whose
    TP over another fabric, puts the serial step beyond it contradicts the article's own number,
    and does not vote). The error is symmetric in the ratio, exp|ln(modelled / stated)| − 1, as
    every margin of the course is read (until 2026-12-07 |ratio − 1|, which let a step 1.56×
    under the article's pass a 52% margin)."""
    margin = A4_STATED["decisive_margin"]
    ratio = m["step_serial_s"] / A4_STATED["step_before_s"]
    return max(ratio, 1 / ratio) - 1 <= margin


def a4_reproduces(m: dict) -> bool | None:
    """Does the model reproduce the article's saving, on the claim's own quantity: the serial ÷
    overlapped step, 3.2 ÷ 2.1 = 1.52× in the article? The margin (``A4_STATED["decisive_margin"]``)
    is the step model's error on a ratio of two runs. True when the modelled ratio lies within
    the margin of the article's *and* beyond it from 1 (the model sees a saving it can tell from
    its own error); False when it lies beyond the margin of the article's; None otherwise (within
    the margin of both the claim and no saving), and for a case that is not a reading of the
    article (:func:`a4_consistent`)."""
    if not a4_consistent(m):
        return None
    claimed = A4_STATED["step_before_s"] / A4_STATED["step_after_s"]
    modelled = m["step_serial_s"] / m["step_overlapped_s"]
    return reproduces_ratio(modelled, claimed, A4_STATED["decisive_margin"])


def a4_hidden_needed(m: dict) -> float:
    """The share of the case's communication that must be hidden for the article's saving: the
    ≥ 1.1 s saved over the modelled communication per step (above 1: more than there is)."""
    saved = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    return saved / m["total_comm_s"]


def a4_flip_link(p: dict, **change) -> dict:
    """The intra-node (TP) link bandwidth at which A4's reading changes, by bisection between
    10 GB/s and 1 TB/s per direction (the baseline's reading at the device's own figure, with
    ``change`` applied to the baseline); ``None`` where it does not change in that range."""
    base = {**a4_baseline(p), **change}
    reading = a4_reading(a4_model(**base))

    def reads(bw):
        return a4_reading(a4_model(**base, intra_node_bytes_per_s=bw))

    lo, hi = 10e9, 1e12
    if reads(lo) == reads(hi):
        return {"baseline_reading": reading, "flip_bytes_per_s": None}
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        if reads(mid) == reads(lo):
            lo = mid
        else:
            hi = mid
    return {"baseline_reading": reading, "flip_bytes_per_s": hi, "below": reads(lo), "above": reads(hi)}


def a4_saving_frontier(p: dict, saved_fn=None, **change) -> dict:
    """The feasibility frontier the article's saving needs (round thirteen's reader): the fastest
    intra-node (TP) link, per direction, at which the modelled overlap still saves the article's
    seconds (serial − overlapped ≥ 3.2 − 2.1 s), by bisection between 10 GB/s and 1 TB/s (a
    slower link gives more communication to hide); beside it the saving at the device's own
    figure. ``None`` where even 10 GB/s does not save that much, or where 1 TB/s already does.
    ``saved_fn`` (inputs changed from the baseline → seconds) replaces the step model's saving
    (``a4_bound.a4_saving_bound``'s bound reads its frontier here)."""
    base = {**a4_baseline(p), **change}
    needed_s = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]

    def saved(bw=None):
        link = {} if bw is None else {"intra_node_bytes_per_s": bw}
        if saved_fn is not None:
            return saved_fn({**change, **link})
        m = a4_model(**base, **link)
        return m["step_serial_s"] - m["step_overlapped_s"]

    lo, hi = 10e9, 1e12
    out = {"needed_s": needed_s, "saved_at_device_s": saved(), "frontier_bytes_per_s": None}
    if saved(lo) < needed_s or saved(hi) >= needed_s:
        return out
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if saved(mid) >= needed_s else (lo, mid)
    return {**out, "frontier_bytes_per_s": lo}


def a4_power(margin: float) -> float:
    """The smallest modelled saving (serial ÷ overlapped) that does not miss the article's 1.52×
    at ``margin`` (``step_error.reproduces_ratio``): below it a case misses, so the row can fail
    only where the model finds a saving that small."""
    claimed = A4_STATED["step_before_s"] / A4_STATED["step_after_s"]
    return claimed / (1 + margin)


def a4_collectives(p: dict):
    """Every input of the stated case's communication, per collective, so that a reader can
    re-derive its seconds: the TP all-reduce's message, calls per step, ranks, the link the step
    model uses (``link_efficiency`` × the devices.yaml figure) and its per-step latency α, split
    into the ring's latency and bandwidth time per call (``comm.ring_all_reduce_time``), beside
    the step model's own seconds per call; the gradient buckets' calls and mean seconds per call
    from the step model. The study parameter ``alpha_s`` is A5's sensitivity input, not used here."""
    import pandas as pd

    from mfulab.analytic.comm import ring_all_reduce_time

    base = a4_baseline(p)
    assumption_keys = set(rates.Assumptions.__dataclass_fields__)
    assumed = {k: v for k, v in base.items() if k in assumption_keys}
    model_keys = {
        "device",
        "cards",
        "tp",
        "pp",
        "gpus_per_node",
        "global_batch",
        "tp_comm_overlap",
        "attention",
    }
    m = a4_model(**{k: v for k, v in base.items() if k in model_keys}, **assumed)
    r = rates.machine_rates(base["device"], dtype="bf16", assumptions=rates.Assumptions(**assumed))
    tp_link = r.link(base["tp"], base["gpus_per_node"])
    layers = preset(A4_STATED["preset"]).n_layers // base["pp"]
    tp_calls = TP_ALLREDUCES_PER_LAYER * layers * m["accumulation_steps"]
    n = base["tp"]
    latency_s = ring_all_reduce_time(0.0, n, alpha_s=tp_link.alpha_s, link_bytes_per_s=tp_link.bytes_per_s)
    per_call_s = ring_all_reduce_time(
        m["tp_message_bytes"], n, alpha_s=tp_link.alpha_s, link_bytes_per_s=tp_link.bytes_per_s
    )
    rows = [
        {
            "collective": "TP all-reduce (activations, bf16)",
            "message_MB": m["tp_message_bytes"] / 1e6,
            "calls_per_step": tp_calls,
            "ranks": n,
            "link_GB_per_s_used": tp_link.bytes_per_s / 1e9,
            "alpha_per_ring_step_us": tp_link.alpha_s * 1e6,
            "latency_per_call_us": latency_s * 1e6,
            "bandwidth_time_per_call_us": (per_call_s - latency_s) * 1e6,
            "model_seconds_per_call_us": m["tp_comm_s"] / tp_calls * 1e6,
            "seconds_per_step": m["tp_comm_s"],
        },
        {
            "collective": "DP gradient buckets (fp32)",
            "message_MB": float("nan"),
            "calls_per_step": m["dp_calls"],
            "ranks": m["dp"],
            "link_GB_per_s_used": r.link(base["tp"] * base["pp"] * m["dp"], base["gpus_per_node"]).bytes_per_s
            / 1e9,
            "alpha_per_ring_step_us": float("nan"),
            "latency_per_call_us": float("nan"),
            "bandwidth_time_per_call_us": float("nan"),
            "model_seconds_per_call_us": m["dp_comm_s"] / max(m["dp_calls"], 1) * 1e6,
            "seconds_per_step": m["dp_comm_s"],
        },
    ]
    return pd.DataFrame(rows)
