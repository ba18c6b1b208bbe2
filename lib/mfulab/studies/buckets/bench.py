"""Measurement of the ``buckets`` study (torch, headless): the real ``bucket_cap_mb`` sweep
under ``DistributedDataParallel``, on every rank under torchrun (``launch.run``).

A stack of Linear layers (the tensor count and sizes are parameters) under DDP, one DDP per
cap (default flags) and per flag variant at ``flags_bucket_cap_mb``. All of them, the step under
``no_sync()`` (no communication) and the forward alone are timed **interleaved**
(``timing.interleaved``: each round runs each once, in an order shuffled per round by a generator
seeded alike on every rank, so every rank issues the same all-reduces in the same order), the
rounds split over ``jobs`` fresh torchrun jobs. The step minus ``no_sync`` is the communication
DDP could not hide. *Emulated compute* inserts a layer whose backward sleeps a stated time (an
accelerator kernel as the host sees it: time passes, no core is busy), so overlap can show on
the 2-core box; it is labelled everywhere. The flag variants (``params.VARIANTS``) set
``gradient_as_bucket_view``, ``static_graph`` and ``find_unused_parameters`` (with which DDP
searches the autograd graph every step, the case ``static_graph`` is documented to speed up).
Every rank also checks that DDP's gradients equal the average of every rank's local gradients
(the gradient gate), reads the bucket layout and flags DDP built, runs the reference GPT
under DDP (each step timed by ``collectives.slowest_rank_time``), counts the gradient and
bucket storage with and without ``gradient_as_bucket_view`` (``grad_memory``), and reads the
α–β of this group's all-reduce and the DRAM bandwidth from the machine's calibration (the
simulator and B6's bound).
"""

from __future__ import annotations

import contextlib
import functools
import time

from mfulab.measure import calibration, collectives, host
from mfulab.studies.buckets import grad_memory, graph_nodes
from mfulab.studies.buckets.params import Params, baseline_cap, configurations, stack_dims
from mfulab.studies.buckets.stated import B6_ARTICLE

BENCHMARK_VERSION = {"ddp_sweep": 7}  # 7: the forward timed apart (the simulator's backward window)
DDP_FLAG_KEYS = ("find_unused_parameters", "unused_parameter_size", "static_graph", "gradient_as_bucket_view")
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
    from mfulab.measure.launch import reduce_scalar

    return bool(reduce_scalar(1.0 if ddp._get_ddp_logging_data().get("has_rebuilt_buckets") else 0.0, "min"))


def _bucket_sizes(ddp) -> list[int]:
    """Bucket sizes (bytes) DDP uses now: the rebuilt layout once it exists (DDP starts with
    every parameter in one bucket and rebuilds in gradient-ready order after its first
    iterations), from ``_get_ddp_logging_data``."""
    data = ddp._get_ddp_logging_data()
    raw = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", "")
    return [int(x) for x in str(raw).split(",") if x.strip()] if raw else []


def _ddp_step(ddp, loss_fn, device: str, sync: bool = True, backward: bool = True) -> None:
    """One forward + backward of ``ddp`` (``loss_fn(ddp)`` is the loss), with gradient
    all-reduce or under ``no_sync()``, then a device synchronise; ``backward=False``: the forward
    alone, under ``no_sync()`` (DDP prepares no reduction), its graph dropped."""
    from mfulab.measure.timing import synchronize

    ddp.zero_grad(set_to_none=True)
    with contextlib.nullcontext() if sync and backward else ddp.no_sync():
        loss = loss_fn(ddp)
        if backward:
            loss.backward()
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


def label(mode: str, cap: float | None, variant: str) -> str:
    """The interleaved timing's label of a configuration (``<mode>:no_sync`` for no_sync)."""
    return f"{mode}:no_sync" if cap is None else f"{mode}:{cap}:{variant}"


