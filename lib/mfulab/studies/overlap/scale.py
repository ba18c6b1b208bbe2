"""The α–β models of this study: chunked overlap, and the articles' scale (A4, A5) with the
sensitivity of each conclusion to the assumed inputs.

**Chunked overlap** (``chunked_overlap``): compute of total time C produces a tensor of S bytes
in k equal chunks; chunk i is ready at i·C/k and its all-reduce (ring α–β cost of S/k bytes,
``comm.ring_all_reduce_time``) starts as soon as the chunk is ready *and* the previous
all-reduce has finished (one communication channel). The step ends when the last all-reduce
ends. Bounds: max(C, M_k) ≤ step ≤ C + M_k, with M_k = k·t(S/k) the communication time per
step, which grows with k because every call pays the latency 2(n−1)·α again (claim A5).

**A4** (``a4_model``): the article's 13B run on the course's one step model
(``predict.step_time``, chapter 10), on the article's own device (``article_device``, a
``devices.yaml`` key: its peak, memory and the links inside and between its nodes), TP 8,
micro-batch 1, the global batch split into accumulation steps. The step model issues Megatron's
4 TP all-reduces per layer and micro-batch (6 under full recompute; Shoeybi et al. 2019 Fig. 4,
Narayanan et al. 2021 §3.2) and the DP framework's gradient buckets, each priced by NCCL's
latency model, and the GEMMs at ``article_matmul_share_of_mamf`` of the device's best GEMM.
Run once with nothing overlapped and once with the DP reduction under the backward and the TP
collectives under the GEMMs. The 3.2 → 2.1 s step says that at least 1.1 s of communication
was exposed before overlap; ``a4_reading`` says which communication could account for it, and
``a4_flip_link`` at which intra-node bandwidth that reading changes.

**A5** (``a5_model``): the 200 MB tensor's communication per step at 4 and 16 chunks, k·t(S/k),
and the model's best k with compute proportional to the one-shot all-reduce. Accumulation
steps do not enter: they change how often the tensor is reduced, not what one reduction costs.
"""

from __future__ import annotations

from ... import comm, predict
from ...config import ParameterError, preset
from ...hardware import device_spec
from .stated import A4_STATED, A5_STATED, B9_STATED, B9_STEP_AFTER_S, B9_STEP_BEFORE_S

# Link bandwidths per card and direction for the sensitivity tables (B = bytes/s).
IB_EDR_BYTES_PER_S = 12.5e9  # InfiniBand EDR, 100 Gb/s (IBTA roadmap)
IB_HDR_BYTES_PER_S = 25e9  # InfiniBand HDR, 200 Gb/s
IB_NDR_BYTES_PER_S = 50e9  # InfiniBand NDR, 400 Gb/s
NVLINK3_BYTES_PER_S = (
    300e9  # NVLink 3 on an A100: 12 links × 25 GB/s (NVIDIA A100 datasheet: 600 GB/s both ways)
)
NVLINK_CLASS_LOW_BYTES_PER_S = 100e9  # a slower intra-node fabric (a third of NVLink 3), for the table
ALPHAS_S = (2e-6, 5e-6, 10e-6, 20e-6)  # per-step latency: NCCL-class 2 µs to a slow software path 20 µs


# ---------------------------------------------------------------------------- chunked overlap
def chunked_overlap(
    *, compute_s: float, nbytes: float, k: int, n: int, alpha_s: float, link_bytes_per_s: float
) -> dict:
    """Step time and exposed communication of k-chunk overlap (module docstring), with the
    per-chunk schedule for a timeline."""
    if k < 1:
        raise ParameterError("k must be at least 1")
    chunk_comm_s = comm.ring_all_reduce_time(
        nbytes / k, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s
    )
    ready = [i * compute_s / k for i in range(1, k + 1)]
    channel = comm.fifo_channel(ready, [chunk_comm_s] * k)
    schedule = [
        {
            "chunk": i,
            "compute_start_s": i * compute_s / k,
            "compute_end_s": ready[i],
            "comm_start_s": start,
            "comm_end_s": end,
        }
        for i, (start, end) in enumerate(channel)
    ]
    comm_end = channel[-1][1]
    total_comm = k * chunk_comm_s
    step = max(compute_s, comm_end)
    return {
        "k": k,
        "step_s": step,
        "exposed_comm_s": step - compute_s,
        "total_comm_s": total_comm,
        "lower_bound_s": max(compute_s, total_comm),
        "upper_bound_s": compute_s + total_comm,
        "schedule": schedule,
    }


def best_chunks(
    *, compute_s, nbytes, n, alpha_s, link_bytes_per_s, ks=tuple(2**i for i in range(11))
) -> dict:
    rows = [
        chunked_overlap(
            compute_s=compute_s, nbytes=nbytes, k=k, n=n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s
        )
        for k in ks
    ]
    best = min(rows, key=lambda r: r["step_s"])
    return {"best_k": best["k"], "rows": rows}


