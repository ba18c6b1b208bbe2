"""The layout planner: for a model, a cluster, a global batch and a sequence length, every
TP × PP × DP layout (× virtual stages, ZeRO stage, recompute policy, micro-batch) that can
exist and fits memory, ranked by the one step model of the course, :func:`step.step_time`,
with each of its terms shown.

Placement follows Megatron-LM's rank order (tensor innermost, then data, then pipeline;
Narayanan et al. 2021 §3.3): a TP group uses the intra-node link when ``tp`` ≤ devices per
node, a DP group when ``tp · dp`` ≤ devices per node, the pipeline when ``tp · dp · pp`` does
(the step model's ``rates.link``). Memory is the step model's :func:`step_terms.memory_terms`.
Every assumption is a field of ``rates.Assumptions`` (``matmul_share_of_mamf``,
``dp_overlap``, ``memory_margin``, ...), passed by name to :func:`plan`.
"""

from __future__ import annotations

from itertools import product

from mfulab.analytic import parallel, step
from mfulab.analytic.config import RECOMPUTE_PLANS, TransformerConfig
from mfulab.errors import ParameterError

LAYOUT_KEYS = ("tp", "pp", "dp", "v", "micro_batch", "m", "zero_stage", "recompute_policy")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(
    cfg: TransformerConfig,
    *,
    n_devices: int,
    global_batch: int,
    micro_batches=(1, 2, 4, 8),
    virtual_stages=(1, 2),
    zero_stages=(0, 1, 2, 3),
    recomputes=RECOMPUTE_PLANS,
    max_tp: int | None = None,
):
    """Every (tp, pp, dp, v, micro_batch, zero_stage, recompute) that can exist: tp divides the
    heads (and the key-value heads), p·v divides the layers, tp·pp divides the devices, the
    global batch splits into dp × micro-batches, and the schedule is legal
    (``parallel.check_pipeline``). ``max_tp`` caps TP (e.g. at the devices per node)."""
    kv_heads = cfg.n_kv_heads or cfg.n_heads
    tps = [t for t in _divisors(cfg.n_heads) if kv_heads % t == 0 and n_devices % t == 0]
    tps = [t for t in tps if max_tp is None or t <= max_tp]
    for tp, pp in product(tps, _divisors(cfg.n_layers)):
        if n_devices % (tp * pp):
            continue
        dp = n_devices // (tp * pp)
        for micro_batch, v in product(micro_batches, virtual_stages):
            if global_batch % (dp * micro_batch):
                continue
            m = global_batch // (dp * micro_batch)
            try:
                parallel.check_pipeline(p=pp, m=m, v=v, n_layers=cfg.n_layers)
            except ParameterError:
                continue
            for zero_stage, recompute in product(zero_stages, recomputes):
                yield {
                    "tp": tp,
                    "pp": pp,
                    "dp": dp,
                    "v": v,
                    "micro_batch": micro_batch,
                    "m": m,
                    "zero_stage": zero_stage,
                    "recompute_policy": recompute,
                }


def layout_step(
    cfg: TransformerConfig,
    layout: dict,
    *,
    n_devices: int,
    global_batch: int,
    device: str | None,
    sequence_parallel: bool = True,
    **step_kwargs,
) -> dict:
    """One layout (a :func:`candidate_layouts` row) through :func:`step.step_time`: the
    layout keys, then every term, the memory and the utilisations."""
    out = step.step_time(
        cfg,
        n_devices=n_devices,
        tp=layout["tp"],
        pp=layout["pp"],
        vpp=layout["v"],
        micro_batch=layout["micro_batch"],
        global_batch=global_batch,
        recompute=layout["recompute_policy"],
        sequence_parallel=sequence_parallel and layout["tp"] > 1,
        zero_stage=layout["zero_stage"],
        device=device,
        **step_kwargs,
    )
    return {
        **{k: layout[k] for k in LAYOUT_KEYS},
        "framework": out["framework"],
        "sequence_parallel": sequence_parallel and layout["tp"] > 1,
        "schedule": out["schedule"],
        "memory_gib": out["memory_gib"],
        "fits": out["fits"],
        **{k: out[k] for k in step.TERMS},
        "compute_s": sum(out[k] for k in step.COMPUTE_TERMS),
        "dp_comm_s": out["dp_comm_s"],
        "step_s": out["step_s"],
        "tokens_per_s": out["tokens_per_s"],
        "mfu_palm": out["mfu_palm"],
        "hfu_palm": out["hfu_palm"],
    }


def plan(
    cfg: TransformerConfig,
    *,
    n_devices: int,
    global_batch: int,
    device: str | None,
    top: int | None = 20,
    include_unfit: bool = False,
    max_tp: int | None = None,
    micro_batches=(1, 2, 4, 8),
    virtual_stages=(1, 2),
    zero_stages=(0, 1, 2, 3),
    recomputes=RECOMPUTE_PLANS,
    **step_kwargs,
):
    """Every candidate layout (:func:`candidate_layouts`) through :func:`layout_step`, the
    fitting ones ranked by step time, then memory (``top`` rows; ``include_unfit`` keeps the
    rest after them). ``step_kwargs`` go to :func:`step.step_time` (``devices_per_node``,
    ``framework``, ``attention``, ``calibration``, any ``Assumptions`` field, ...). A layout the
    step model refuses (a framework that does not run that ZeRO stage, say) is left out.
    Refuses a batch no layout can split, and a MoE model: the candidates have no expert
    parallelism, and the step model ranks a published MoE layout sweep in reverse (chapter 09)."""
    import pandas as pd

    split = {
        k: step_kwargs.get(k, 1) for k in ("context_parallel", "expert_parallel", "expert_tensor_parallel")
    }
    if any(v != 1 for v in split.values()):
        raise ParameterError(
            f"the planner's candidates split the devices over tp·pp·dp only; it does not search "
            f"{', '.join(k for k, v in split.items() if v != 1)}: price such a layout with predict "
            "(no --search)"
        )
    if cfg.moe is not None:
        raise ParameterError(
            "the planner does not rank MoE layouts: its candidates have no expert parallelism, and "
            "chapter 09 shows the step model ranking a published MoE layout sweep in reverse; price one "
            "layout at a time (python -m mfulab predict --expert-parallel ...) and read its error there"
        )

    rows = []
    candidates = list(
        candidate_layouts(
            cfg,
            n_devices=n_devices,
            global_batch=global_batch,
            micro_batches=micro_batches,
            virtual_stages=virtual_stages,
            zero_stages=zero_stages,
            recomputes=recomputes,
            max_tp=max_tp,
        )
    )
    if not candidates:
        raise ParameterError(
            f"no layout of {n_devices} devices splits global batch {global_batch} into "
            f"data-parallel micro-batches of {list(micro_batches)} with a legal pipeline schedule"
        )
    refusals = []
    for layout in candidates:
        try:
            rows.append(
                layout_step(
                    cfg, layout, n_devices=n_devices, global_batch=global_batch, device=device, **step_kwargs
                )
            )
        except ParameterError as err:
            refusals.append(str(err))
    if not rows:
        raise ParameterError(f"the step model refuses every layout: {refusals[0]}")
    df = pd.DataFrame(rows)
    df["fits"] = df.fits.fillna(True).astype(bool)  # a device of unknown memory: nothing to refuse
    df = df.sort_values(["fits", "step_s", "memory_gib"], ascending=[False, True, True], ignore_index=True)
    if not include_unfit:
        df = df[df.fits].reset_index(drop=True)
    return df if top is None else df.head(top)
