"""Readings of a device the step model was never validated on, for the rule that a verdict priced
on such a device decides only where no reading of the device reverses it (``docs/claims.md``).

Chapter 09 validates the step model on published GPU runs only; a device marked ``approximate``
in ``devices.yaml`` (no vendor datasheet: article A's Ascend 910B) carries GPU-fitted shares and
NCCL's latency model to a card with no published run in the validation. Its verdicts are
*analysis at assumed configurations*, and each reading below is an assumed input of the row:

- **peak**: the family's SKUs, where ``devices.yaml`` has them (the 910B's Cube peaks, 294.9 and
  373.9 TFLOP/s for the 910B3 and 910B1, from a Huawei-copyrighted TorchTitan peak-FLOPS hook);
- **GEMM share**: the GEMMs' share of MAMF at ``GEMM_SHARES`` (our range around the 0.81
  chapter 09 fits on A100 Megatron runs; the 910B has no published MAMF);
- **HBM**: streaming kernels at ``HBM_GB_PER_S_LOW`` instead of the cited 1.6 TB/s (our reading:
  the family's bandwidth is quoted, not published per SKU);
- **collective latency**: every per-call latency of NCCL's model × ``LATENCY_SCALES`` (HCCL's
  own small-message latency is not published for the 910B: our range).
"""

from __future__ import annotations

from mfulab.analytic.devices import device_spec
from mfulab.analytic.rates import Assumptions

# the family's lowest and highest SKU peak in devices.yaml, per approximate device key
SKU_RANGE = {"ascend-910b": ("ascend-910b3", "ascend-910b1")}
GEMM_SHARES = (0.6, 0.9)  # the GEMMs' share of MAMF (our range; chapter 09 fits 0.81 on A100s)
HBM_GB_PER_S_LOW = 1200.0  # GB/s, the low end of the bandwidth read for the device (our range)
LATENCY_SCALES = (0.5, 4.0)  # × every per-call latency of NCCL's model, standing in for HCCL's
LATENCY_FIELDS = (
    "nccl_base_latency_s",
    "alpha_intra_s",
    "alpha_inter_s",
    "tree_alpha_intra_s",
    "tree_alpha_inter_s",
)


def is_extrapolated(device: str) -> bool:
    """Whether ``device`` has no vendor datasheet (``devices.yaml`` ``approximate``): the step
    model's validation, all on published GPU runs, does not reach it."""
    return device_spec(device).approximate


def device_readings(device: str, **assumptions) -> dict[str, dict]:
    """The readings of an extrapolated ``device`` (empty for a validated one): name → the step
    model's inputs, ``{"device": key, **assumption overrides}``, each one reading varied from
    ``assumptions`` (the row's own overrides of ``rates.Assumptions``, kept in every reading)."""
    if not is_extrapolated(device):
        return {}
    base = Assumptions(**{k: v for k, v in assumptions.items() if k in Assumptions.__dataclass_fields__})
    spec, out = device_spec(device), {}
    # a SKU entry has its own peak but no interconnect figure: the family's links carry over
    links = {
        "intra_node_bytes_per_s": spec.intra_node_bytes_per_s,
        "network_bytes_per_s": spec.inter_node_bytes_per_s,
    }
    for sku in SKU_RANGE.get(device, ()):
        peak_tflops = device_spec(sku).flops_per_s["bf16"] / 1e12
        out[f"peak {peak_tflops:.0f} TFLOP/s ({sku})"] = {**links, **assumptions, "device": sku}
    for share in GEMM_SHARES:
        out[f"GEMMs at {share:g} of MAMF"] = {**assumptions, "device": device, "matmul_share_of_mamf": share}
    cited_gb_per_s = spec.mem_bytes_per_s / 1e9
    hbm_efficiency = base.memory_efficiency * HBM_GB_PER_S_LOW / cited_gb_per_s
    out[f"HBM {HBM_GB_PER_S_LOW / 1e3:g} TB/s"] = {
        **assumptions,
        "device": device,
        "memory_efficiency": hbm_efficiency,
    }
    for scale in LATENCY_SCALES:
        scaled = {f: scale * getattr(base, f) for f in LATENCY_FIELDS}
        out[f"collective latency × {scale:g}"] = {**assumptions, "device": device, **scaled}
    return out
