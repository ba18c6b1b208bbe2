"""The analytic planner of the ``recompute`` study: memory per device and predicted
throughput at the articles' scale (A17), and ZeRO-2 vs ZeRO-3 model states and traffic (A12).

Memory is Korthikanti et al.'s Table 2 per layer (``memory.activation_bytes_per_layer``)
plus the ZeRO model states and the logits of ``memory.memory_per_device``; a checkpointed
segment's activations are counted again while that segment runs its backward
(:func:`activation_bytes`). Throughput follows a stated :class:`ThroughputModel` (an
assumption: ``sensitivity`` shows what moves with it). No torch: arithmetic on the stated
cases of ``stated.PLANNER_CASES``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import flops, memory, parallel
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
TABLE2_POLICIES = ("none", "selective", "mlp", "full")  # plus "block:<k>" and "uniform:<k>"
ATTENTIONS = ("naive", "fused")  # a case's optional "attention" key; naive: Table 2 as printed
LSE_BYTES_PER_ROW = memory.LSE_BYTES_PER_ROW  # a fused kernel's fp32 log-sum-exp per row and head
CHECKPOINT_METHODS = ("block", "uniform")  # Megatron's --recompute-method
PLAN_COLUMNS = (
    "case",
    "device_memory_gib",
    "usable_gib",
    "policy",
    "micro_batch",
    "total_gib",
    "model_states_gib",
    "activations_gib",
    "fits",
    "shortfall_gib",
    "recompute_flops_share",
    "step_s",
    "tokens_per_s",
    "mfu",
    "hfu",
)


@dataclass(frozen=True)
class ThroughputModel:
    """The planner's throughput assumption (not measured, not cited): a device reaches
    ``peak_utilisation × x / (x + half_saturation_tokens)`` of its peak on hardware FLOPs,
    where x is the tokens in one micro-batch (small micro-batches under-fill the device);
    1F1B pipelining adds the bubble of ``parallel.pipeline_bubble_fraction``, (pp − 1)/m of the
    compute for m micro-batches per replica.
    ``peak_utilisation`` scales every plan alike; ``half_saturation_tokens`` decides how much
    a larger micro-batch is worth, hence the choice between recomputing and not."""

    peak_utilisation: float = 0.55
    half_saturation_tokens: float = 2048

    def utilisation(self, tokens_per_micro_batch: float) -> float:
        x = tokens_per_micro_batch
        return self.peak_utilisation * x / (x + self.half_saturation_tokens)


@dataclass(frozen=True)
class PlanPolicy:
    """A planner policy: a Table 2 form for every layer (``none``, ``selective``, ``mlp``), or
    whole layers checkpointed as Megatron's ``--recompute-method`` does it: ``block:<k>``
    checkpoints each of the first k layers of a pipeline stage; ``uniform:<k>`` checkpoints
    the stage's layers in chunks of k (every layer is recomputed); ``full`` is ``uniform:1``."""

    name: str
    table2: str  # the per-layer Table 2 form of the layers it recomputes
    method: str | None = None  # block | uniform | None (a Table 2 form on every layer)
    k: int | None = None

    def segments(self, layers: int) -> list[tuple[int, bool]]:
        """The stage's layers as (size, checkpointed) segments, first layer first."""
        if self.method is None:
            return [(1, False)] * layers
        if self.method == "block":
            k = min(self.k, layers)
            return [(1, True)] * k + [(1, False)] * (layers - k)
        sizes = [min(self.k, layers - start) for start in range(0, layers, self.k)]
        return [(size, True) for size in sizes]

    def recomputed_layers(self, layers: int) -> int:
        return sum(size for size, checkpointed in self.segments(layers) if checkpointed)


def parse_plan_policy(policy: str, n_layers: int) -> PlanPolicy:
    """A planner policy string → :class:`PlanPolicy` (k between 1 and ``n_layers``)."""
    method, _, k = policy.partition(":")
    if method in CHECKPOINT_METHODS and k:
        if not k.isdigit() or not 1 <= int(k) <= n_layers:
            raise ParameterError(f"{policy}: k must be a whole number between 1 and n_layers={n_layers}")
        return PlanPolicy(policy, "full", method, int(k))
    if policy == "full":
        return PlanPolicy(policy, "full", "uniform", 1)
    if policy not in TABLE2_POLICIES:
        raise ParameterError(
            f"planner policy must be none, selective, mlp, full, block:<k> or uniform:<k>; got {policy!r}"
        )
    return PlanPolicy(policy, policy)


def layer_bytes(
    cfg, form: str, *, attention: str = "naive", micro_batch: int, tp: int, sequence_parallel: bool
):
    """Bytes one layer keeps under the Table 2 ``form`` (``memory.activation_bytes_per_layer``).
    ``naive``: Table 2 as printed (the a·s²·b scores, softmax and dropout stored). ``fused``: a
    flash kernel stores none of them but one fp32 log-sum-exp per row and head instead, which
    recomputing the attention core (``selective``) frees (``fused_attention``)."""
    return memory.activation_bytes_per_layer(
        cfg,
        recompute=form,
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sequence_parallel,
        fused_attention=attention == "fused",
    )


