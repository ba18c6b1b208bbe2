"""``python -m mfulab predict``: one layout's predicted step, term by term, or (``--search``) the
planner's layouts ranked by it (``layouts.plan``: the same step model)."""

from __future__ import annotations

import sys

from mfulab.analytic import step
from mfulab.analytic.config import ATTENTION_KERNELS, RECOMPUTE_PLANS, preset
from mfulab.errors import ParameterError


def add_arguments(p) -> None:
    p.add_argument("--preset", required=True, help="a config.preset name, e.g. llama2-70b")
    p.add_argument("--devices", type=int, required=True, help="devices in the job")
    p.add_argument("--device", help="a devices.yaml key, e.g. h100-sxm (optional with --calibration)")
    p.add_argument("--global-batch", type=int, required=True, help="sequences per optimizer step")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the preset's)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--vpp", type=int, default=1, help="model chunks per pipeline rank (interleaved 1F1B)")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--recompute", default="none", choices=RECOMPUTE_PLANS)
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
    p.add_argument("--devices-per-node", type=int, default=8)
    p.add_argument("--attention", default="fused", choices=ATTENTION_KERNELS)
    p.add_argument("--dropout", action="store_true", help="dropout on the residuals and attention scores")
    p.add_argument(
        "--uneven-end-stages",
        action="store_true",
        help="the first and last pipeline stages hold fewer layers (Llama 3, BLOOM partitions)",
    )
    p.add_argument(
        "--framework",
        default="auto",
        choices=step.FRAMEWORKS,
        help="what issues the DP collectives (auto: megatron for ZeRO 0-1, deepspeed for 2, fsdp for 3)",
    )
    p.add_argument(
        "--shard-group",
        type=int,
        help="FSDP HYBRID_SHARD (HSDP): shard over this many DP ranks, replicate across the rest",
    )
    p.add_argument("--no-overlap", action="store_true", help="the DP collectives wait for the compute")
    p.add_argument(
        "--overlap-param-gather",
        action="store_true",
        help="Megatron --overlap-param-gather: the distributed optimizer's all-gather under the next forward",
    )
    p.add_argument(
        "--tp-comm-overlap",
        action="store_true",
        help="Megatron --tp-comm-overlap (async TP) hides TP traffic",
    )
    p.add_argument("--context-parallel", type=int, default=1, help="ranks one sequence is split over (ring)")
    p.add_argument(
        "--expert-parallel", type=int, default=1, help="ranks a MoE layer's experts are spread over"
    )
    p.add_argument("--expert-tensor-parallel", type=int, default=1, help="ranks each expert is split over")
    p.add_argument(
        "--fp8-recipe", help="with --dtype fp8/mxfp8: delayed, current, mxfp8 or blockwise scaling"
    )
    p.add_argument(
        "--calibration", help="results/<machine>/calibration: measured figures replace datasheet ones"
    )
    p.add_argument("--dtype", default="bf16", help="the GEMMs' precision: bf16, fp16, tf32, fp32, fp8, mxfp8")
    p.add_argument(
        "--assume",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a field of rates.Assumptions (repeatable), e.g. matmul_share_of_mamf=0.8",
    )
    p.add_argument("--search", action="store_true", help="rank every layout the planner finds")
    p.add_argument("--top", type=int, default=10, help="layouts --search prints")


def assumptions(pairs) -> dict:
    """``["matmul_share_of_mamf=0.8"]`` → ``{"matmul_share_of_mamf": 0.8}``; unknown names and values
    that are not numbers are refused. The GEMMs' share of MAMF defaults to the course's at-scale
    share (``rates.AT_SCALE_MATMUL_SHARE_OF_MAMF``, the order chapter 09 fits on published runs),
    the share every chapter's planner uses, not ``Assumptions``' upper bound of 1.0: the CLI
    answers with the model chapter 09 validated."""
    from dataclasses import fields

    from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF, Assumptions

    known = {f.name for f in fields(Assumptions)}
    out = {"matmul_share_of_mamf": AT_SCALE_MATMUL_SHARE_OF_MAMF}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in known:
            raise ParameterError(
                f"--assume takes NAME=VALUE with NAME one of {', '.join(sorted(known))}; got {pair!r}"
            )
        try:
            out[name] = float(value)
        except ValueError:
            raise ParameterError(f"--assume {name}: {value!r} is not a number") from None
    return out


def _common(args) -> dict:
    return dict(
        **assumptions(args.assume),
        device=args.device,
        devices_per_node=args.devices_per_node,
        calibration=args.calibration,
        overlap=not args.no_overlap,
        overlap_param_gather=args.overlap_param_gather,
        tp_comm_overlap=args.tp_comm_overlap,
        framework=args.framework,
        context_parallel=args.context_parallel,
        expert_parallel=args.expert_parallel,
        expert_tensor_parallel=args.expert_tensor_parallel,
        fp8_recipe=args.fp8_recipe,
        attention=args.attention,
        dropout=args.dropout,
        uneven_end_stages=args.uneven_end_stages,
        dtype=args.dtype,
    )