# ---------------------------------------------------------------------------- A4
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
    attention: str = "flash",
    zero_stage: int = 0,
    framework: str = "ddp",
    **assumptions,
) -> dict:
    """The article's 13B step on the course's one step model (``predict.step_time``), once with
    nothing overlapped (``overlap=False``: every DP call exposed, the TP all-reduces on the
    critical path) and once with the DP reduction under the backward and Megatron's TP
    overlap on (``tp_comm_overlap``). ``device`` is a ``devices.yaml`` key (its peak, memory
    and links); ``assumptions`` set fields of ``predict.Assumptions`` (the share of MAMF the
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
    serial = predict.step_time(cfg, **layout, overlap=False)
    overlapped = predict.step_time(cfg, **layout, overlap=True, tp_comm_overlap=True)
    compute_s = sum(serial[k] for k in predict.COMPUTE_TERMS) + serial["optimizer_s"] + serial["pp_bubble_s"]
    tp_message_bytes = micro_batch * cfg.seq_len * cfg.d_model * A4_STATED["activation_bytes"]
    return {
        "dp": serial["layout"]["dp"],
        "micro_batch": micro_batch,
        "accumulation_steps": serial["layout"]["m"],
        "tp_message_bytes": tp_message_bytes,
        "tp_comm_s": serial["tp_comm_s"],
        "dp_comm_s": serial["dp_comm_s"],
        "dp_calls": serial["dp_calls"],
        "pp_p2p_s": serial["pp_p2p_s"],
        "total_comm_s": serial["tp_comm_s"] + serial["dp_comm_s"] + serial["pp_p2p_s"],
        "compute_s": compute_s,
        "step_serial_s": serial["step_s"],
        "step_overlapped_s": overlapped["step_s"],
        "saved_s": serial["step_s"] - overlapped["step_s"],
        "mfu_serial": serial["mfu_palm"],
        "mfu_overlapped": overlapped["mfu_palm"],
        "sources": serial["sources"],
    }


def a4_reading(m: dict) -> str:
    """Which communication could account for the ≥ 1.1 s that overlap saved (A4)."""
    saved = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    if m["compute_s"] > A4_STATED["step_after_s"]:
        return "compute alone exceeds the 2.1 s step: inputs inconsistent"
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
    }


def a4_sensitivity(p: dict):
    """One row per assumed input varied alone from the baseline (the study parameters): the
    communication and compute per step, the step model's step without and with overlap, the
    reading, and whether it matches the baseline's."""
    import pandas as pd

    base = a4_baseline(p)
    dp_base = base["cards"] // (base["tp"] * base["pp"])
    gb = base["global_batch"]
    intra_alpha = predict.Assumptions().alpha_intra_s
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
    cases += [
        ("gradient reduction", "bf16 (--grad-reduce-in-bf16)", {"grad_bytes_per_elem": 2}),
        ("activation recompute", "full (6 TP all-reduces per layer)", {"recompute": "full"}),
        ("attention", "unfused", {"attention": "unfused"}),
        (
            "DP framework",
            "the 8-card command's --zero-stage 2 (DeepSpeed: a reduce-scatter per micro-batch)",
            {"framework": "deepspeed", "zero_stage": 2},
        ),
    ]
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
            }
        )
    return pd.DataFrame(rows)


def a4_flip_link(p: dict) -> dict:
    """The intra-node (TP) link bandwidth at which A4's reading changes, by bisection between
    10 GB/s and 1 TB/s per direction (the baseline's reading at the device's own figure);
    ``None`` where it does not change in that range."""
    base = a4_baseline(p)
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


# ---------------------------------------------------------------------------- A5
def a5_model(*, n: int, alpha_s: float, link_bytes_per_s: float, compute_over_comm: float = 1.0) -> dict:
    """200 MB over n ranks: communication per step at k = 4 and 16 (k·t(S/k)), the share of
    one 16-chunk call that is per-call latency, and the model's best k with compute equal to
    ``compute_over_comm`` × the one-shot all-reduce."""
    nbytes = A5_STATED["nbytes"]

    def t(size):
        return comm.ring_all_reduce_time(size, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s)

    one_shot_s = t(nbytes)
    best = best_chunks(
        compute_s=compute_over_comm * one_shot_s,
        nbytes=nbytes,
        n=n,
        alpha_s=alpha_s,
        link_bytes_per_s=link_bytes_per_s,
        ks=A5_STATED["chunks"],
    )
    return {
        "one_shot_s": one_shot_s,
        "comm_k4_s": 4 * t(nbytes / 4),
        "comm_k16_s": 16 * t(nbytes / 16),
        "ratio_16_over_4": 16 * t(nbytes / 16) / (4 * t(nbytes / 4)),
        "latency_share_k16": 2 * (n - 1) * alpha_s / t(nbytes / 16),
        "best_k": best["best_k"],
        "steps_s": {r["k"]: r["step_s"] for r in best["rows"]},
    }