def activation_bytes(
    cfg, plan: PlanPolicy, *, micro_batch: int, tp: int, pp: int, sp: bool = False, attention: str = "naive"
) -> dict:
    """Activation bytes on the first pipeline stage: kept at the end of the forward pass
    (``stored_bytes``, Korthikanti Table 2 per layer) and at the peak of the backward pass
    (``peak_bytes``).

    The stage holds ``pp`` micro-batches in flight under 1F1B (Korthikanti Sec. 4.2.3); one of
    them runs its backward, segment by segment from the last: while segment j does, the
    segments before it keep what they stored, and j itself holds what its backward needs, a
    whole layer's activations for each of its layers (a checkpointed segment recomputes them;
    a selective or mlp layer recomputes its part). ``uniform:12`` on 40 layers thus peaks at
    two chunk inputs plus 12 full layers; ``block:k`` peaks at the end of the forward pass."""
    layers = cfg.n_layers // pp
    kw = dict(micro_batch=micro_batch, tp=tp, sequence_parallel=sp, attention=attention)
    full_layer = layer_bytes(cfg, "none", **kw)
    checkpoint = layer_bytes(cfg, "full", **kw)  # a segment's input
    # a layer outside every checkpoint keeps its own Table 2 form (all of it under block/uniform)
    own_form = layer_bytes(cfg, plan.table2 if plan.method is None else "none", **kw)
    segments = plan.segments(layers)
    stored = [checkpoint if ckpt else size * own_form for size, ckpt in segments]
    stored_one = sum(stored)
    backward = [sum(stored[:j]) + max(stored[j], size * full_layer) for j, (size, _) in enumerate(segments)]
    peak_one = max([stored_one, *backward])
    return {
        "stored_bytes": pp * stored_one,
        "peak_bytes": (pp - 1) * stored_one + peak_one,
        "recomputed_layers": pp * plan.recomputed_layers(layers),
    }


def hardware_flops_per_token(cfg, policy, layers):
    """palm-convention hardware FLOPs per token: ``policy`` (a Table 2 form) recomputed on
    ``layers`` of the layers (None: all). ``full`` re-runs each recomputed layer's whole
    forward pass (Megatron's checkpoints are reentrant: nothing is skipped)."""
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
    if case.get("attention", "naive") not in ATTENTIONS:
        raise ParameterError(f"planner case {case['name']!r}: attention must be one of {ATTENTIONS}")
    if cfg.n_layers % case["pp"]:
        raise ParameterError(
            f"planner case {case['name']!r}: pp={case['pp']} does not divide n_layers={cfg.n_layers}"
        )


def plan_case(
    case: dict, *, throughput: ThroughputModel = ThroughputModel(), fragmentation_margin: float = 0.1
):
    """Every (policy, micro-batch) of one planner case: memory per device, whether it fits the
    card less ``fragmentation_margin`` of it, the shortfall, and the predicted tokens/s, MFU
    and HFU under ``throughput``."""
    import pandas as pd

    check_case(case)
    if not 0 <= fragmentation_margin < 1:
        raise ParameterError(f"fragmentation_margin must be in [0, 1), got {fragmentation_margin!r}")
    cfg = preset(case["preset"])
    tp, pp, dp = case["tp"], case["pp"], case["dp"]
    devices = tp * pp * dp
    peak_flops_per_s = case["peak_flops_per_s"]
    model_fpt = flops.flops_per_token(cfg, convention="palm")
    usable_bytes = case["device_memory_gib"] * 2**30 * (1 - fragmentation_margin)
    rows = []
    for policy in case["policies"]:
        plan = parse_plan_policy(policy, cfg.n_layers)
        recomputed = None if plan.method is None else pp * plan.recomputed_layers(cfg.n_layers // pp)
        hw_fpt = hardware_flops_per_token(cfg, plan.table2, recomputed)
        for mb in case["micro_batches"]:
            m = case["global_batch"] / (dp * mb)
            if m < 1 or m != int(m):
                continue  # the global batch does not split into whole micro-batches
            states = memory.memory_per_device(
                cfg, micro_batch=mb, tp=tp, pp=pp, dp=dp, zero_stage=case["zero_stage"]
            )
            act = activation_bytes(
                cfg,
                plan,
                micro_batch=mb,
                tp=tp,
                pp=pp,
                sp=case.get("sequence_parallel", False),
                attention=case.get("attention", "naive"),
            )
            total_bytes = states["model_states_bytes"] + states["logits_bytes"] + act["peak_bytes"]
            fits = total_bytes <= usable_bytes
            tokens_per_step = case["global_batch"] * cfg.seq_len
            bubble = parallel.pipeline_bubble_fraction(p=pp, m=int(m))  # over the compute (Narayanan §2.2.1)
            achieved_flops_per_s = devices * peak_flops_per_s * throughput.utilisation(mb * cfg.seq_len)
            step_s = tokens_per_step * hw_fpt / achieved_flops_per_s * (1 + bubble)
            tokens_per_s = tokens_per_step / step_s
            rows.append(
                {
                    "case": case["name"],
                    "device_memory_gib": case["device_memory_gib"],
                    "usable_gib": usable_bytes / 2**30,
                    "policy": policy,
                    "micro_batch": mb,
                    "total_gib": total_bytes / 2**30,
                    "model_states_gib": states["model_states_bytes"] / 2**30,
                    "activations_gib": act["peak_bytes"] / 2**30,
                    "fits": fits,
                    "shortfall_gib": max(0.0, (total_bytes - usable_bytes) / 2**30),
                    "recompute_flops_share": hw_fpt / model_fpt - 1,
                    "step_s": step_s if fits else None,
                    "tokens_per_s": tokens_per_s if fits else None,
                    "mfu": model_fpt * tokens_per_s / (devices * peak_flops_per_s) if fits else None,
                    "hfu": hw_fpt * tokens_per_s / (devices * peak_flops_per_s) if fits else None,
                }
            )
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS))