def _pct(value) -> str:
    return "n/a (dense blocks only)" if value is None else f"{value:.1%}"


def breakdown_text(out: dict) -> str:
    """The terms of one prediction as an aligned table, then the utilisations."""
    lines = [f"{'term':<20} {'seconds':>10} {'share':>7}"]
    for term in step.TERMS:
        lines.append(f"{term.removesuffix('_s'):<20} {out[term]:>10.4f} {out[term] / out['step_s']:>7.1%}")
    lines.append(f"{'step':<20} {out['step_s']:>10.4f} {1:>7.0%}")
    fits = "unknown (no memory size)" if out["fits"] is None else ("yes" if out["fits"] else "NO")
    lines += [
        "",
        f"tokens/s {out['tokens_per_s']:,.0f}   "
        f"model TFLOP/s per device {out['model_tflops_per_device']:.1f}",
        f"MFU {out['mfu_palm']:.1%} (PaLM: 6N + attention)   {_pct(out['mfu_megatron'])} (Megatron)",
        f"HFU {out['hfu_palm']:.1%} (PaLM)   {_pct(out['hfu_megatron'])} (Megatron, counting recompute)",
        f"memory {out['memory_gib']:.1f} GiB per device; fits: {fits}",
        f"assumed: the GEMMs at {out['assumptions']['matmul_share_of_mamf']:g} of the device's MAMF "
        "(chapter 09 fits this share on published runs; --assume matmul_share_of_mamf=... sets it)",
        "sources: " + "; ".join(f"{k}: {v}" for k, v in out["sources"].items() if v and k != "notes"),
    ]
    return "\n".join(lines)


def search(cfg, args):
    """``layouts.plan`` over every layout (TP up to a node) with the command's settings: the
    ones that fit, fastest first."""
    from mfulab.analytic.layouts import plan

    common = _common(args)
    zero_stages = (0, 1, 2, 3)
    if args.framework != "auto":
        from mfulab.analytic.comm import DP_ZERO_STAGES

        zero_stages = DP_ZERO_STAGES[args.framework]
    df = plan(
        cfg,
        n_devices=args.devices,
        global_batch=args.global_batch,
        top=None,
        max_tp=args.devices_per_node,
        zero_stages=zero_stages,
        **common,
    )
    if df.empty:
        raise ParameterError("no layout of these devices fits memory and splits the batch")
    return df[
        [
            "tp",
            "pp",
            "dp",
            "v",
            "micro_batch",
            "zero_stage",
            "recompute_policy",
            "framework",
            "step_s",
            "mfu_palm",
            "memory_gib",
        ]
    ]


def main(args) -> None:
    cfg = preset(args.preset)
    if args.seq_len:
        cfg = cfg.with_(seq_len=args.seq_len)
    if args.search:
        df = search(cfg, args).head(args.top)
        print(
            f"{cfg.name} on {args.devices} × {args.device or 'calibrated device'}, global batch "
            f"{args.global_batch}:"
        )
        print(
            df.to_string(
                index=False,
                formatters={
                    "step_s": "{:.3f}".format,
                    "mfu_palm": "{:.1%}".format,
                    "memory_gib": "{:.1f}".format,
                },
            )
        )
        return
    out = step.step_time(
        cfg,
        n_devices=args.devices,
        tp=args.tp,
        pp=args.pp,
        vpp=args.vpp,
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        recompute=args.recompute,
        sequence_parallel=args.sequence_parallel,
        zero_stage=args.zero_stage,
        shard_group=args.shard_group,
        **_common(args),
    )
    if out["fits"] is False:
        raise ParameterError(
            f"the layout needs {out['memory_gib']:.1f} GiB per device, more than "
            f"{1 - out['assumptions']['memory_margin']:.0%} "
            f"of the device's {out['device_memory_gib']:.0f} GiB: raise tp/pp, the ZeRO stage or recompute, "
            "or lower the micro-batch"
        )
    lay = out["layout"]
    if cfg.moe is not None:
        print(
            "warning: MoE steps miss their published runs widely in chapter 09's blind check (its MoE "
            "rows), and their term split comes out right only by compensation (grouped GEMMs priced too "
            "fast, all-to-alls too slow); read this step and its breakdown as a rough bound",
            file=sys.stderr,
        )
    print(
        f"{cfg.name} (seq {cfg.seq_len}) on {args.devices} × {args.device or 'calibrated device'}: TP "
        f"{lay['tp']} · "
        f"PP {lay['pp']} (v {lay['vpp']}) · DP {lay['dp']}, micro-batch {lay['micro_batch']} × {lay['m']} "
        "per step, "
        f"{out['schedule']}"
    )
    print(breakdown_text(out))
