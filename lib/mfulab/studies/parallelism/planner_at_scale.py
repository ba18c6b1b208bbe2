"""The ``parallelism`` claims at the articles' scale, analytic: per-device TP vs DP traffic
(``parallel``, ``memory``), the layout planner (``layouts.plan``, which ranks with the course's
one step model, ``step.step_time``) on the stated cluster (``stated.CLUSTER``: a
``devices.yaml`` key and the planner's assumptions), and interleaving across layer counts
(optimizer offload: ``offload``). Every input is a named constant of ``stated`` or an
argument."""

from __future__ import annotations

import itertools

from mfulab.analytic import comm, extrapolated, flops, layouts, memory, parallel, step
from mfulab.analytic.config import preset
from mfulab.analytic.rates import Assumptions
from mfulab.studies.parallelism import stated


def cluster(
    n_devices: int, *, devices_per_node: int | None = None, device: str | None = None, **assumptions
) -> dict:
    """The step model's inputs for ``n_devices`` of the stated cluster (``stated.CLUSTER``):
    its device key, devices per node and the planner's assumptions, any of them overridden."""
    c = stated.CLUSTER
    return {
        "n_devices": n_devices,
        "device": device or c["device"],
        "devices_per_node": devices_per_node or c["devices_per_node"],
        **c["assumptions"],
        **assumptions,
    }


def layout_label(r) -> str:
    """A planner row as one short string: TP·PP·DP, virtual stages, micro-batch, ZeRO, recompute."""
    return f"TP{r.tp}·PP{r.pp}·DP{r.dp} v{r.v} mb{r.micro_batch} z{r.zero_stage} {r.recompute_policy}"


def _layout(row, *int_keys) -> dict:
    """A planner row's layout keys as plain Python values (``layouts.layout_step`` input)."""
    return {**{k: int(row[k]) for k in int_keys}, "recompute_policy": str(row["recompute_policy"])}


def tp_vs_dp_traffic(
    *,
    preset_name: str,
    seq_len: int,
    micro_batch: int,
    global_batch: int,
    tp: int,
    dp: int,
    grad_bytes: float | None = None,
):
    """Bytes each device sends per optimizer step: TP's collectives over every layer and
    micro-batch (``parallel.tp_comm_elements_per_layer``, ``Assumptions.bytes_per_elem``) against
    DP's gradient all-reduce of its 1/tp of the model (2Ψ/tp·(dp − 1)/dp,
    ``memory.zero_traffic_bytes_per_step``, at ``Assumptions.grad_reduce_bytes_per_elem`` for
    ``stated.A10_FRAMEWORK``: Megatron's fp32), and the collective calls each issues (TP: 4 per
    layer and micro-batch; DP: one per bucket)."""
    a = Assumptions()
    cfg = preset(preset_name).with_(seq_len=seq_len)
    m = global_batch // (dp * micro_batch)
    per_layer = parallel.tp_comm_elements_per_layer(cfg, micro_batch=micro_batch, tp=tp)
    tp_bytes = per_layer["elements_sent_per_device"] * cfg.n_layers * m * a.bytes_per_elem
    if grad_bytes is None:  # a reduction dtype of its own (bf16: DeepSpeed's default) where given
        grad_bytes = a.grad_reduce_bytes_per_elem(stated.A10_FRAMEWORK, stated.A10_DTYPE)
    dp_bytes = (
        memory.zero_traffic_bytes_per_step(
            flops.param_count(cfg) / tp, zero_stage=0, bytes_per_elem=grad_bytes
        )
        * (dp - 1)
        / dp
    )
    return {
        "preset": preset_name,
        "global_batch": global_batch,
        "micro_batches": m,
        "tp_bytes_per_step": tp_bytes,
        "dp_bytes_per_step": dp_bytes,
        "tp_over_dp": tp_bytes / dp_bytes,
        "tp_calls_per_step": 4 * cfg.n_layers * m,
    }


def a10_traffic_table():
    import pandas as pd

    L, M, S = stated.A10_LAYOUT, stated.A10_MODEL, stated.A10_SENSITIVITY
    rows = [
        tp_vs_dp_traffic(
            preset_name=name,
            seq_len=M["seq_len"],
            micro_batch=M["micro_batch"],
            global_batch=gb,
            tp=L["tp"],
            dp=L["dp"],
        )
        for name in S["presets"]
        # one micro-batch per DP rank first (the 128-card case states no batch), then the table's
        for gb in sorted({L["dp"] * M["micro_batch"], *S["global_batches"]})
    ]
    return pd.DataFrame(rows)