def plans_table(cases, *, throughput: ThroughputModel = ThroughputModel(), fragmentation_margin: float = 0.1):
    """Every planner case's rows in one table; no cases give an empty table with the columns."""
    import pandas as pd

    frames = [plan_case(c, throughput=throughput, fragmentation_margin=fragmentation_margin) for c in cases]
    if not frames:  # typed, so that filtering on ``fits`` and sorting still work
        empty = pd.DataFrame(columns=list(PLAN_COLUMNS))
        return empty.astype(
            {c: str if c in ("case", "policy") else bool if c == "fits" else float for c in PLAN_COLUMNS}
        )
    return pd.concat(frames, ignore_index=True)


def chosen_plans(plans):
    """The decision: per case and policy, the micro-batch with the most tokens/s among those
    that fit (else the smallest, which does not fit), and ``decision`` marks each case's best
    policy. One row per (case, policy), in the cases' and policies' order."""
    import pandas as pd

    rows = []
    for _, g in plans.groupby(["case", "policy"], sort=False):
        fitting = g[g.fits]
        row = fitting.loc[fitting.tokens_per_s.astype(float).idxmax()] if len(fitting) else g.iloc[0]
        rows.append(row)
    if not rows:  # no cases: the plans' columns and an empty decision
        return plans.iloc[0:0].assign(decision=pd.Series(dtype=bool))
    out = pd.DataFrame(rows).reset_index(drop=True)
    best = out[out.fits].groupby("case", sort=False).tokens_per_s.transform("max")
    out["decision"] = False
    out.loc[best.index, "decision"] = out.loc[best.index, "tokens_per_s"] == best
    return out


def decision(plans, case: str) -> str:
    """One case's decision as ``policy@micro-batch`` (or ``nothing fits``)."""
    chosen = chosen_plans(plans[plans.case == case])
    best = chosen[chosen.decision]
    return f"{best.policy.iloc[0]}@{int(best.micro_batch.iloc[0])}" if len(best) else "nothing fits"


def zero_comparison(
    preset_name: str, *, tp: int, dp_values, device_memory_gib: float, global_batch: int, micro_batch: int
):
    """A12: per-device model-state memory and data-parallel traffic per optimizer step, ZeRO-2
    vs ZeRO-3, with the ``global_batch / (dp · micro_batch)`` micro-batches each step accumulates."""
    import pandas as pd

    n = flops.param_count(preset(preset_name)) / tp
    rows = []
    for dp in dp_values:
        steps = global_batch / (dp * micro_batch)
        if steps < 1 or steps != int(steps):
            raise ParameterError(f"global batch {global_batch} does not split into dp={dp} × micro-batches")
        m = int(steps)
        z2 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=2)
        z3 = memory.model_state_bytes_per_device(n, n_devices=dp, zero_stage=3)
        t2 = memory.zero_traffic_bytes_per_step(n, zero_stage=2, accumulation_steps=m)
        t3 = memory.zero_traffic_bytes_per_step(n, zero_stage=3, accumulation_steps=m)
        rows.append(
            {
                "preset": preset_name,
                "tp": tp,
                "dp": dp,
                "accumulation_steps": m,
                "zero2_gib": z2 / 2**30,
                "zero3_gib": z3 / 2**30,
                "saved_gib": (z2 - z3) / 2**30,
                "saved_share_of_card": (z2 - z3) / (device_memory_gib * 2**30),
                "zero2_traffic_gib": t2 / 2**30,
                "zero3_traffic_gib": t3 / 2**30,
                "traffic_ratio": t3 / t2,
            }
        )
    return pd.DataFrame(rows)
