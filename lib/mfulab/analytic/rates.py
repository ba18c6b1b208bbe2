"""The machine figures the predictor (:mod:`mfulab.analytic.step`) runs on, and the assumptions it makes
without a measurement, each with its default's source.

A device's figures come from its ``devices.yaml`` entry: dense peak, MAMF (the best GEMM
measured on it), memory bandwidth and size, and link bandwidth per direction inside a node and
per device between nodes. The achievable fraction of each is an assumption
(:class:`Assumptions`). A calibration folder ``results/<machine>/calibration``
(:mod:`calibration`) replaces them by this machine's measurements:

- matmul: R∞ and t₀ of t = t₀ + F/R∞ fitted to the calibration's square matmuls (Hockney's
  r∞ and n½ = t₀·R∞; Hockney & Jesshope 1988, §1.3.3), in place of
  ``matmul_share_of_mamf`` · MAMF and ``matmul_latency_s``;
- memory: the copy-bandwidth plateau, in place of ``memory_efficiency`` · datasheet;
- links: the all-reduce α–β of the largest rank count measured on this node, in place of the
  intra-node datasheet link. A calibration of one node says nothing of the network between
  nodes: that stays the datasheet figure, and ``sources`` says so;
- op rates, where a caller measured them (chapter 10's calibrated check times the step's own
  memory-bound ops and attention kernel alone): ``elementwise`` (the model's memory-bound bytes
  per second those ops reached) and ``attention`` (the model's attention FLOPs per second), in
  place of the copy bandwidth and the flash share for those terms only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfulab.analytic.comm import DDP_BUCKET_BYTES, DEEPSPEED_BUCKET_ELEMS, DEEPSPEED_PREFETCH_ELEMS
from mfulab.errors import ParameterError

# the flash share of a device without a devices.yaml figure: A100's (the bottom of FlashAttention-2's
# 50–73% of A100's peak, Dao 2023, abstract; the backward runs lower than the forward)
FLASH_FALLBACK_SHARE = 0.5
# The share of the device's MAMF the course's at-scale cases give a training step's GEMMs
# (chapters 02 A4, 04's planner, 05's cluster simulator, 08's layout planner): our assumption,
# of the order of the share chapter 09 fits on the Korthikanti et al. rows (0.81); each chapter's
# sensitivity table varies it. ``Assumptions.matmul_share_of_mamf`` keeps 1.0, the upper bound.
AT_SCALE_MATMUL_SHARE_OF_MAMF = 0.8


@dataclass(frozen=True)
class Assumptions:
    """What the predictor assumes where nothing is measured (defaults and their sources)."""

    # R∞ of a training step's GEMMs over the device's MAMF (``devices.yaml`` ``mamf_tflops``: the
    # best single GEMM stas00's MAMF finder measured, 271.2 TFLOP/s on A100 SXM, 794.5 on H100 SXM,
    # at ml-engineering 744d01e). 1.0: the best shape everywhere, an upper bound; chapter 09 fits
    # this one share on published runs, and it carries to every device with a MAMF figure.
    matmul_share_of_mamf: float = 1.0
    # a device without a MAMF figure: MAMF taken as this share of its dense peak (the lower of the
    # two measured ratios, 0.869 on A100 and 0.803 on H100; our assumption)
    mamf_over_peak: float = 0.8
    # t₀: launch and tail of one GEMM kernel, ~ the 5 µs of a CUDA kernel launch round trip.
    matmul_latency_s: float = 5e-6
    # a flash kernel's forward + backward FLOP/s over the datasheet peak. None: the device's
    # devices.yaml figure (flash_attention_share_of_peak: FlashAttention-2 reaches 50–73% of
    # A100's peak, Dao 2023, and 35% of H100's, Shah et al. 2024), or FLASH_FALLBACK_SHARE
    # for a device without one; a number overrides both.
    flash_attention_efficiency: float | None = None
    # × the flash share, the device's or the fallback above (1.0: as published; a sensitivity knob)
    flash_attention_scale: float = 1.0
    # achieved over datasheet memory bandwidth for streaming kernels: a device-to-device copy on
    # A100 80GB reaches ~1.7 of 2.04 TB/s (our assumption, the order nvbandwidth reports).
    memory_efficiency: float = 0.85
    # NCCL all-reduce bus bandwidth over the per-direction link: nccl-tests on DGX A100 reach
    # ~230 GB/s busbw of NVLink3's 300 GB/s (0.77); over InfiniBand ~0.8 of line rate.
    link_efficiency: float = 0.78
    # per-device network line rate, replacing the device's devices.yaml figure (a cluster
    # whose network differs from the reference system's: None keeps the table's)
    network_bytes_per_s: float | None = None
    # per-device link inside a node, replacing the device's devices.yaml figure (an article that
    # states its own fabric, or a sensitivity row: None keeps the table's)
    intra_node_bytes_per_s: float | None = None
    # NCCL's own latency model (comm.NCCL_TUNING_SOURCE, Simple protocol): a call's base
    # latency and each ring step's inside a node (NVLink) and across nodes (network), and each
    # tree step's; TP and PP messages pay the ring step inside a node or across nodes
    nccl_base_latency_s: float = 8.4e-6
    alpha_intra_s: float = 3.4e-6
    alpha_inter_s: float = 14.0e-6
    tree_alpha_intra_s: float = 4.0e-6
    tree_alpha_inter_s: float = 14.0e-6
    # backward moves ~2× the forward's bytes in memory-bound kernels: it reads the saved input
    # and the incoming gradient and writes the outgoing one (our assumption)
    backward_traffic_factor: float = 2.0
    # fp32 cross-entropy over the vocabulary-parallel logits: cast, softmax and its gradient,
    # 5 passes of 4 bytes per logit (Megatron's vocab_parallel_cross_entropy; our count)
    loss_bytes_per_logit: float = 20.0
    # Adam over fp32 master weights: read param, grad, m, v (16 B), write param, m, v (12 B)
    # and the bf16 copy (2 B), plus the gradient-norm read (4 B) and zeroing (4 B)
    optimizer_bytes_per_param: float = 38.0
    # bytes per element of activations, TP/PP messages and gathered parameters (bf16)
    bytes_per_elem: float = 2.0
    # bytes per element of the reduced gradients. None: the framework's default at the run's
    # dtype (``grad_reduce_bytes_per_elem``): Megatron-LM reduces a bf16 run's gradients in fp32
    # (megatron/training/arguments.py: "bfloat16 requires gradient accumulation and all-reduce
    # to be done in fp32", unless --grad-reduce-in-bf16), the others in ``bytes_per_elem``
    grad_bytes_per_elem: float | None = None
    # share of the compute a DP collective can hide under that it does hide under (our
    # assumption: NCCL kernels take SMs and memory bandwidth from the compute they overlap)
    dp_overlap: float = 0.8
    # the frameworks' bucket sizes (comm.dp_collectives: their defaults and sources)
    ddp_bucket_bytes: float = DDP_BUCKET_BYTES
    deepspeed_bucket_elems: float = DEEPSPEED_BUCKET_ELEMS
    deepspeed_prefetch_elems: float = DEEPSPEED_PREFETCH_ELEMS
    # with tensor-parallel communication overlap (Megatron --tp-comm-overlap, PyTorch async TP)
    # the share of the TP collectives that hides under the layer's GEMMs (our assumption)
    tp_overlap_share: float = 0.8
    # share of the pipeline's point-to-point time on the critical path (Megatron's 1F1B waits
    # for each send/receive pair: all of it)
    pp_p2p_exposed: float = 1.0
    # seconds per step the devices wait for data (0: a prefetching loader hides it)
    data_s: float = 0.0
    # mixture of experts: the routed rows of the busiest device over the mean (1.0: balanced, as a
    # forced-balance router or a padded capacity buffer gives; our assumption, a lower bound)
    moe_load_imbalance: float = 1.0
    # share of the expert-parallel all-to-alls on the critical path (1.0: none hidden, Megatron-
    # Core's default; its --overlap-moe-expert-parallel-comm hides some under other micro-batches)
    ep_a2a_exposed: float = 1.0
    # FP8 GEMMs: the share of the FP8 peak they reach over the share 16-bit GEMMs reach of theirs
    # (1.0: the same share, so the datasheet's 2× carries over; our assumption, an upper bound)
    fp8_matmul_relative_efficiency: float = 1.0
    # bytes moved per element cast to FP8 (None: the recipe's figure, step_modern.FP8_CAST_BYTES_PER_ELEM)
    fp8_cast_bytes_per_elem: float | None = None
    # memory kept free for allocator fragmentation, runtime context and buffers (the recompute
    # study's fragmentation_margin; our assumption)
    memory_margin: float = 0.1

    def grad_reduce_bytes_per_elem(self, framework: str, dtype: str) -> float:
        """Bytes per reduced gradient element: the stated figure, else the framework's default
        (the ``grad_bytes_per_elem`` comment)."""
        if self.grad_bytes_per_elem is not None:
            return self.grad_bytes_per_elem
        return 4.0 if (framework == "megatron" and dtype == "bf16") else self.bytes_per_elem

    def nccl_latencies(self) -> dict:
        """The latency keyword arguments of :func:`comm.nccl_call_s`."""
        return {
            "base_s": self.nccl_base_latency_s,
            "intra_step_s": self.alpha_intra_s,
            "inter_step_s": self.alpha_inter_s,
            "tree_intra_step_s": self.tree_alpha_intra_s,
            "tree_inter_step_s": self.tree_alpha_inter_s,
        }


@dataclass(frozen=True)
class Link:
    """One α–β link: the per-step latency and the per-direction bandwidth a collective's
    slowest hop sees (``comm``'s ring model)."""

    alpha_s: float
    bytes_per_s: float | None  # None: no figure for this device (a layout that needs it is refused)


@dataclass(frozen=True)
class Rates:
    """The figures one prediction runs on, and where each came from."""

    peak_flops_per_s: float  # the MFU denominator (datasheet; a CPU: its measured ceiling)
    matmul_flops_per_s: float  # R∞
    matmul_latency_s: float  # t₀
    memory_bytes_per_s: float
    memory_capacity_bytes: float | None
    intra: Link
    inter: Link
    sources: dict
    # a flash attention kernel's forward + backward FLOP/s (None: Assumptions' share of the peak)
    flash_attention_flops_per_s: float | None = None
    # what the memory-bound kernels (norms, activations, residuals, loss) reach, in the bytes the
    # model counts for them per second (None: ``memory_bytes_per_s``, the streaming figure)
    elementwise_bytes_per_s: float | None = None

    def elementwise_rate(self) -> float:
        """Bytes per second of the memory-bound kernels (``elementwise_bytes_per_s``, else the
        streaming bandwidth)."""
        return self.elementwise_bytes_per_s or self.memory_bytes_per_s

    def link(self, span: int, devices_per_node: int, *, ranks_per_node: int = 1) -> Link:
        """The link of a group of ``span`` consecutive ranks (Megatron's rank order). Between
        nodes a group with ``ranks_per_node`` members in each node drives that many network
        ports at once (one port per device, as on a DGX: NCCL spreads its rings over them)."""
        if span <= 1:
            return Link(0.0, float("inf"))  # a group of one sends nothing
        link = self.intra if span <= devices_per_node else self.inter
        if link.bytes_per_s is None:
            where = "inside a node" if span <= devices_per_node else "between nodes"
            raise ParameterError(
                f"no link bandwidth {where} for this device ({self.sources['intra_node']}): pass a "
                "calibration measured on it, or add its interconnect to devices.yaml with its source"
            )
        if link is self.inter and ranks_per_node > 1:
            return Link(link.alpha_s, link.bytes_per_s * ranks_per_node)
        return link


def fit_matmul(rows) -> tuple[float, float]:
    """R∞ and t₀ of t = t₀ + F/R∞, least squares over a calibration's (FLOPs, median time)
    rows (Hockney's r∞–n½ model); t₀ is clipped at 0. Where the times do not grow with the size
    (launch-bound sizes, as in a smoke calibration) R∞ is the best rate reached and t₀ is 0."""
    F = np.array([r["flops"] for r in rows], dtype=float)
    t = np.array([r["median_s"] for r in rows], dtype=float)
    if F.size < 2:
        raise ParameterError("a matmul calibration needs at least two sizes to fit R∞ and t₀")
    slope, intercept = np.polyfit(F, t, 1)
    if slope <= 0:  # launch-bound sizes (a smoke calibration): no slope to fit, the best rate reached
        return float((F / t).max()), 0.0
    return 1.0 / slope, max(float(intercept), 0.0)


def read_calibration(path, dtype: str) -> dict:
    """The parts of a calibration a prediction uses: ``path`` is one setting's file or a
    ``results/<machine>/calibration`` folder (its ``gpu`` setting if measured, else ``cpu``);
    the matmul of ``dtype`` (else fp32, said in ``notes``)."""
    from mfulab.results import read_json

    folder = Path(path)
    if folder.is_file():
        files = [folder]
    elif folder.is_dir():
        files = [folder / f"{name}.json" for name in ("gpu", "cpu") if (folder / f"{name}.json").exists()]
    else:
        raise ParameterError(f"calibration {folder} does not exist (python -m mfulab calibrate measures one)")
    if not files:
        raise ParameterError(f"{folder} holds no gpu.json or cpu.json calibration")
    data = read_json(files[0])
    parts, notes = data["parts"], []
    key = f"matmul:{dtype}" if f"matmul:{dtype}" in parts else "matmul:fp32"
    if key not in parts:
        raise ParameterError(f"{files[0]} has no matmul calibration for {dtype} or fp32")
    if key != f"matmul:{dtype}":
        notes.append(f"no {dtype} matmul in the calibration: its fp32 one is used")
    collectives = sorted(
        (k for k in parts if k.startswith("collectives:")), key=lambda k: int(k.rsplit("x", 1)[1])
    )
    return {
        "file": str(files[0]),
        "device": data["stamp"].get("device"),
        "device_name": data["stamp"].get("device_name"),
        "matmul": parts[key],
        "bandwidth": parts.get("bandwidth"),
        "collectives": parts[collectives[-1]] if collectives else None,
        "collectives_key": collectives[-1] if collectives else None,
        "notes": notes,
    }


def flash_attention_share(a: Assumptions, spec=None) -> tuple[float, str]:
    """The share of peak a fused attention kernel runs at, and where it comes from: the
    ``flash_attention_efficiency`` setting, else the device's ``devices.yaml`` figure, else
    :data:`FLASH_FALLBACK_SHARE`; times ``flash_attention_scale``, capped at 1."""
    if a.flash_attention_efficiency is not None:
        share, source = (
            a.flash_attention_efficiency,
            f"flash_attention_efficiency {a.flash_attention_efficiency} of peak",
        )
    elif spec is not None and spec.flash_attention_share_of_peak is not None:
        share = spec.flash_attention_share_of_peak
        source = f"{spec.key} {share} of peak ({spec.flash_attention_source})"
    else:
        share, source = (
            FLASH_FALLBACK_SHARE,
            f"FLASH_FALLBACK_SHARE {FLASH_FALLBACK_SHARE} of peak (no figure for this device)",
        )
    if a.flash_attention_scale != 1.0:
        source += f", × flash_attention_scale {a.flash_attention_scale}"
    return min(1.0, share * a.flash_attention_scale), source


def machine_rates(device: str | None, *, dtype: str, calibration=None, assumptions: Assumptions) -> Rates:
    """The :class:`Rates` of ``device`` (a ``devices.yaml`` key), with a calibration's
    measurements in place of datasheet figures. Without a device, a calibration is required:
    its measured matmul ceiling is the MFU denominator (as the CPU studies do)."""
    from mfulab.analytic.devices import device_spec

    a = assumptions
    spec = device_spec(device) if device else None
    if isinstance(calibration, dict):  # already read (a study's records carry their calibration)
        cal = {"collectives": None, "collectives_key": None, "notes": [], **calibration}
    else:
        cal = read_calibration(calibration, dtype) if calibration else None
    if spec is None and cal is None:
        raise ParameterError("name a device (devices.yaml key) or pass a calibration folder")
    sources: dict = {}
    if spec is not None:
        if dtype not in spec.flops_per_s:
            raise ParameterError(
                f"{spec.key} has no published dense {dtype} peak; known: {', '.join(spec.flops_per_s)}"
            )
        peak = spec.flops_per_s[dtype]
        sources["peak"] = f"{spec.key} datasheet, dense {dtype} ({spec.source})"
    else:
        peak = cal["matmul"]["best_flops_per_s"]
        sources["peak"] = (
            f"measured matmul ceiling ({cal['file']}): no datasheet entry for {cal['device_name']}"
        )
    if cal is not None:
        r_inf, t0 = fit_matmul(cal["matmul"]["rows"])
        sources["matmul"] = f"R∞ and t₀ fitted to {cal['file']} ({cal['matmul']['dtype']} square matmuls)"
    else:
        mamf = (spec.mamf_flops_per_s or {}).get(dtype) if spec is not None else None
        if mamf is not None:
            where = f"{spec.key} MAMF {mamf / 1e12:.1f} TFLOP/s ({spec.mamf_source})"
        else:
            mamf = a.mamf_over_peak * peak
            where = f"no MAMF figure for {dtype}: mamf_over_peak {a.mamf_over_peak} × datasheet peak"
        r_inf, t0 = a.matmul_share_of_mamf * mamf, a.matmul_latency_s
        sources["matmul"] = f"matmul_share_of_mamf {a.matmul_share_of_mamf} × {where}, t₀ {t0:g} s"
    if cal is not None and cal["bandwidth"]:
        mem_bw = cal["bandwidth"]["plateau_bytes_per_s"]
        sources["memory"] = f"copy-bandwidth plateau of {cal['file']}"
    elif spec is not None and spec.mem_bytes_per_s:
        mem_bw = a.memory_efficiency * spec.mem_bytes_per_s
        sources["memory"] = f"memory_efficiency {a.memory_efficiency} × {spec.key} datasheet bandwidth"
    else:
        raise ParameterError(
            "no memory bandwidth: the device has no datasheet figure and no calibration measured one"
        )
    if spec is not None and spec.intra_node_bytes_per_s and spec.inter_node_bytes_per_s:
        intra = Link(a.alpha_intra_s, a.link_efficiency * spec.intra_node_bytes_per_s)
        inter = Link(a.alpha_inter_s, a.link_efficiency * spec.inter_node_bytes_per_s)
        sources["inter_node"] = f"link_efficiency {a.link_efficiency} × {spec.interconnect_source}"
        sources["intra_node"] = sources["inter_node"]
    else:
        intra = inter = Link(0.0, None)
        sources["inter_node"] = sources["intra_node"] = "no interconnect figure for this device"
    if a.network_bytes_per_s is not None:
        inter = Link(a.alpha_inter_s, a.link_efficiency * a.network_bytes_per_s)
        sources["inter_node"] = (
            f"link_efficiency {a.link_efficiency} × network_bytes_per_s {a.network_bytes_per_s:.3g}"
        )
    if a.intra_node_bytes_per_s is not None:
        intra = Link(a.alpha_intra_s, a.link_efficiency * a.intra_node_bytes_per_s)
        sources["intra_node"] = (
            f"link_efficiency {a.link_efficiency} × intra_node_bytes_per_s {a.intra_node_bytes_per_s:.3g}"
        )
    if cal is not None and cal["collectives"]:
        c = cal["collectives"]
        intra = Link(c["alpha_s"], c["link_bytes_per_s"])
        sources["intra_node"] = f"all-reduce α–β of {cal['file']} ({cal['collectives_key']})"
    flash_share, sources["flash_attention"] = flash_attention_share(a, spec)
    flash_rate, elementwise = flash_share * peak, None
    if cal is not None and cal.get("attention"):
        flash_rate = cal["attention"]["flops_per_s"]
        sources["flash_attention"] = (
            f"attention kernel timed alone at the step's shapes ({cal['attention']['source']})"
        )
    if cal is not None and cal.get("elementwise"):
        elementwise = cal["elementwise"]["bytes_per_s"]
        sources["elementwise"] = (
            f"memory-bound ops timed alone at the step's shapes ({cal['elementwise']['source']})"
        )
    sources["notes"] = cal["notes"] if cal else []
    return Rates(
        flash_attention_flops_per_s=flash_rate,
        elementwise_bytes_per_s=elementwise,
        peak_flops_per_s=peak,
        matmul_flops_per_s=r_inf,
        matmul_latency_s=t0,
        memory_bytes_per_s=mem_bw,
        memory_capacity_bytes=spec.memory_bytes if spec is not None else None,
        intra=intra,
        inter=inter,
        sources=sources,
    )