def a10_placement():
    """The article's layout (TP 8 × DP 16 on 128 cards, the A10 model) with TP inside a node
    and, for contrast, with the same TP group spread over two nodes of 4 (its collectives then
    cross the network), on each device of ``stated.A10_DEVICES`` (the article's 910B with HCCS,
    and A100s with NVLink): the planner's step-time terms of each."""
    import pandas as pd

    L, M = stated.A10_LAYOUT, stated.A10_MODEL
    cfg = preset(M["preset"]).with_(seq_len=M["seq_len"])
    m = M["global_batch"] // (L["dp"] * M["micro_batch"])
    layout = {
        "tp": L["tp"],
        "pp": 1,
        "dp": L["dp"],
        "v": 1,
        "micro_batch": M["micro_batch"],
        "m": m,
        "zero_stage": 1,
        "recompute_policy": "selective",
    }
    # the latency sensitivity: every per-call latency of NCCL's model doubled, each group's added
    # seconds (the calls on its path times the added latency)
    base = Assumptions()
    rows = []
    for device, reading, inputs in _device_readings(stated.A10_DEVICES):
        doubled = {f: 2 * inputs.get(f, getattr(base, f)) for f in A10_LATENCY_FIELDS}
        for where, per_node in (
            ("TP inside a node (8 per node)", 8),
            ("TP across two nodes (4 per node)", 4),
        ):
            t, slow = (
                layouts.layout_step(
                    cfg,
                    layout,
                    global_batch=M["global_batch"],
                    **cluster(L["devices"], devices_per_node=per_node, **{**inputs, **extra}),
                )
                for extra in ({}, doubled)
            )
            rows.append(
                {
                    "device": device,
                    "reading": reading,
                    "placement": where,
                    **{
                        k: t[k] for k in ("tp_comm_s", "dp_comm_s", "dp_comm_exposed_s", "step_s", "mfu_palm")
                    },
                    "tp_added_by_latency_s": slow["tp_comm_s"] - t["tp_comm_s"],
                    "dp_added_by_latency_s": slow["dp_comm_s"] - t["dp_comm_s"],
                }
            )
    return pd.DataFrame(rows)


def _device_readings(devices):
    """(device, reading, the step model's inputs) for each device as stated ("stated") and, for a
    device the step model was never validated on, each reading of it (``extrapolated``)."""
    for device in devices:
        yield device, "stated", {"device": device}
        for name, inputs in extrapolated.device_readings(device, **stated.CLUSTER["assumptions"]).items():
            yield device, name, inputs


A10_LATENCY_FIELDS = extrapolated.LATENCY_FIELDS  # every per-call latency of NCCL's model


def a12_planner_table():
    """ZeRO-2 against ZeRO-3 (planner, on each card of ``stated.AT_SCALE_DEVICES``: article A's 910B,
    then the A100) for a case inside the article's range
    (a ten-billion-class model below 1000 cards) and one outside it, at the planner's assumed DP
    overlap and with none:
    the best fitting layout of each family, and the best ZeRO 0–2 layout switched to ZeRO-3
    (the same layout: what ZeRO-3's traffic alone costs)."""
    import pandas as pd

    rows = []
    for device, case, overlap in itertools.product(
        stated.AT_SCALE_DEVICES, stated.A12_PLANNER_CASES, stated.A12_DP_OVERLAPS
    ):
        cfg = preset(case["preset"])
        kw = dict(global_batch=case["devices"], **cluster(case["devices"], dp_overlap=overlap, device=device))
        plans = layouts.plan(cfg, top=None, **kw)
        best2, best3 = plans[plans.zero_stage <= 2].iloc[0], plans[plans.zero_stage == 3].iloc[0]
        layout = _layout(best2, "tp", "pp", "dp", "v", "micro_batch", "m")
        same3 = layouts.layout_step(
            cfg, {**layout, "zero_stage": 3, "recompute_policy": best2.recompute_policy}, **kw
        )
        # the stage alone, one framework's schedule for both: FSDP2 at ZeRO-2
        # (reshard_after_forward off) on the best ZeRO-3 layout, and the best ZeRO 0–2 layout at
        # ZeRO-3 in its own framework where that framework has a stage 3 (DeepSpeed)
        layout3 = _layout(best3, "tp", "pp", "dp", "v", "micro_batch", "m")
        fsdp2 = layouts.layout_step(
            cfg,
            {**layout3, "zero_stage": 2, "recompute_policy": best3.recompute_policy},
            framework=best3.framework,
            **kw,
        )
        same_fw = (
            layouts.layout_step(
                cfg,
                {**layout, "zero_stage": 3, "recompute_policy": best2.recompute_policy},
                framework=best2.framework,
                **kw,
            )
            if 3 in comm.DP_ZERO_STAGES[best2.framework]
            else None
        )
        for label, r in (
            ("best ZeRO 0–2", best2),
            ("best ZeRO-3", best3),
            ("same layout, ZeRO-3", same3),
            ("best ZeRO-3's layout at ZeRO-2, same framework", fsdp2),
            ("best ZeRO 0–2's layout at ZeRO-3, same framework", same_fw),
        ):
            if r is None:
                continue
            rows.append(
                {
                    "device": device,
                    "preset": case["preset"],
                    "devices": case["devices"],
                    "dp_overlap": overlap,
                    "row": label,
                    "layout": layout_label(pd.Series(r)),
                    "framework": r["framework"],
                    "dp_comm_s": r["dp_comm_s"],
                    "dp_comm_exposed_s": r["dp_comm_exposed_s"],
                    "step_s": r["step_s"],
                    "memory_gib": r["memory_gib"],
                    "fits": bool(r["fits"]),
                }
            )
    return pd.DataFrame(rows)