def ddp_worker(spec: dict) -> dict:
    """Runs on every rank: builds one DDP per configuration (:func:`params.configurations`), checks
    layouts and gradients, then times every configuration of a mode *interleaved*
    (``timing.interleaved``: each round runs every configuration once, plus the step under
    ``no_sync()``, in an order shuffled per round by a generator seeded alike on every rank, so
    that every rank runs the same collectives in the same order)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mfulab.measure.timing import interleaved

    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = spec["device"]
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(spec["batch"], spec["stack_hidden"], generator=gen).to(device)
    out = {"world_size": n, "rows": [], "layouts": {}, "gradient_gate": {}, "ddp_flags": {}}

    # correctness gate: DDP gradients equal the average of every rank's local gradients
    xs = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(xs, x)
    ref_model = build_stack(spec["stack_layers"], spec["stack_hidden"]).to(device)
    for xi in xs:
        torch.tanh(ref_model(xi)).pow(2).mean().div(n).backward()
    ref = [p.grad.clone() for p in ref_model.parameters()]

    inputs = {"real": x}
    if "emulated" in spec["modes"]:  # the emulated stack's own width and rows
        _, hidden, batch = stack_dims(spec, "emulated")
        inputs["emulated"] = torch.randn(batch, hidden, generator=gen).to(device)

    def mode_loss(ddp, mode):
        return torch.tanh(ddp(inputs[mode])).pow(2).mean()

    steps = {}
    for mode, cap, variant in configurations(spec):
        emulated = spec["emulated_layer_backward_s"] if mode == "emulated" else None
        layers, hidden, _ = stack_dims(spec, mode)
        model = build_stack(layers, hidden, emulated_backward_s=emulated)
        ddp = DDP(
            model.to(device),
            bucket_cap_mb=cap,
            gradient_as_bucket_view="bucket_view" in variant,
            static_graph="static_graph" in variant,
            find_unused_parameters="find_unused" in variant,
        )
        step = functools.partial(_ddp_step, ddp, functools.partial(mode_loss, mode=mode), device)
        step()
        if mode == "real":
            out["gradient_gate"][f"{cap}:{variant}"] = _gradient_gate(ddp, ref)
        _until_rebuilt(ddp, step)
        out["layouts"][label(mode, cap, variant)] = _bucket_sizes(ddp)
        data = ddp._get_ddp_logging_data()
        out["ddp_flags"][label(mode, cap, variant)] = {k: data.get(k) for k in DDP_FLAG_KEYS}
        steps[(mode, cap, variant)] = step

    for i, mode in enumerate(spec["modes"]):
        fns = {label(*key): steps[key] for key in steps if key[0] == mode}
        base = steps[(mode, baseline_cap(spec, mode), "default")]  # the no_sync baseline
        fns[label(mode, None, "")] = functools.partial(base, sync=False)
        fns[f"{mode}:forward"] = functools.partial(base, backward=False)
        rounds = spec["rounds"] if mode == "real" else spec["emulated_rounds"]
        # number=1: one step per block on every rank (a per-rank block length would let
        # the ranks disagree on how many all-reduces to run)
        timings = interleaved(
            fns,
            rounds=rounds,
            device=device,
            num_threads=1,
            number=1,
            seed=spec["seed"] + i,
            desc=f"ddp {mode} (interleaved)",
        )
        no_sync, forward = timings.pop(label(mode, None, "")), timings.pop(f"{mode}:forward")
        for key in steps:
            if key[0] != mode:
                continue
            t = timings[label(*key)]
            out["rows"].append(
                {
                    "mode": mode,
                    "bucket_cap_mb": key[1],
                    "variant": key[2],
                    "buckets": len(out["layouts"][label(*key)]),
                    "step_times_s": t.times_s,
                    "no_sync_times_s": no_sync.times_s,
                    "forward_times_s": forward.times_s,
                }
            )
    if spec.get("count_memory"):  # the first job only
        out["sync_profile"] = _sync_profile(spec, steps, rank, device)
    del steps
    if spec.get("gpt_preset"):  # the first job only
        out["gpt"] = _gpt_runs(spec, rank, n, device)
    if spec.get("count_memory"):  # the first job only
        build = functools.partial(build_stack, spec["stack_layers"], spec["stack_hidden"])
        cap = spec["flags_bucket_cap_mb"]
        out["grad_memory"] = grad_memory.storage_accounting(build, x, bucket_cap_mb=cap, device=device)
    return out


PROFILED_STEPS = 5  # per kind (synchronised, no_sync) and mode


def _sync_profile(spec, steps, rank, device) -> dict:
    """What a synchronised step does that a ``no_sync`` one does not, before any fit: per mode, at
    ``flags_bucket_cap_mb`` with the default flags, ``PROFILED_STEPS`` steps of each kind under
    ``torch.profiler`` (``opprofile.profile_steps``: seconds per operator category and per op);
    every rank profiles (the collectives must match), rank 0's split is kept."""
    from mfulab.measure import opprofile

    out = {}
    for mode in spec["modes"]:
        step = steps[(mode, baseline_cap(spec, mode), "default")]
        kinds = {}
        for kind in ("sync", "no_sync"):
            prof = opprofile.profile_steps(
                functools.partial(step, sync=kind == "sync"), steps=PROFILED_STEPS, device=device
            )
            kinds[kind] = prof["steps"]
        if rank == 0:
            out[mode] = kinds
    return out


