"""The analytic planner of the ``recompute`` study: memory per device and predicted
throughput at the articles' scale (A17), and ZeRO-2 vs ZeRO-3 model states (A12).

Memory is Korthikanti et al.'s Table 2 plus the ZeRO model-state formulas
(``memory.memory_per_device``); throughput follows a stated :class:`ThroughputModel`. No
torch: the planner is arithmetic on the stated cases of ``stated.PLANNER_CASES``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import flops, memory
from ...config import ParameterError, preset

PLAN_KEYS = {
    "name",
    "preset",
    "device_memory_gib",
    "peak_flops_per_s",
    "tp",
    "pp",
    "dp",
    "zero_stage",
    "global_batch",
    "micro_batches",
    "policies",
}
PLAN_POLICIES = ("none", "selective", "mlp", "full")  # the Table 2 forms; plus "every_k:<k>"
PLAN_COLUMNS = (
    "case",
    "device_memory_gib",
    "policy",
    "micro_batch",
    "total_gib",
    "model_states_gib",
    "activations_gib",
    "fits",
    "shortfall_gib",
    "step_s",
    "tokens_per_s",
    "mfu",
    "hfu",
)


@dataclass(frozen=True)
class ThroughputModel:
    """The planner's stated throughput assumption: a device reaches
    ``peak_utilisation × x / (x + half_saturation_tokens)`` of its peak on hardware FLOPs,
    where x is the tokens in one micro-batch (small micro-batches under-fill the device);
    1F1B pipelining idles (pp − 1)/(m + pp − 1) of the step for m micro-batches per replica."""

    peak_utilisation: float = 0.55
    half_saturation_tokens: float = 2048

    def utilisation(self, tokens_per_micro_batch: float) -> float:
        x = tokens_per_micro_batch
        return self.peak_utilisation * x / (x + self.half_saturation_tokens)


def parse_plan_policy(policy: str, n_layers: int) -> tuple[str, int | None]:
    """A planner policy → (Table 2 policy, recomputed layers or None for all)."""
    if policy.startswith("every_k:"):
        k = int(policy.split(":", 1)[1])
        if not 1 <= k <= n_layers:
            raise ParameterError(f"{policy}: k must be between 1 and n_layers={n_layers}")
        return "full", k
    if policy not in PLAN_POLICIES:
        raise ParameterError(
            f"planner policy must be none, selective, mlp, full or every_k:<k>; got {policy!r}"
        )
    return policy, None


def hardware_flops_per_token(cfg, policy, layers):
    """palm-convention hardware FLOPs per token for a planner policy."""
    model = flops.flops_per_token(cfg, convention="palm")
    if policy == "mlp":  # one more forward of every MLP: 2 FLOPs per weight
        n_mats = 3 if cfg.mlp == "swiglu" else 2
        return model + cfg.n_layers * 2 * n_mats * cfg.d_model * cfg.d_ff
    hw = flops.flops_per_token(cfg, convention="palm", recompute=policy)
    fraction = 1.0 if layers is None else layers / cfg.n_layers
    return model + fraction * (hw - model)


def check_case(case: dict) -> None:
    """Refuse a planner case with a missing key, an unknown policy or a non-positive size."""
    missing = PLAN_KEYS - set(case)
    if missing:
        raise ParameterError(f"planner case {case.get('name', '?')!r} misses {', '.join(sorted(missing))}")
    cfg = preset(case["preset"])
    for policy in case["policies"]:
        parse_plan_policy(policy, cfg.n_layers)
    for key in ("device_memory_gib", "peak_flops_per_s", "tp", "pp", "dp", "global_batch"):
        if not (isinstance(case[key], (int, float)) and case[key] > 0):
            raise ParameterError(
                f"planner case {case['name']!r}: {key} must be a positive number, got {case[key]!r}"
            )


def plan_case(case: dict, *, throughput: ThroughputModel = ThroughputModel()):
    """Every (policy, micro-batch) of one planner case: memory per device, whether it fits,
    the shortfall, and the predicted tokens/s, MFU and HFU under ``throughput``."""
    import pandas as pd

    check_case(case)
    cfg = preset(case["preset"])
    devices = case["tp"] * case["pp"] * case["dp"]
    model_fpt = flops.flops_per_token(cfg, convention="palm")
    rows = []
    for policy in case["policies"]:
        base, layers = parse_plan_policy(policy, cfg.n_layers)
        hw_fpt = hardware_flops_per_token(cfg, base, layers)
        for mb in case["micro_batches"]:
            m = case["global_batch"] / (case["dp"] * mb)
            if m < 1 or m != int(m):
                continue  # the global batch does not split into whole micro-batches
            mem = memory.memory_per_device(
                cfg,
                micro_batch=mb,
                tp=case["tp"],
                pp=case["pp"],
                dp=case["dp"],
                zero_stage=case["zero_stage"],
                recompute=base,
                recompute_layers=layers,
                sequence_parallel=case.get("sequence_parallel", False),
            )
            capacity = case["device_memory_gib"] * 2**30
            fits = mem["total_bytes"] <= capacity
            tokens_per_step = case["global_batch"] * cfg.seq_len
            bubble = (case["pp"] - 1) / (m + case["pp"] - 1)
            achieved = devices * case["peak_flops_per_s"] * throughput.utilisation(mb * cfg.seq_len)
            step_s = tokens_per_step * hw_fpt / achieved / (1 - bubble)
            tps = tokens_per_step / step_s
            rows.append(
                {
                    "case": case["name"],
                    "device_memory_gib": case["device_memory_gib"],
                    "policy": policy,
                    "micro_batch": mb,
                    "total_gib": mem["total_bytes"] / 2**30,
                    "model_states_gib": mem["model_states_bytes"] / 2**30,
                    "activations_gib": mem["activations_bytes"] / 2**30,
                    "fits": fits,
                    "shortfall_gib": max(0.0, (mem["total_bytes"] - capacity) / 2**30),
                    "step_s": step_s if fits else None,
                    "tokens_per_s": tps if fits else None,
                    "mfu": model_fpt * tps / (devices * case["peak_flops_per_s"]) if fits else None,
                    "hfu": hw_fpt * tps / (devices * case["peak_flops_per_s"]) if fits else None,
                }
            )
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS))


def plans_table(cases, *, throughput: ThroughputModel = ThroughputModel()):
    """Every planner case's rows in one table; no cases give an empty table with the columns."""
    import pandas as pd

    frames = [plan_case(c, throughput=throughput) for c in cases]
    if not frames:  # typed, so that filtering on ``fits`` and sorting still work
        empty = pd.DataFrame(columns=list(PLAN_COLUMNS))
        return empty.astype(
            {c: str if c in ("case", "policy") else bool if c == "fits" else float for c in PLAN_COLUMNS}
        )
    return pd.concat(frames, ignore_index=True)


def zero_comparison(preset_name: str, *, tp: int, dp_values, device_memory_gib: float):
    """A12: per-device model-state memory and data-parallel traffic, ZeRO-2 vs ZeRO-3."""
    import pandas as pd

    n = flops.param_count(preset(preset_name)) / tp
    rows = []
    for dp in dp_values:
        z2 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=2)
        z3 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=3)
        rows.append(
            {
                "preset": preset_name,
                "tp": tp,
                "dp": dp,
                "zero2_gib": z2 / 2**30,
                "zero3_gib": z3 / 2**30,
                "saved_gib": (z2 - z3) / 2**30,
                "saved_share_of_card": (z2 - z3) / (device_memory_gib * 2**30),
                "zero2_traffic_gib": memory.zero_traffic_bytes_per_step(n, zero_stage=2) / 2**30,
                "zero3_traffic_gib": memory.zero_traffic_bytes_per_step(n, zero_stage=3) / 2**30,
            }
        )
    return pd.DataFrame(rows)