def a5_sensitivity(p: dict):
    """One row per assumed input varied alone from the baseline (200 MB, ``article_*``): the
    communication at 4 and 16 chunks, the model's best k, and whether the two readings of the
    claim (16 slower than 4; best k in 4–8) hold."""
    import pandas as pd

    base = {
        "n": p["article_n"],
        "alpha_s": p["article_alpha_s"],
        "link_bytes_per_s": p["article_link_bytes_per_s"],
    }
    node = p["article_gpus_per_node"]
    cases = [("baseline", "", {})]
    cases += [("per-step latency α", f"{a * 1e6:.0f} µs", {"alpha_s": a}) for a in ALPHAS_S]
    cases += [
        ("link", "InfiniBand HDR 25 GB/s", {"link_bytes_per_s": IB_HDR_BYTES_PER_S}),
        ("link", "InfiniBand EDR 12.5 GB/s", {"link_bytes_per_s": IB_EDR_BYTES_PER_S}),
        (
            "link",
            f"NVLink 3, 300 GB/s ({node} ranks, one node)",
            {"link_bytes_per_s": NVLINK3_BYTES_PER_S, "n": node},
        ),
    ]
    cases += [
        ("compute ÷ one-shot comm (efficiency)", f"{r:g}", {"compute_over_comm": r}) for r in (0.5, 1.0, 2.0)
    ]
    cases += [
        ("gradient sharding: DP ranks", f"{p['article_n'] // tp} (TP = {tp})", {"n": p["article_n"] // tp})
        for tp in (1, 8)
        if p["article_n"] // tp >= 2
    ]
    rows = []
    for varied, value, change in cases:
        m = a5_model(**{**base, **change})
        rows.append(
            {
                "varied": varied,
                "value": value,
                "comm_k4_s": m["comm_k4_s"],
                "comm_k16_s": m["comm_k16_s"],
                "ratio_16_over_4": m["ratio_16_over_4"],
                "latency_share_k16": m["latency_share_k16"],
                "best_k": m["best_k"],
                "k16_slower_than_k4": m["ratio_16_over_4"] > 1,
                "best_k_in_4_to_8": min(A5_STATED["best_chunks"])
                <= m["best_k"]
                <= max(A5_STATED["best_chunks"]),
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- summaries (A4, A5, B9)
def article_scale(records) -> dict:
    """A4 on the step model (``article_device``'s figures) and A5 with the stated α–β link
    (parameters ``article_*``)."""
    p = records["params"]
    a4 = a4_model(**a4_baseline(p))
    a5 = a5_model(
        n=p["article_n"], alpha_s=p["article_alpha_s"], link_bytes_per_s=p["article_link_bytes_per_s"]
    )
    saved = A4_STATED["step_before_s"] - A4_STATED["step_after_s"]
    return {
        "n": p["article_n"],
        "alpha_s": p["article_alpha_s"],
        "link_bytes_per_s": p["article_link_bytes_per_s"],
        "a4_device": p["article_device"],
        "a4_implied_min_comm_s": saved,
        "a4_implied_min_comm_share": saved / A4_STATED["step_before_s"],
        **{f"a4_{k}": v for k, v in a4.items() if k != "sources"},
        "a4_tp_link": a4["sources"]["intra_node"],
        "a4_tp_link_gb_per_s": device_spec(p["article_device"]).intra_node_bytes_per_s / 1e9,
        "a4_dp_link": a4["sources"]["inter_node"],
        "a4_reading": a4_reading(a4),
        **{f"a5_{k}": v for k, v in a5.items()},
    }


def b9_check(records) -> dict:
    """B9: 11 → 21 GB/s busbw against a 25 GB/s link, with and without the article's ×2."""
    link = B9_STATED["link_bytes_per_s"]
    before, after = B9_STATED["busbw_before_bytes_per_s"], B9_STATED["busbw_after_bytes_per_s"]
    # B15's step from this change; if the exposed comm time T scaled as 1/busbw
    saved = B9_STEP_BEFORE_S - B9_STEP_AFTER_S
    exposed_before = saved / (1 - before / after)
    return {
        "link_bytes_per_s": link,
        "efficiency_before": before / link,
        "efficiency_after": after / link,
        "article_x2_before": 2 * before / link,
        "article_x2_after": 2 * after / link,
        "step_before_s": B9_STEP_BEFORE_S,
        "step_after_s": B9_STEP_AFTER_S,
        "implied_exposed_comm_before_s": exposed_before,
        "step_gain": saved / B9_STEP_BEFORE_S,
    }