def _gpt_runs(spec, rank, n, device):
    """The reference GPT under DDP at each cap and at DDP's default: the layout DDP built,
    the gradient-ready order it recorded, per-parameter bytes, step times, gradient gate."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mfulab.analytic.config import preset
    from mfulab.measure.gpt import GPT
    from mfulab.measure.timing import summarize

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
    "flags_bucket_cap_mb",
    "variants",
    "modes",
    "emulated_layer_backward_s",
    "emulated_stack_layers",
    "emulated_stack_hidden",
    "emulated_batch",
    "emulated_bucket_caps_mb",
    "rounds",
    "emulated_rounds",
    "reps",
    "gpt_preset",
    "gpt_seq_len",
    "gpt_batch",
    "gpt_bucket_caps_mb",
)


def merge_jobs(jobs: list[dict]) -> dict:
    """One record from the fresh jobs' records: every configuration's rounds in job order
    (each job ran the same configurations for the same number of rounds, so round i of one
    configuration still pairs with round i of every other); layouts, flags and the reference
    GPT from the first job; the gradient gate is the worst over the jobs."""
    first = jobs[0]
    merged = {**first, "jobs": len(jobs), "rows": [dict(r) for r in first["rows"]]}
    for job in jobs[1:]:
        if [(r["mode"], r["bucket_cap_mb"], r["variant"]) for r in job["rows"]] != [
            (r["mode"], r["bucket_cap_mb"], r["variant"]) for r in first["rows"]
        ]:
            raise RuntimeError("the fresh jobs timed different configurations")
        for row, more in zip(merged["rows"], job["rows"]):
            row["step_times_s"] = row["step_times_s"] + more["step_times_s"]
            row["no_sync_times_s"] = row["no_sync_times_s"] + more["no_sync_times_s"]
        merged["gradient_gate"] = {
            k: max(v, job["gradient_gate"].get(k, v)) for k, v in merged["gradient_gate"].items()
        }
    return merged


def measure(p: Params) -> dict:
    """The real sweep on ``p.nproc`` ranks (see the module docstring), as plain records: the
    interleaved rounds are split over ``p.jobs`` fresh torchrun jobs (fresh processes:
    allocator, thread pools and gloo's connections start cold in each), the reference GPT
    and the gradient-memory count run in the first job only."""
    from mfulab.measure.launch import run

    p = p.prepared()
    values = p.to_dict()
    spec = {k: values[k] for k in SPEC_KEYS}
    rec = {
        "study": "buckets",
        "params": values,
        "device": p.device,
        "device_name": host.device_name(p.device),
        "benchmark_version": {**BENCHMARK_VERSION, **collectives.BENCHMARK_VERSION},
    }
    jobs = []
    for job in range(p.jobs):
        job_spec = {
            **spec,
            "rounds": p.rounds // p.jobs,
            "emulated_rounds": max(2, p.emulated_rounds // p.jobs),
            "seed": 1000 * job,
            "gpt_preset": spec["gpt_preset"] if job == 0 else "",
            "count_memory": job == 0,
        }
        jobs.append(run(WORKER, job_spec, nproc=p.nproc, device=p.device, timeout_s=p.timeout_s))
    rec["ddp"] = merge_jobs(jobs)
    # α–β of this machine's all-reduce for the simulator, the DRAM bandwidth for B6's bound:
    # the machine's calibration, shared with the other studies
    key = calibration.collectives_key(p.device, p.nproc)
    cal = calibration.get(p.calibration, device=p.device, parts=[key, "bandwidth"])
    rec["ddp"]["allreduce_fit"], rec["calibration"] = cal[key], cal["_meta"]
    rec["bandwidth"] = cal["bandwidth"]
    # the autograd graph DDP's unused-parameter search walks at the article's 7B (B6)
    rec["graph_nodes"] = {"article": graph_nodes.gpt_nodes(B6_ARTICLE["preset"])}
    return rec
