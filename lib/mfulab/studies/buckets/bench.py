"""Measurement of the ``buckets`` study (torch, headless): the real ``bucket_cap_mb`` sweep
under ``DistributedDataParallel``, on every rank under torchrun (``launch.run``).

A stack of Linear layers (the tensor count and sizes are parameters) under DDP for each cap
and flag, timing the step and the same step under ``no_sync()`` (no communication); the
difference is the communication cost DDP could not hide. Each step is timed with
``collectives.slowest_rank_time`` (the slowest rank's time counts). *Emulated compute* inserts
a layer whose backward sleeps a stated time (an accelerator kernel as the host sees it: time
passes, no core is busy), so overlap can show on the 2-core box; it is labelled everywhere.
Every rank also checks that DDP's gradients equal the average of every rank's local
gradients (the gradient gate), reads the bucket layout DDP built, runs the reference GPT
under DDP, and reads the α–β of this group's all-reduce from the machine's calibration
for the simulator.
"""

from __future__ import annotations

import contextlib
import functools
import time

from ... import calibration, collectives, hardware
from .params import Params

BENCHMARK_VERSION = {"ddp_sweep": 2}
WORKER = "mfulab.studies.buckets.bench:ddp_worker"


class _SleepBackward:
    """An autograd function that is the identity forward and sleeps in backward: a layer's
    backward that takes time without occupying a core (emulated accelerator compute)."""

    @staticmethod
    def build(seconds: float):
        import torch

        class Sleep(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, grad):
                time.sleep(seconds)
                return grad

        return Sleep


def build_stack(layers: int, hidden: int, *, emulated_backward_s: float | None = None):
    """A stack of Linear + tanh layers; with ``emulated_backward_s`` each layer's backward
    also sleeps that long."""
    import torch
    from torch import nn

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
            self.sleep = _SleepBackward.build(emulated_backward_s) if emulated_backward_s else None

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
                if self.sleep is not None:
                    x = self.sleep.apply(x)
            return x

    torch.manual_seed(0)
    return Stack()


# ---------------------------------------------------------------------------- helpers (every rank)
def _all_rebuilt(ddp) -> bool:
    """Whether every rank's DDP has rebuilt its buckets: decided together, so that no rank
    runs an extra step (an all-reduce the others would not match)."""
    from ...launch import reduce_scalar

    return bool(reduce_scalar(1.0 if ddp._get_ddp_logging_data().get("has_rebuilt_buckets") else 0.0, "min"))


def _bucket_sizes(ddp) -> list[int]:
    """Bucket sizes (bytes) DDP uses now: the rebuilt layout once it exists (DDP starts with
    every parameter in one bucket and rebuilds in gradient-ready order after its first
    iterations), from ``_get_ddp_logging_data``."""
    data = ddp._get_ddp_logging_data()
    raw = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", "")
    return [int(x) for x in str(raw).split(",") if x.strip()] if raw else []


def _ddp_step(ddp, loss_fn, device: str, sync: bool = True) -> None:
    """One forward + backward of ``ddp`` (``loss_fn(ddp)`` is the loss), with gradient
    all-reduce or under ``no_sync()``, then a device synchronise."""
    from ...timing import synchronize

    ddp.zero_grad(set_to_none=True)
    with contextlib.nullcontext() if sync else ddp.no_sync():
        loss_fn(ddp).backward()
    synchronize(device)


def _gradient_gate(ddp, ref) -> float:
    """Largest |DDP gradient − single-process reference gradient| over every parameter."""
    return max(float((p.grad - r).abs().max()) for p, r in zip(ddp.module.parameters(), ref))


def _until_rebuilt(ddp, step) -> None:
    """DDP rebuilds its buckets after one iteration (two with static_graph): step until then."""
    for _ in range(5):
        if _all_rebuilt(ddp):
            break
        step()


def _time_sync_and_no_sync(step, reps: int, device: str) -> dict:
    """``reps`` slowest-rank times of the step with communication and under ``no_sync()``."""
    times = {"sync": [], "no_sync": []}
    for _ in range(reps):
        for kind in ("sync", "no_sync"):
            dt, _ = collectives.slowest_rank_time(functools.partial(step, sync=kind == "sync"), device)
            times[kind].append(dt)
    return times


