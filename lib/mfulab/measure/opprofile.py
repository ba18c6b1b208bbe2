"""Where a step's time goes, operator by operator: ``torch.profiler`` over a few steady steps of
a callable, every op (CPU) or kernel (CUDA) put in a category by its name, and the step's wall
time split so that the categories sum to it.

How a step's wall time is split (the exported Chrome trace is what is read, so what a reader
opens in ui.perfetto.dev is exactly what was counted):

- each profiled step runs inside a ``record_function("mfulab.step#k")`` annotation: its duration
  is the step's wall time (the caller also times it with ``time.perf_counter``);
- **CPU**: the ops on the step's thread nest (an op calls ops). Each op's *self* time (its
  duration minus its children's) goes to its category; the step's time not covered by any op
  (Python, the loop, waiting) is **idle**. The categories sum to the step exactly;
- **CUDA**: the device timeline: at each instant the kernels that run give the category (a
  compute kernel wins over a copy, a copy over a collective: communication counts only where
  it is *exposed*); an instant with no kernel is **idle** (the device waits for the host).

Categories (``CATEGORIES``) are decided by the name rules in ``RULES``, first match wins. A
*context* rule (optimizer, data, communication, attention) claims everything that runs inside
the matching op, so an ``aten::add_`` inside ``Optimizer.step`` is optimizer time. An op no
rule names takes its parent's category, and one with no named ancestor is **other ops**: never
silently folded into a large category. ``rules_table()`` shows the rules for a notebook.

On CUDA, when ``HolisticTraceAnalysis`` (``pip install -e .[hta]``) is installed, its temporal
breakdown (compute / non-compute / idle), kernel-type breakdown and communication-computation
overlap are added beside this split (``hta_summary``); without it this module is the fallback.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from mfulab.measure.tracefile import TIME_EPS_US, complete_events, nest

STEP_PREFIX = "mfulab.step#"

CATEGORIES = (
    "matmul",
    "attention core",
    "norm / elementwise",
    "optimizer",
    "communication",
    "data / host-to-device",
    "checkpoint",
    "other ops",
    "idle",
)

# (category, applies to, regular expression searched in the op or kernel name, case-insensitive,
#  what it catches). "context": the op and everything inside it; "op": the op's own self time
#  (its unnamed children inherit it); "self": only the op's own self time (children decide alone).
RULES = (
    ("checkpoint", "context", r"^mfulab\.checkpoint", "checkpoint write (annotated by the caller)"),
    (
        "communication",
        "self",
        r"^mfulab\.ddp_backward$",
        "time inside DDP's backward outside every op: blocked on the gradient all-reduce",
    ),
    ("optimizer", "context", r"^Optimizer\.(step|zero_grad)|multi_tensor_apply|adam", "optimizer step"),
    (
        "data / host-to-device",
        "context",
        r"^data$|DataLoader|Memcpy ?HtoD|^mfulab\.data",
        "batch fetch + copy",
    ),
    (
        "communication",
        "context",
        r"nccl|gloo|c10d|all_?reduce|record_param_comms|all_?gather|reduce_scatter|^mfulab\.comm_wait",
        "collectives",
    ),
    (
        "attention core",
        "context",
        r"scaled_dot_product|flash|efficient_attention|fmha|attention|sdpa|fort_native|"
        r"(?<!log_)(?<!log)softmax",
        "fused attention, softmax",
    ),
    (
        "matmul",
        "op",
        r"\b(aten::)?(mm|addmm|bmm|baddbmm|matmul|linear|_?mm_backward)\b|gemm|cutlass|cublas|"
        r"(Mm|Addmm|Bmm)Backward|sm\d+_xmma|wgmma|hgmma|^nvjet_",  # nvjet_*: Hopper cuBLAS GEMMs
        "matrix multiplications",
    ),
    (
        "norm / elementwise",
        "op",
        r"layer_?norm|rms_?norm|gelu|relu|silu|dropout|add|mul|div|sub|sum|mean|copy|fill|zero|"
        r"embedding|cross_entropy|nll_loss|log_softmax|elementwise|vectorized|reduce|where|tanh|exp|"
        r"pow|sqrt|cat|index|clone|contiguous|_to_copy|aten::to\b|Memset",
        "norms, activations, pointwise",
    ),
)
_COMPILED = [(cat, scope, re.compile(rx, re.IGNORECASE)) for cat, scope, rx, _ in RULES]
# where kernels overlap on a device, the category that claims the instant (first wins)
DEVICE_PRIORITY = (
    "matmul",
    "attention core",
    "norm / elementwise",
    "optimizer",
    "other ops",
    "checkpoint",
    "data / host-to-device",
    "communication",
)


def rules_table():
    """The name rules as a table (category, scope, pattern, what it catches)."""
    import pandas as pd

    rows = [{"category": c, "applies_to": s, "name_pattern": rx, "catches": w} for c, s, rx, w in RULES]
    for cat, scope, rx, what in (
        ("other ops", "op", "(no rule above, no named ancestor)", "anything unnamed"),
        ("idle", "gap", "(no op / no kernel)", "CPU: step time outside every op; CUDA: device idle"),
    ):
        rows.append({"category": cat, "applies_to": scope, "name_pattern": rx, "catches": what})
    return pd.DataFrame(rows)


def classify(name: str, *, own: bool = True) -> tuple[str | None, str | None]:
    """The first rule matching ``name``: (category, scope), or (None, None); ``own=False``
    skips "self" rules (they do not pass to an op's children)."""
    for cat, scope, rx in _COMPILED:
        if (own or scope != "self") and rx.search(name):
            return cat, scope
    return None, None


def _category(e: dict) -> str:
    """Context rules of ancestors (outermost first), then the op's own rule, then the nearest
    named ancestor, else "other ops"."""
    chain = []
    node = e
    while node is not None:
        chain.append(node)
        node = node["_parent"]
    chain.reverse()  # outermost first
    for node in chain:
        if node["name"].startswith(STEP_PREFIX):
            continue
        cat, scope = classify(node["name"], own=node is e)
        if scope == "context" or (scope == "self" and node is e):
            return cat
    for node in reversed(chain):
        if node["name"].startswith(STEP_PREFIX):
            break
        cat, _ = classify(node["name"], own=node is e)
        if cat:
            return cat
    return "other ops"


def _steps(events: list[dict]) -> list[dict]:
    """The step windows: the host's ``record_function`` ranges. On CUDA kineto also writes a
    ``gpu_user_annotation`` copy of each on the device timeline (the kernels' span, shorter); it
    is not a step of its own."""
    steps = [e for e in events if e["name"].startswith(STEP_PREFIX) and e.get("cat") != "gpu_user_annotation"]
    return sorted(steps, key=lambda e: e["ts"])


def cpu_breakdown(trace: dict) -> list[dict]:
    """Per step: seconds in each category from the ops on the step's thread (self times), idle =
    the step's time outside every op. Each step's categories sum to its wall time."""
    events = complete_events(trace)
    out = []
    for step in _steps(events):
        lo, hi = step["ts"], step["ts"] + step["dur"]
        inside = [
            dict(e)
            for e in events
            if e.get("tid") == step.get("tid")
            and e.get("pid") == step.get("pid")
            and e is not step
            and e.get("cat") in ("cpu_op", "user_annotation", "python_function")
            and lo - TIME_EPS_US <= e["ts"] <= hi
        ]
        seconds = dict.fromkeys(CATEGORIES, 0.0)
        by_op: dict = {}
        covered_us = 0.0
        for e in nest(inside):
            self_us = max(e["dur"] - e["_children_us"], 0.0)
            cat = _category(e)
            seconds[cat] += self_us * 1e-6
            by_op[(cat, e["name"])] = by_op.get((cat, e["name"]), 0.0) + self_us * 1e-6
            if e["_parent"] is None:
                covered_us += min(e["ts"] + e["dur"], hi) - max(e["ts"], lo)
        seconds["idle"] = max(step["dur"] - covered_us, 0.0) * 1e-6
        out.append(_step_row(step, seconds, len(inside), by_op))
    return out


def _step_row(step: dict, seconds: dict, n_events: int, by_op: dict) -> dict:
    return {
        "step": int(step["name"][len(STEP_PREFIX) :]),
        "wall_s": step["dur"] * 1e-6,
        "categories_s": seconds,
        "events": n_events,
        "ops_self_s": [{"category": c, "name": n, "self_s": v} for (c, n), v in by_op.items()],
    }


def device_breakdown(trace: dict) -> list[dict]:
    """Per step (CUDA): the device timeline inside the step's window, each instant given to the
    highest-priority category of the kernels running then (``DEVICE_PRIORITY``); no kernel: idle."""
    events = complete_events(trace)
    steps = _steps(events)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    rank = {c: i for i, c in enumerate(DEVICE_PRIORITY)}
    out = []
    for step in steps:
        lo, hi = step["ts"], step["ts"] + step["dur"]
        spans = []
        for k in kernels:
            s, e = max(k["ts"], lo), min(k["ts"] + k["dur"], hi)
            if e > s:
                cat = classify(k["name"])[0] or "other ops"
                spans.append((s, e, cat, k["name"]))
        seconds = dict.fromkeys(CATEGORIES, 0.0)
        by_op: dict = {}
        marks = []  # one sorted sweep over starts and ends (was every kernel at every edge)
        for s, e, cat, name in spans:
            by_op[(cat, name)] = by_op.get((cat, name), 0.0) + (e - s) * 1e-6
            marks += [(s, 1, rank[cat]), (e, -1, rank[cat])]
        active, last = [0] * len(DEVICE_PRIORITY), lo
        for t, delta, r in sorted(marks):
            if t > last:
                top = next((i for i, n in enumerate(active) if n), None)
                seconds["idle" if top is None else DEVICE_PRIORITY[top]] += (t - last) * 1e-6
                last = t
            active[r] += delta
        seconds["idle"] += (hi - last) * 1e-6
        out.append(_step_row(step, seconds, len(spans), by_op))
    return out


def profile_steps(
    step_fn,
    *,
    steps: int = 3,
    warmup_steps: int = 1,
    device: str = "cpu",
    trace_path=None,
    max_trace_bytes: int = 2_000_000,
) -> dict:
    """Run ``step_fn()`` ``warmup_steps + steps`` times under ``torch.profiler``; the warm-up
    steps run unprofiled (the profiler's own first-call cost stays out). Returns plain records:
    per step the wall time by ``perf_counter``, the annotation's wall time and the seconds per
    category (``cpu_breakdown`` / ``device_breakdown``), the source, and the trace file written
    (``write_trace``: gzipped, at most ``max_trace_bytes``) when ``trace_path`` is given."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from mfulab.measure.timing import synchronize

    for _ in range(warmup_steps):
        step_fn()
    synchronize(device)
    # the profiler's first step carries its own start-up cost: one step is profiled first, under a
    # name that is not a step's, and left out of the split (it stays in the trace)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    perf_s = []
    with profile(activities=activities) as prof:
        with record_function("mfulab.profiler-warmup"):
            step_fn()
            synchronize(device)
        for k in range(steps):
            t0 = time.perf_counter()
            with record_function(f"{STEP_PREFIX}{k}"):
                step_fn()
                synchronize(device)
            perf_s.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        trace = json.loads(raw.read_text())
    rows = device_breakdown(trace) if device == "cuda" else cpu_breakdown(trace)
    if len(rows) != steps:
        raise RuntimeError(f"the trace has {len(rows)} step windows for {steps} profiled steps")
    for row, t in zip(rows, perf_s, strict=True):
        row["perf_counter_s"] = t
    out = {
        "source": "torch.profiler (device timeline)" if device == "cuda" else "torch.profiler (CPU ops)",
        "device": device,
        "torch_version": torch.__version__,
        "steps": rows,
        "categories": list(CATEGORIES),
        "trace": None,
        "hta": None,
    }
    if trace_path is not None:
        from mfulab.measure.tracefile import write_trace

        out["trace"] = write_trace(trace, trace_path, max_bytes=max_trace_bytes)
        if device == "cuda":
            out["hta"] = hta_summary(Path(trace_path).parent)
    return out


def hta_summary(trace_dir) -> dict:
    """HolisticTraceAnalysis on the traces in ``trace_dir`` (CUDA): temporal breakdown, kernel
    types and communication-computation overlap, as plain records; why not, when it cannot."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return {"available": False, "why": "HolisticTraceAnalysis is not installed (pip install -e .[hta])"}
    try:
        analyzer = TraceAnalysis(trace_dir=str(trace_dir))
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        kernel_types = analyzer.get_gpu_kernel_breakdown(visualize=False)[0]
        overlap = analyzer.get_comm_comp_overlap(visualize=False)
    except Exception as err:  # HTA's own checks on the trace: report, do not fail the study
        return {"available": True, "why": f"HTA could not read the trace: {err!r}"}
    return {
        "available": True,
        "temporal_breakdown": temporal.to_dict(orient="records"),
        "kernel_types": kernel_types.to_dict(orient="records"),
        "comm_comp_overlap": overlap.to_dict(orient="records"),
    }


def step_table(profile: dict):
    """One row per profiled step and category: seconds and share of the step."""
    import pandas as pd

    rows = []
    for s in profile["steps"]:
        for cat, sec in s["categories_s"].items():
            rows.append(
                {"step": s["step"], "category": cat, "seconds": sec, "share_of_step": sec / s["wall_s"]}
            )
    return pd.DataFrame(rows)


def top_ops(profile: dict, n: int = 12):
    """The ops (CPU) or kernels (CUDA) with the most self time over the profiled steps, with
    their category and share of the steps' wall time: the kernel breakdown."""
    import pandas as pd

    total_s = sum(s["wall_s"] for s in profile["steps"])
    df = pd.DataFrame([r for s in profile["steps"] for r in s["ops_self_s"]])
    df = df.groupby(["category", "name"], as_index=False).self_s.sum()
    df["share_of_steps"] = df.self_s / total_s
    return df.sort_values("self_s", ascending=False).head(n).reset_index(drop=True)


def category_shares(profile: dict) -> dict:
    """Each category's share of the profiled steps' total wall time (they sum to 1)."""
    total = sum(s["wall_s"] for s in profile["steps"])
    return {c: sum(s["categories_s"][c] for s in profile["steps"]) / total for c in profile["categories"]}
