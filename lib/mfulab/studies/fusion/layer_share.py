"""Amdahl's bound on what fusing LayerNorm + residual + dropout does to a whole layer (A7).

The claim is about a layer's forward pass, and the fused sub-block is only part of it. If
the sub-block takes a share ``f`` of the layer's forward time and becomes ``s`` times
faster, the layer becomes::

    layer_speedup = 1 / (1 − f + f / s)          (Amdahl 1967)

and even a sub-block that costs nothing (s → ∞) gives at most 1 / (1 − f). An "about 30%
faster" layer (time × 0.75 at the least, a 1.33× speed-up) therefore needs f ≥ 0.25 with a free
sub-block.

For the article's 13B layer (GPT block, hidden h, sequence s, bf16), per token:

- matmul FLOPs of one layer's forward: 24·h²·(1 + s/(6h)) (Narayanan et al. 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters", Eq. 3: the forward third
  of 72·B·s·l·h²·(1 + s/6h), per layer and token);
- bytes of the sub-block: it runs twice per layer (after attention and after the MLP, as
  Megatron's bias-dropout-add + the next LayerNorm), each moving the bytes of
  :func:`bytes_model.ln_residual_dropout_bytes` (unfused 7·h·e + h, fused 4·h·e + h);
- times: FLOPs / (datasheet peak × matmul efficiency) and bytes / (datasheet bandwidth ×
  bandwidth efficiency), the two efficiencies being *assumptions* (``stated``);
- per card under tensor parallelism of degree t (Shoeybi et al. 2019; Korthikanti et al. 2022
  §4.2.2): each card runs 1/t of the layer's matmuls, but without sequence parallelism every
  card repeats LayerNorm, dropout and the residual add on the whole sequence; with it, each
  card runs 1/t of them too. So TP without SP raises the sub-block's share t-fold against the
  matmuls (the article's own §4.2 point), and TP with SP leaves it as at t = 1.

- kernel launches, the article's second fusion mechanism: each call of the sub-block launches
  k kernels (unfused 3, fused 1, the article's count), each costing ``launch_s`` of exposed time,
  once per call of ``tokens_per_call`` tokens: 2·k·launch_s / tokens per layer and token. A
  launch is exposed only when the device waits for the host, so this is an upper bound.

- the forward's tensor-parallel all-reduces (Shoeybi et al. 2019 §3, Fig. 4: after the
  attention's output projection and after the MLP's second GEMM, each of the sequence's s·h
  activations; the same bytes as a reduce-scatter + all-gather with SP): on the layer's critical
  path (the next GEMM needs them), priced as the course's step model prices them
  (``parallel.tp_comm_time_per_layer`` on the device's intra-node link, ``rates.machine_rates``),
  half of its forward + backward time. Left out (until 2026-12-07), they inflated ``f`` under
  the article's TP 8.

Everything else in the layer (softmax or flash attention, GELU, biases, their launches) is left
out of the layer's time, which makes ``f`` too large: the speed-up computed here is an upper bound.
"""

from __future__ import annotations

from mfulab.analytic import parallel
from mfulab.analytic.config import preset
from mfulab.analytic.devices import device_spec
from mfulab.analytic.rates import Assumptions, machine_rates
from mfulab.errors import ParameterError
from mfulab.studies.fusion.bytes_model import ln_residual_dropout_bytes

LAYOUT_KEYS = ("device", "tp", "sequence_parallel", "matmul_efficiency", "bandwidth_efficiency", "launch_s")
SUB_BLOCKS_PER_LAYER = 2  # after attention and after the MLP (Megatron's bias-dropout-add + LN)
DEVICES_PER_NODE = 8  # the article's machine: 8 cards (its TP 8 group inside one node)
FORWARD_SHARE_OF_TP_COMM = 2 / 4  # 2 of a layer's 4 TP all-reduces run in its forward
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}  # bytes per element of the layer's activations
TP_COMM_LEFT_OUT = "TP all-reduces left out"  # a sensitivity row reported beside the table, not voted


def tp_forward_comm_s_per_token(*, preset_name: str, device: str, dtype: str, tp: int, sp: bool) -> float:
    """Seconds per token and card of one layer's forward TP collectives (module docstring): the
    step model's ``parallel.tp_comm_time_per_layer`` for one sequence on the device's link at the
    course's assumptions, its forward half, over the sequence's tokens; 0 at ``tp`` = 1."""
    if tp == 1:
        return 0.0
    cfg = preset(preset_name)
    link = machine_rates(device, dtype=dtype, assumptions=Assumptions()).link(tp, DEVICES_PER_NODE)
    layer_s = parallel.tp_comm_time_per_layer(
        cfg,
        micro_batch=1,
        tp=tp,
        alpha_s=link.alpha_s,
        link_bytes_per_s=link.bytes_per_s,
        sequence_parallel=sp,
        bytes_per_elem=DTYPE_BYTES[dtype],
    )
    return layer_s * FORWARD_SHARE_OF_TP_COMM / cfg.seq_len


