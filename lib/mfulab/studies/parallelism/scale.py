"""The ``parallelism`` claims at the articles' scale, analytic: per-device TP vs DP traffic
(``parallel``, ``memory``), the layout planner (``layouts``) on the stated A100 cluster
(``stated.A100_CLUSTER``), interleaving across layer counts, and optimizer offload over the
host link. Every input is a named constant of ``stated`` or an argument."""

from __future__ import annotations

from ... import flops, layouts, memory, parallel
from ...config import preset
from . import stated


def cluster(n_devices: int, *, devices_per_node: int | None = None) -> layouts.Cluster:
    c = stated.A100_CLUSTER
    return layouts.Cluster(
        n_devices=n_devices,
        devices_per_node=devices_per_node or c["devices_per_node"],
        device_memory_bytes=c["device_memory_bytes"],
        peak_flops_per_s=c["peak_flops_per_s"],
        intra_node=layouts.Link(*c["intra_node"]),
        inter_node=layouts.Link(*c["inter_node"]),
    )


def layout_label(r) -> str:
    """A planner row as one short string: TP·PP·DP, virtual stages, micro-batch, ZeRO, recompute."""
    return f"TP{r.tp}·PP{r.pp}·DP{r.dp} v{r.v} mb{r.micro_batch} z{r.zero_stage} {r.recompute_policy}"


def tp_vs_dp_traffic(
    *, preset_name: str, seq_len: int, micro_batch: int, global_batch: int, tp: int, dp: int
):
    """Bytes each device sends per optimizer step (bf16): TP's collectives over every layer and
    micro-batch (``parallel.tp_comm_elements_per_layer``) against DP's gradient all-reduce of
    its 1/tp of the model (2Ψ/tp·(dp − 1)/dp, ``memory.zero_traffic_bytes_per_step``), and the
    collective calls each issues (TP: 4 per layer and micro-batch; DP: one per bucket)."""
    cfg = preset(preset_name).with_(seq_len=seq_len)
    m = global_batch // (dp * micro_batch)
    per_layer = parallel.tp_comm_elements_per_layer(cfg, micro_batch=micro_batch, tp=tp)
    tp_bytes = per_layer["elements_sent_per_device"] * cfg.n_layers * m * 2
    dp_bytes = memory.zero_traffic_bytes_per_step(flops.param_count(cfg) / tp, zero_stage=0) * (dp - 1) / dp
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
        for gb in S["global_batches"]
    ]
    return pd.DataFrame(rows)


def a10_placement():
    """The article's layout (TP 8 × DP 16 on 128 cards, the A10 model) with TP inside a node
    and, for contrast, with the same TP group spread over two nodes of 4 (its collectives then
    cross InfiniBand): the planner's step-time terms of each."""
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
    rows = []
    for where, per_node in (("TP inside a node (8 per node)", 8), ("TP across two nodes (4 per node)", 4)):
        t = layouts.layout_terms(
            cfg,
            layout,
            cluster=cluster(L["devices"], devices_per_node=per_node),
            global_batch=M["global_batch"],
        )
        rows.append(
            {"placement": where, **{k: t[k] for k in ("tp_comm_s", "dp_exposed_s", "step_s", "mfu_palm")}}
        )
    return pd.DataFrame(rows)


def a12_planner_table():
    """Best fitting layout with ZeRO 0–2 against the best with ZeRO-3 (planner, stated cluster)
    for the cases below the article's 10B / 1000-card line."""
    import pandas as pd

    rows = []
    for case in stated.A12_PLANNER_CASES:
        cfg = preset(case["preset"])
        plans = layouts.plan(cfg, cluster=cluster(case["devices"]), global_batch=case["devices"], top=None)
        best = {
            "zero 0–2": plans[plans.zero_stage <= 2].iloc[0],
            "zero 3": plans[plans.zero_stage == 3].iloc[0],
        }
        for label, r in best.items():
            rows.append(
                {
                    "preset": case["preset"],
                    "devices": case["devices"],
                    "family": label,
                    "layout": layout_label(r),
                    "step_s": r.step_s,
                    "memory_gib": r.memory_gib,
                    "mfu_palm": r.mfu_palm,
                }
            )
    return pd.DataFrame(rows)


def a13_interleaving_table(*, preset_name: str = "llama2-70b", devices: int = 512, global_batch: int = 512):
    """Interleaving across layer counts: the stated model shape with ``stated.A13_LAYERS``
    layers on the stated cluster; for each pipeline depth p ∈ {4, 8} whose stages hold an even
    number of layers, the planner's best layout without interleaving against its best with
    v = layers per stage / ``A13_LAYERS_PER_VIRTUAL_STAGE`` (the article's starting point)."""
    import pandas as pd

    rows = []
    for n_layers in stated.A13_LAYERS:
        cfg = preset(preset_name).with_(n_layers=n_layers)
        for pp in (4, 8):
            per_stage = n_layers // pp
            if n_layers % pp or per_stage % stated.A13_LAYERS_PER_VIRTUAL_STAGE:
                continue
            v = per_stage // stated.A13_LAYERS_PER_VIRTUAL_STAGE
            plans = layouts.plan(
                cfg, cluster=cluster(devices), global_batch=global_batch, top=None, virtual_stages=(1, v)
            )
            plans = plans[plans.pp == pp]
            if (plans.v == 1).sum() == 0 or (plans.v == v).sum() == 0:
                continue
            one, inter = plans[plans.v == 1].iloc[0], plans[plans.v == v].iloc[0]
            rows.append(
                {
                    "layers": n_layers,
                    "pp": pp,
                    "v": v,
                    "layout_v1": layout_label(one),
                    "layout_interleaved": layout_label(inter),
                    "bubble_s_v1": one.pp_bubble_s,
                    "bubble_s_interleaved": inter.pp_bubble_s,
                    "p2p_s_v1": one.pp_p2p_s,
                    "p2p_s_interleaved": inter.pp_p2p_s,
                    "memory_gib_v1": one.memory_gib,
                    "memory_gib_interleaved": inter.memory_gib,
                    "step_gain": one.step_s / inter.step_s - 1,
                }
            )
    return pd.DataFrame(rows)


def a15_offload_table():
    """Adam's two moments on the host (``parallel.offload_bytes_per_step``, adam-moments) for
    the stated 7B case: seconds per step over PCIe 4.0 x16 and, for scale, over NVLink 3."""
    import pandas as pd

    case = stated.A15_CASE
    n = flops.param_count(preset(case["preset"]))
    rows = []
    for link, bw in stated.A15_LINKS_BYTES_PER_S.items():
        o = parallel.offload_bytes_per_step(n, dp=case["dp"], mode="adam-moments", host_link_bytes_per_s=bw)
        rows.append(
            {
                "link": link,
                "bytes_each_way": o["host_to_device_bytes"],
                "time_s": o["time_s"],
                "share_of_step": o["time_s"] / case["step_s"],
            }
        )
    return pd.DataFrame(rows)