# ---------------------------------------------------------------------------- workers (every rank)
def ddp_worker(spec: dict) -> dict:
    """Runs on every rank: for each mode, cap and flag variant, DDP step time vs no_sync()."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...timing import progress, summarize

    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = spec["device"]
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(spec["batch"], spec["stack_hidden"], generator=gen).to(device)
    out = {"world_size": n, "rows": [], "layouts": {}, "gradient_gate": {}}

    # correctness gate: DDP gradients equal the average of every rank's local gradients
    xs = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(xs, x)
    ref_model = build_stack(spec["stack_layers"], spec["stack_hidden"]).to(device)
    for xi in xs:
        torch.tanh(ref_model(xi)).pow(2).mean().div(n).backward()
    ref = [p.grad.clone() for p in ref_model.parameters()]

    def loss(ddp):
        return torch.tanh(ddp(x)).pow(2).mean()

    points = [
        (m, c, v)
        for m in spec["modes"]
        for c in spec["bucket_caps_mb"]
        for v in spec["variants"]
        if m == "real" or v == "default"
    ]
    for mode, cap, variant in progress(points, "ddp sweep") if rank == 0 else points:
        emulated = spec["emulated_layer_backward_s"] if mode == "emulated" else None
        model = build_stack(spec["stack_layers"], spec["stack_hidden"], emulated_backward_s=emulated)
        model = model.to(device)
        ddp = DDP(
            model,
            bucket_cap_mb=cap,
            gradient_as_bucket_view="bucket_view" in variant,
            static_graph="static_graph" in variant,
        )

        def step(sync=True, ddp=ddp):
            _ddp_step(ddp, loss, device, sync)

        step()
        if mode == "real" and variant == "default":
            out["gradient_gate"][str(cap)] = _gradient_gate(ddp, ref)
        _until_rebuilt(ddp, step)
        layout = _bucket_sizes(ddp)
        times = _time_sync_and_no_sync(step, spec["reps"], device)
        sync_t = summarize(times["sync"])
        out["layouts"][f"{mode}:{cap}:{variant}"] = layout
        out["rows"].append(
            {
                "mode": mode,
                "bucket_cap_mb": cap,
                "variant": variant,
                "buckets": len(layout),
                "step_times_s": times["sync"],
                "no_sync_times_s": times["no_sync"],
                "step_s": sync_t.median_s,
                "no_sync_s": summarize(times["no_sync"]).median_s,
                "step_q1_s": sync_t.q1_s,
                "step_q3_s": sync_t.q3_s,
            }
        )
        del ddp, model
    if spec.get("gpt_preset"):
        out["gpt"] = _gpt_runs(spec, rank, n, device)
    return out


def _gpt_runs(spec, rank, n, device):
    """The reference GPT under DDP at each cap and at DDP's default: the layout DDP built,
    the gradient-ready order it recorded, per-parameter bytes, step times, gradient gate."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...config import preset
    from ...model import GPT
    from ...timing import summarize

    cfg = preset(spec["gpt_preset"]).with_(seq_len=spec["gpt_seq_len"])
    gen = torch.Generator().manual_seed(200 + rank)
    idx = torch.randint(0, cfg.vocab_size, (spec["gpt_batch"], cfg.seq_len), generator=gen).to(device)
    everyone = [torch.empty_like(idx) for _ in range(n)]
    dist.all_gather(everyone, idx)
    torch.manual_seed(0)
    ref_model = GPT(cfg, attn_impl="sdpa").to(device)
    for i in everyone:
        ref_model(i, i)[1].div(n).backward()
    ref = [p.grad.clone() for p in ref_model.parameters()]

    def loss(ddp):
        return ddp(idx, idx)[1]

    runs = []
    for cap in [None] + list(spec["gpt_bucket_caps_mb"]):
        torch.manual_seed(0)
        model = GPT(cfg, attn_impl="sdpa").to(device)
        ddp = DDP(model) if cap is None else DDP(model, bucket_cap_mb=cap)

        def step(sync=True, ddp=ddp):
            _ddp_step(ddp, loss, device, sync)

        step()
        gate = _gradient_gate(ddp, ref)
        _until_rebuilt(ddp, step)
        data = ddp._get_ddp_logging_data()
        order = [
            [int(i) for i in b.split()]
            for b in str(data.get("rebuilt_per_bucket_param_indices", "")).split(",")
            if b.strip()
        ]
        times = _time_sync_and_no_sync(step, spec["reps"], device)
        runs.append(
            {
                "bucket_cap_mb": cap,
                "layout": _bucket_sizes(ddp),
                "param_order": order,
                "param_bytes": [p.numel() * p.element_size() for p in ddp.module.parameters()],
                "gradient_gate": gate,
                "step_s": summarize(times["sync"]).median_s,
                "no_sync_s": summarize(times["no_sync"]).median_s,
                "step_times_s": times["sync"],
            }
        )
        del ddp, model
    return {"preset": cfg.name, "seq_len": cfg.seq_len, "batch": spec["gpt_batch"], "runs": runs}


# ---------------------------------------------------------------------------- entry point
SPEC_KEYS = (
    "device",
    "stack_layers",
    "stack_hidden",
    "batch",
    "bucket_caps_mb",
    "variants",
    "modes",
    "emulated_layer_backward_s",
    "reps",
    "gpt_preset",
    "gpt_seq_len",
    "gpt_batch",
    "gpt_bucket_caps_mb",
)


def measure(p: Params) -> dict:
    """The real sweep on ``p.nproc`` ranks (see the module docstring), as plain records."""
    from ...launch import run

    p = p.prepared()
    values = p.to_dict()
    spec = {k: values[k] for k in SPEC_KEYS}
    rec = {
        "study": "buckets",
        "params": values,
        "device": p.device,
        "device_name": hardware.device_name(p.device),
        "benchmark_version": {**BENCHMARK_VERSION, **collectives.BENCHMARK_VERSION},
    }
    rec["ddp"] = run(WORKER, spec, nproc=p.nproc, device=p.device, timeout_s=p.timeout_s)
    # α–β of this machine's all-reduce for the simulator: the calibration, shared with overlap
    key = calibration.collectives_key(p.device, p.nproc)
    cal = calibration.get(p.calibration, device=p.device, parts=[key])
    rec["ddp"]["allreduce_fit"], rec["calibration"] = cal[key], cal["_meta"]
    return rec