def card_text(device: str, dtype: str) -> str:
    """The card's datasheet figures the bound runs on, as a row's method names them."""
    spec = device_spec(device)
    return (
        f"{device}: {spec.flops_per_s[dtype] / 1e12:g} TFLOP/s {dtype}, {spec.mem_bytes_per_s / 1e9:g} GB/s "
        f"HBM ({'approximate, ' if spec.approximate else ''}devices.yaml)"
    )


def amdahl_speedup(share: float, sub_speedup: float) -> float:
    """1 / (1 − f + f/s): the whole's speed-up when a part of share ``f`` gets ``s``× faster
    (``s = inf``: the part costs nothing)."""
    if not 0 <= share < 1:
        raise ValueError(f"share must be in [0, 1), got {share}")
    return 1.0 / (1.0 - share + share / sub_speedup)


def required_share(target_speedup: float, sub_speedup: float = float("inf")) -> float:
    """The share ``f`` a sub-block needs for the layer to reach ``target_speedup``."""
    return (1 - 1 / target_speedup) / (1 - 1 / sub_speedup)


def layer_forward_flops_per_token(hidden: int, seq_len: int) -> float:
    """24·h²·(1 + s/(6h)): matmul FLOPs of one GPT layer's forward per token (module docstring)."""
    return 24.0 * hidden**2 * (1 + seq_len / (6 * hidden))


def layer_times_per_token(
    *,
    hidden: int,
    seq_len: int,
    dtype_bytes: int,
    matmul_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    dropout: bool = True,
    tp: int = 1,
    sequence_parallel: bool = False,
    launch_s: float = 0.0,
    kernels: tuple[int, int] = (3, 1),
    tokens_per_call: int | None = None,
    eager_ratio: float = 1.0,
) -> dict:
    """Per token and card (module docstring): the layer's forward matmul FLOPs and time at
    ``matmul_flops_per_s``, the sub-block's bytes unfused and fused, and its time at
    ``bandwidth_bytes_per_s`` (the unfused kernels at ``eager_ratio`` of it) with ``kernels``
    (unfused, fused) launches per call of ``tokens_per_call`` tokens (default: one sequence) at
    ``launch_s`` each. The rates are whatever the caller reads them from: a datasheet × assumed
    efficiencies (:func:`article_layer`), or a machine's measured ceiling, copy bandwidth and
    dispatch (``layer_measured.model_check_table``)."""
    if not (isinstance(tp, int) and tp >= 1):
        raise ParameterError(f"tp must be a whole number ≥ 1, got {tp!r}")
    flops = layer_forward_flops_per_token(hidden, seq_len) / tp  # each card: 1/t of the matmuls
    sub_block_cards = tp if sequence_parallel else 1  # without SP every card runs the whole sub-block
    kw = dict(tokens=1, hidden=hidden, dtype_bytes=dtype_bytes, dropout=dropout)
    unfused_bytes = SUB_BLOCKS_PER_LAYER * ln_residual_dropout_bytes(fused=False, **kw) / sub_block_cards
    fused_bytes = SUB_BLOCKS_PER_LAYER * ln_residual_dropout_bytes(fused=True, **kw) / sub_block_cards
    tokens = tokens_per_call or seq_len
    unfused_launch_s, fused_launch_s = (SUB_BLOCKS_PER_LAYER * k * launch_s / tokens for k in kernels)
    return {
        "flops": flops,
        "unfused_bytes": unfused_bytes,
        "fused_bytes": fused_bytes,
        "matmul_s": flops / matmul_flops_per_s,
        "unfused_s": unfused_bytes / (bandwidth_bytes_per_s * eager_ratio) + unfused_launch_s,
        "fused_s": fused_bytes / bandwidth_bytes_per_s + fused_launch_s,
        "unfused_launch_s": unfused_launch_s,
    }


