"""The analytic planner of the ``recompute`` study: memory per device and predicted
throughput at the articles' scale (A17), and ZeRO-2 vs ZeRO-3 model states and traffic (A12).

Each (policy, micro-batch) of a case is one call of the course's step model
(``step.step_time``, chapter 09) on the case's device (a ``devices.yaml`` key): its step,
MFU and HFU, and its memory. Memory is Korthikanti et al.'s Table 2 per layer plus the ZeRO
model states and the logits, with a checkpointed segment's activations counted again while
that segment runs its backward (``memory.stage_activation_bytes``; the policies are
``memory.recompute_plan``'s). What the step model assumes (the GEMMs' share of MAMF, a kernel's
launch latency) is a named ``rates.Assumptions`` field the ``sensitivity`` table varies. No
torch: arithmetic on the stated cases of ``stated.PLANNER_CASES``.
"""

from __future__ import annotations

from mfulab.analytic import flops, memory, step
from mfulab.analytic.config import check_attention, preset
from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF
from mfulab.errors import ParameterError
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.units import GIB

PLAN_KEYS = {
    "name",
    "preset",
    "device",
    "tp",
    "pp",
    "dp",
    "zero_stage",
    "global_batch",
    "micro_batches",
    "policies",
}
PLAN_COLUMNS = (
    "case",
    "device",
    "attention",
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
TEXT_COLUMNS = ("case", "device", "policy")
STATED_ASSUMPTIONS = {"matmul_share_of_mamf": AT_SCALE_MATMUL_SHARE_OF_MAMF}  # rates: the at-scale share


def check_case(case: dict) -> None:
    """Refuse a planner case with a missing key, an unknown device or policy or a non-positive
    size."""
    from mfulab.analytic.devices import device_spec

    missing = PLAN_KEYS - set(case)
    if missing:
        raise ParameterError(f"planner case {case.get('name', '?')!r} misses {', '.join(sorted(missing))}")
    cfg = preset(case["preset"])
    for policy in case["policies"]:
        memory.recompute_plan(policy, cfg.n_layers)
    try:
        device_spec(case["device"])
    except ParameterError as err:
        raise ParameterError(f"planner case {case['name']!r}: {err}") from None
    for key in ("tp", "pp", "dp", "global_batch"):
        if not (isinstance(case[key], int) and case[key] > 0):
            raise ParameterError(
                f"planner case {case['name']!r}: {key} must be a positive whole number, got {case[key]!r}"
            )
    try:
        check_attention(case.get("attention", "naive"))
    except ParameterError as err:
        raise ParameterError(f"planner case {case['name']!r}: {err}") from None
    if cfg.n_layers % case["pp"]:
        raise ParameterError(
            f"planner case {case['name']!r}: pp={case['pp']} does not divide n_layers={cfg.n_layers}"
        )


def plan_case(case: dict, *, assumptions: dict | None = None, fragmentation_margin: float = 0.1):
    """Every (policy, micro-batch) of one planner case, each one call of the step model
    (``step.step_time``): memory per device, whether it fits the card less
    ``fragmentation_margin`` of it (the step model's ``memory_margin``), the shortfall, and the
    predicted step, tokens/s, MFU and HFU (PaLM convention). ``assumptions`` set fields of
    ``rates.Assumptions`` (default :data:`STATED_ASSUMPTIONS`). A micro-batch that does not
    split the global batch into whole micro-batches, or leaves fewer than ``pp`` of them for
    1F1B, is skipped."""
    import pandas as pd

    check_case(case)
    if not 0 <= fragmentation_margin < 1:
        raise ParameterError(f"fragmentation_margin must be in [0, 1), got {fragmentation_margin!r}")
    cfg = preset(case["preset"])
    tp, pp, dp = case["tp"], case["pp"], case["dp"]
    assumed = {**STATED_ASSUMPTIONS, **(assumptions or {}), "memory_margin": fragmentation_margin}
    rows = []
    for policy in case["policies"]:
        for mb in case["micro_batches"]:
            m = case["global_batch"] / (dp * mb)
            if m < pp or m != int(m):
                continue  # no whole micro-batches, or too few to fill the pipeline
            r = step.step_time(
                cfg,
                n_devices=tp * pp * dp,
                tp=tp,
                pp=pp,
                micro_batch=mb,
                global_batch=case["global_batch"],
                recompute=policy,
                sequence_parallel=case.get("sequence_parallel", False),
                zero_stage=case["zero_stage"],
                device=case["device"],
                attention=case.get("attention", "naive"),  # naive: Table 2 as printed
                dropout=True,  # Table 2 as printed keeps the dropout masks
                **assumed,
            )
            usable_gib = r["device_memory_gib"] * (1 - fragmentation_margin)
            fits = bool(r["fits"])
            rows.append(
                {
                    "case": case["name"],
                    "device": case["device"],
                    "attention": case.get("attention", "naive"),
                    "device_memory_gib": r["device_memory_gib"],
                    "usable_gib": usable_gib,
                    "policy": policy,
                    "micro_batch": mb,
                    "total_gib": r["memory_gib"],
                    "model_states_gib": r["model_states_gib"],
                    "activations_gib": r["activations_gib"],
                    "fits": fits,
                    "shortfall_gib": max(0.0, r["memory_gib"] - usable_gib),
                    "recompute_flops_share": r["hfu_palm"] / r["mfu_palm"] - 1,
                    "step_s": r["step_s"] if fits else None,
                    "tokens_per_s": r["tokens_per_s"] if fits else None,
                    "mfu": r["mfu_palm"] if fits else None,
                    "hfu": r["hfu_palm"] if fits else None,
                }
            )
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS))