A13_MODEL = {"preset": "llama2-70b", "devices": 512, "global_batch": 512}  # width of a 70B, 40 or 80 layers


def a13_interleaving_table():
    """Interleaving across layer counts: the shape of ``A13_MODEL`` with ``stated.A13_LAYERS``
    layers on each card of ``stated.AT_SCALE_DEVICES``; for each pipeline depth p ∈ {4, 8} whose
    stages hold an even number of layers, the planner's best layout without interleaving, and the
    *same* layout with v = layers per stage / ``A13_LAYERS_PER_VIRTUAL_STAGE`` (the article's
    starting point):
    what interleaving alone changes in bubble, point-to-point time and memory."""
    import pandas as pd

    rows = []
    for device, n_layers in itertools.product(stated.AT_SCALE_DEVICES, stated.A13_LAYERS):
        cfg = preset(A13_MODEL["preset"]).with_(n_layers=n_layers)
        for pp in (4, 8):
            per_stage = n_layers // pp
            if n_layers % pp or per_stage % stated.A13_LAYERS_PER_VIRTUAL_STAGE:
                continue
            v = per_stage // stated.A13_LAYERS_PER_VIRTUAL_STAGE
            kw = dict(global_batch=A13_MODEL["global_batch"], **cluster(A13_MODEL["devices"], device=device))
            plans = layouts.plan(cfg, top=None, virtual_stages=(1,), **kw)
            plans = plans[(plans.pp == pp) & (plans.m % pp == 0)]  # interleaving needs m a multiple of p
            if plans.empty:
                continue
            one = plans.iloc[0]
            layout = {**_layout(one, "tp", "pp", "dp", "micro_batch", "m"), "zero_stage": int(one.zero_stage)}
            inter = layouts.layout_step(cfg, {**layout, "v": v}, **kw)
            rows.append(
                {
                    "device": device,
                    "n_layers": n_layers,
                    "model": f"{A13_MODEL['preset']} width, {n_layers} layers "
                    f"({flops.param_count(cfg) / 1e9:.0f}B)",
                    "layout": layout_label(one),
                    "v": v,
                    "bubble_s_v1": one.pp_bubble_s,
                    "bubble_s_interleaved": inter["pp_bubble_s"],
                    "p2p_s_v1": one.pp_p2p_s,
                    "p2p_s_interleaved": inter["pp_p2p_s"],
                    "memory_gib_v1": one.memory_gib,
                    "memory_gib_interleaved": inter["memory_gib"],
                    "fits_interleaved": bool(inter["fits"]),
                    "step_gain": one.step_s / inter["step_s"] - 1,
                }
            )
    return pd.DataFrame(rows)