def article_layer(
    *,
    preset_name: str,
    device: str,
    dtype: str,
    matmul_efficiency: float,
    bandwidth_efficiency: float,
    dropout: bool = True,
    tp: int = 1,
    sequence_parallel: bool = False,
    launch_s: float = 0.0,
    kernels: tuple[int, int] = (3, 1),
    tokens_per_call: int | None = None,
    eager_ratio: float = 1.0,
    tp_comm: bool = True,
) -> dict:
    """The sub-block's share of one layer's forward and the layer speed-ups that follow, for a
    preset's layer on a datasheet device (module docstring), per token and card, with the
    layer split over ``tp`` cards (the sub-block too with ``sequence_parallel``), and
    ``kernels`` (unfused, fused) launches per sub-block call at ``launch_s`` each, one call per
    ``tokens_per_call`` tokens (default: one sequence). ``eager_ratio``: the unfused (eager)
    kernels' bandwidth efficiency as a fraction of the fused kernel's (1: the same; below 1 when
    eager kernels add casts, layout copies or dispatch the fused one avoids). ``tp_comm``: the
    forward's TP collectives in the layer's time (:func:`tp_forward_comm_s_per_token`)."""
    cfg = preset(preset_name)
    spec = device_spec(device)
    times = layer_times_per_token(
        hidden=cfg.d_model,
        seq_len=cfg.seq_len,
        dtype_bytes=DTYPE_BYTES[dtype],
        matmul_flops_per_s=spec.flops_per_s[dtype] * matmul_efficiency,
        bandwidth_bytes_per_s=spec.mem_bytes_per_s * bandwidth_efficiency,
        dropout=dropout,
        tp=tp,
        sequence_parallel=sequence_parallel,
        launch_s=launch_s,
        kernels=kernels,
        tokens_per_call=tokens_per_call,
        eager_ratio=eager_ratio,
    )
    flops, unfused_bytes, fused_bytes = times["flops"], times["unfused_bytes"], times["fused_bytes"]
    matmul_s, unfused_s, fused_s = times["matmul_s"], times["unfused_s"], times["fused_s"]
    unfused_launch_s = times["unfused_launch_s"]
    comm_s = (
        tp_forward_comm_s_per_token(
            preset_name=preset_name, device=device, dtype=dtype, tp=tp, sp=sequence_parallel
        )
        if tp_comm
        else 0.0
    )
    rest_s = matmul_s + comm_s  # the layer but the sub-block
    share = unfused_s / (rest_s + unfused_s)
    return {
        "preset": cfg.name,
        "device": spec.key,
        "dtype": dtype,
        "tp": tp,
        "sequence_parallel": sequence_parallel,
        "matmul_efficiency": matmul_efficiency,
        "bandwidth_efficiency": bandwidth_efficiency,
        "eager_ratio": eager_ratio,
        "layer_flops_per_token": flops,
        "sub_block_unfused_bytes_per_token": unfused_bytes,
        "sub_block_fused_bytes_per_token": fused_bytes,
        "launch_s": launch_s,
        "matmul_s_per_token": matmul_s,
        "tp_comm_s_per_token": comm_s,
        "sub_block_s_per_token": unfused_s,
        "sub_block_launch_s_per_token": unfused_launch_s,
        "sub_block_share": share,
        "layer_speedup": (rest_s + unfused_s) / (rest_s + fused_s),
        "layer_speedup_ceiling": amdahl_speedup(share, float("inf")),
    }


def break_even_bandwidth_efficiency(target_speedup: float, **kw) -> float:
    """The bandwidth efficiency below which a layer with a *free* fused sub-block would reach
    ``target_speedup`` (the eager kernels would have to be that slow): solves
    unfused_bytes / (bandwidth × eff) + launches = (target − 1) · matmul time (inf: the launches
    alone reach it)."""
    row = article_layer(bandwidth_efficiency=1.0, **kw)
    memory_s = row["sub_block_s_per_token"] - row["sub_block_launch_s_per_token"]
    rest_s = row["matmul_s_per_token"] + row["tp_comm_s_per_token"]
    room_s = (target_speedup - 1) * rest_s - row["sub_block_launch_s_per_token"]
    return memory_s / room_s if room_s > 0 else float("inf")


def break_even_eager_ratio(target_speedup: float, **kw) -> float:
    """The eager kernels' bandwidth efficiency, as a fraction of the fused kernel's, below which
    the layer with the fused sub-block reaches ``target_speedup``: solves
    (matmul + unfused(r)) / (matmul + fused) = target for r (inf: reached at r = 1 already)."""
    row = article_layer(eager_ratio=1.0, **kw)
    rest_s = row["matmul_s_per_token"] + row["tp_comm_s_per_token"]
    unfused_memory_s = row["sub_block_s_per_token"] - row["sub_block_launch_s_per_token"]
    fused_s = (rest_s + row["sub_block_s_per_token"]) / row["layer_speedup"] - rest_s
    room_s = target_speedup * (rest_s + fused_s) - rest_s - row["sub_block_launch_s_per_token"]
    return unfused_memory_s / room_s if room_s > 0 else float("inf")