def plans_table(cases, *, assumptions: dict | None = None, fragmentation_margin: float = 0.1):
    """Every planner case's rows in one table; no cases give an empty table with the columns."""
    import pandas as pd

    frames = [plan_case(c, assumptions=assumptions, fragmentation_margin=fragmentation_margin) for c in cases]
    if not frames:  # typed, so that filtering on ``fits`` and sorting still work
        empty = pd.DataFrame(columns=list(PLAN_COLUMNS))
        return empty.astype(
            {
                c: str if c in ("case", "policy", "device", "attention") else bool if c == "fits" else float
                for c in PLAN_COLUMNS
            }
        )
    return pd.concat(frames, ignore_index=True)


def chosen_plans(plans):
    """The decision: per case and policy, the micro-batch with the most tokens/s among those
    that fit (else the smallest, which does not fit), and ``decision`` marks each case's best
    policy (a tie: the earlier policy of the case's list). One row per (case, policy), in the
    cases' and policies' order."""
    import pandas as pd

    rows = []
    for _, g in plans.groupby(["case", "policy"], sort=False):
        fitting = g[g.fits]
        row = fitting.loc[fitting.tokens_per_s.astype(float).idxmax()] if len(fitting) else g.iloc[0]
        rows.append(row)
    if not rows:  # no cases: the plans' columns and an empty decision
        return plans.iloc[0:0].assign(
            decision=pd.Series(dtype=bool),
            lead_over_next=pd.Series(dtype=float),
            within_step_error=pd.Series(dtype=bool),
        )
    out = pd.DataFrame(rows).reset_index(drop=True)
    fitting = out[out.fits]
    # the most tokens/s; a tie goes to the earlier policy of the case's list ("none" first: with a
    # fused kernel "selective" re-runs and frees nothing, the same step and memory as "none")
    best = fitting.tokens_per_s.astype(float).groupby(fitting.case, sort=False).idxmax()
    out["decision"] = out.index.isin(best.values)
    # how far the decision leads the case's next distinct plan that fits (a policy that re-runs
    # nothing, "selective" under a fused kernel, is the same step as "none"), in tokens/s; a lead
    # inside the step model's error (studykit.step_error.SWITCH_MARGIN) ranks, it does not decide
    lead = {}
    for case, g in fitting.groupby("case", sort=False):
        rates = g.tokens_per_s.astype(float)
        top, others = rates.max(), rates[rates < rates.max() * (1 - 1e-9)]
        lead[case] = top / others.max() - 1 if len(others) else float("nan")
    out["lead_over_next"] = [
        lead.get(c, float("nan")) if d else float("nan") for c, d in zip(out.case, out.decision)
    ]
    out["within_step_error"] = out.lead_over_next <= SWITCH_MARGIN
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
                "zero2_gib": z2 / GIB,
                "zero3_gib": z3 / GIB,
                "saved_gib": (z2 - z3) / GIB,
                "saved_share_of_card": (z2 - z3) / (device_memory_gib * GIB),
                "zero2_traffic_gib": t2 / GIB,
                "zero3_traffic_gib": t3 / GIB,
                "traffic_ratio": t3 / t2,
            }
        )
    return pd.DataFrame(rows)