def a13_m_sweep():
    """Interleaving at the article's own 40-layer model against the micro-batches per step:
    ``stated.A13_M_SWEEP``'s layout on each card of ``stated.AT_SCALE_DEVICES``, without and with
    v = layers per stage / ``A13_LAYERS_PER_VIRTUAL_STAGE``, for each m (global batch = m · DP ·
    micro-batch). The bubble (p − 1)/(v·m) of the compute shrinks with m while interleaving's extra
    point-to-point grows with it: the gain depends on m at a fixed layer count."""
    import pandas as pd

    case = stated.A13_M_SWEEP
    cfg, lay = preset(case["preset"]), case["layout"]
    v = cfg.n_layers // lay["pp"] // stated.A13_LAYERS_PER_VIRTUAL_STAGE
    rows = []
    for device, m in itertools.product(stated.AT_SCALE_DEVICES, case["m"]):
        kw = dict(global_batch=m * lay["dp"] * lay["micro_batch"], **cluster(case["devices"], device=device))
        one = layouts.layout_step(cfg, {**lay, "m": m, "v": 1}, **kw)
        inter = layouts.layout_step(cfg, {**lay, "m": m, "v": v}, **kw)
        rows.append(
            {
                "device": device,
                "model": f"{case['preset']} ({cfg.n_layers} layers)",
                "layout": f"TP{lay['tp']}·PP{lay['pp']}·DP{lay['dp']} mb{lay['micro_batch']}",
                "m": m,
                "v": v,
                "step_s_v1": one["step_s"],
                "step_s_interleaved": inter["step_s"],
                "bubble_s_v1": one["pp_bubble_s"],
                "bubble_s_interleaved": inter["pp_bubble_s"],
                "extra_p2p_s": inter["pp_p2p_s"] - one["pp_p2p_s"],
                "fits": bool(one["fits"] and inter["fits"]),
                "step_gain": one["step_s"] / inter["step_s"] - 1,
                "stated_batch": m * lay["dp"] * lay["micro_batch"] == case["stated_global_batch"],
            }
        )
    return pd.DataFrame(rows)


PLANNER_TERMS = (*(t for t in step.TERMS if t != "data_s"), "step_s")  # the planner assumes no data wait


def _best_row(cfg, n_devices: int, global_batch: int, device: str | None = None, **assumptions) -> dict:
    plans = layouts.plan(
        cfg, global_batch=global_batch, top=1, **cluster(n_devices, device=device, **assumptions)
    )
    if plans.empty:
        return {"layout": "nothing fits"}
    r = plans.iloc[0]
    return {
        "layout": layout_label(r),
        "framework": r.framework,
        **{k: r[k] for k in PLANNER_TERMS},
        "memory_gib": r.memory_gib,
        "mfu_palm": r.mfu_palm,
    }


def planner_answers():
    """The planner's best layout and its step-time terms for ``stated.PLANNER_CASES`` on each of
    ``stated.AT_SCALE_DEVICES`` (article A's 910B first, the A100 beside it), with the best
    TP 8 · PP 1 layout's step over the best step (``tp8_pp1_over_best``: article A §6.1's "on one
    8-card machine TP 8, PP 1 is usually best"; 1.0 where it is the best), and the same within
    Megatron-Core's layouts alone (``tp8_pp1_over_best_megatron``: the article's own framework, so a
    layout comparison; against another framework's best it is a switch)."""
    import pandas as pd

    rows = []
    for device in stated.AT_SCALE_DEVICES:
        for case in stated.PLANNER_CASES:
            cfg = preset(case["preset"])
            kw = cluster(case["devices"], device=device)
            plans = layouts.plan(cfg, global_batch=case["global_batch"], top=None, **kw)
            plans = plans[plans.fits] if len(plans) else plans  # the layouts that fit the card
            tp8 = plans[(plans.tp == 8) & (plans.pp == 1)] if len(plans) else plans
            # within the article's own framework (MindSpeed runs Megatron-Core): a layout comparison
            megatron = plans[plans.framework == "megatron"] if len(plans) else plans
            tp8_megatron = tp8[tp8.framework == "megatron"] if len(tp8) else tp8
            rows.append(
                {
                    "device": device,
                    "preset": case["preset"],
                    "devices": case["devices"],
                    "global_batch": case["global_batch"],
                    **_best_row(cfg, case["devices"], case["global_batch"], device=device),
                    "tp8_pp1_over_best": float(tp8.step_s.min() / plans.step_s.min()) if len(tp8) else None,
                    "tp8_pp1_over_best_megatron": (
                        float(tp8_megatron.step_s.min() / megatron.step_s.min())
                        if len(tp8_megatron)
                        else None
                    ),
                }
            )
    return pd.DataFrame(rows)


def planner_sensitivity():
    """The last planner case's best layout with each assumption of ``stated.PLANNER_SENSITIVITY``
    varied alone: which conclusions depend on an unmeasured number."""
    import pandas as pd

    case = stated.PLANNER_CASES[-1]
    cfg = preset(case["preset"])
    rows = []
    for name, values in stated.PLANNER_SENSITIVITY.items():
        for value in values:
            best = _best_row(cfg, case["devices"], case["global_batch"], **{name: value})
            rows.append({"assumption": name, "value": value, **best})
    return pd.DataFrame(rows)