def sensitivity(
    *,
    preset_name: str,
    dtype: str,
    device: str,
    matmul_efficiency: float,
    bandwidth_efficiency: float,
    devices,
    matmul_efficiencies,
    bandwidth_efficiencies,
    target_speedup: float,
    tp: int = 1,
    sequence_parallel: bool = False,
    layouts=(),
    launch_s: float = 0.0,
    kernels: tuple[int, int] = (3, 1),
    tokens_per_call: int | None = None,
    launches=(),
    eager_ratios=(),
):
    """One row per assumption varied around the central one (device, matmul efficiency,
    bandwidth efficiency, and the ``layouts``: (tp, sequence_parallel) pairs), with the layer
    speed-ups, the bandwidth efficiency at which a free sub-block would reach
    ``target_speedup``, and whether the bound stays below it."""
    import pandas as pd

    central = dict(
        device=device,
        matmul_efficiency=matmul_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        tp=tp,
        sequence_parallel=sequence_parallel,
        launch_s=launch_s,
    )
    cases = [("central", central)]
    cases += [
        ("layout", {**central, "tp": t, "sequence_parallel": sp})
        for t, sp in layouts
        if (t, sp) != (tp, sequence_parallel)
    ]
    cases += [("device", {**central, "device": d}) for d in devices if d != device]
    cases += [("matmul efficiency", {**central, "matmul_efficiency": m}) for m in matmul_efficiencies]
    cases += [
        ("bandwidth efficiency", {**central, "bandwidth_efficiency": b}) for b in bandwidth_efficiencies
    ]
    cases += [(label, {**central, "launch_s": x}) for label, x in launches if x != launch_s]
    cases += [("eager ÷ fused bandwidth", {**central, "eager_ratio": r}) for r in eager_ratios]
    if tp > 1:  # the bound without the TP all-reduces (until 2026-12-07), for comparison
        cases += [(TP_COMM_LEFT_OUT, {**central, "tp_comm": False})]
    rows = []
    for varied, kw in cases:
        fixed = dict(kernels=kernels, tokens_per_call=tokens_per_call)
        row = article_layer(preset_name=preset_name, dtype=dtype, **kw, **fixed)
        kw = {k: v for k, v in kw.items() if k != "eager_ratio"}
        eager_even = break_even_eager_ratio(
            target_speedup, preset_name=preset_name, dtype=dtype, **kw, **fixed
        )
        even = break_even_bandwidth_efficiency(
            target_speedup,
            preset_name=preset_name,
            dtype=dtype,
            device=kw["device"],
            matmul_efficiency=kw["matmul_efficiency"],
            tp=kw["tp"],
            sequence_parallel=kw["sequence_parallel"],
            launch_s=kw["launch_s"],
            tp_comm=kw.get("tp_comm", True),
            **fixed,
        )
        layer_s = row["matmul_s_per_token"] + row["tp_comm_s_per_token"] + row["sub_block_s_per_token"]
        rows.append(
            {
                "varied": varied,
                **{
                    k: row[k]
                    for k in (
                        "device",
                        "tp",
                        "sequence_parallel",
                        "matmul_efficiency",
                        "bandwidth_efficiency",
                        "launch_s",
                        "eager_ratio",
                    )
                },
                # the sub-block's share of the layer = its bytes' share + its launches' share
                "sub_block_share": row["sub_block_share"],
                "bytes_share": (row["sub_block_s_per_token"] - row["sub_block_launch_s_per_token"]) / layer_s,
                "launch_share": row["sub_block_launch_s_per_token"] / layer_s,
                "tp_comm_share": row["tp_comm_s_per_token"] / layer_s,
                "layer_speedup": row["layer_speedup"],
                "layer_speedup_ceiling": row["layer_speedup_ceiling"],
                "break_even_bandwidth_efficiency": even,
                "break_even_eager_ratio": eager_even,
                "below_claim": row["layer_speedup_ceiling"] < target_speedup,
                # the fusion the claim describes (the bytes model's fused sub-block), not a free one
                "fused_below_claim": row["layer_speedup"] < target_speedup,
            }
        )
    return pd.DataFrame(rows)
