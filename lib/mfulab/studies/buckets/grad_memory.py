"""B6's memory side of ``gradient_as_bucket_view``: the gradient memory it saves, counted from
the live tensors on one rank, beside the analytic figure.

PyTorch's ``DistributedDataParallel`` docs: with ``gradient_as_bucket_view=True`` "gradients
will be views pointing to different offsets of allreduce communication buckets. This can
reduce peak memory usage, where the saved memory size will be equal to the total gradients
size" (after the first iteration). Without it DDP holds every gradient twice: once in
``.grad`` and once in its flat buckets (the all-reduce buffers).

The count (:func:`storage_accounting`, on every rank of the first job): one DDP per setting at
``flags_bucket_cap_mb``, stepped until its buckets are rebuilt and once more, with a comm hook
(PyTorch's own ``allreduce_hook``) that records the storage of every bucket buffer it is
handed; then the distinct storages behind the parameters' ``.grad``. *Separate gradient
bytes* are those of gradient storages that are not bucket buffers. Saved = (buckets +
separate gradients) of the default flags − the same with the bucket view; the analytic
saving is the gradient bytes, i.e. the parameter bytes (fp32 here).

The count is taken after the backward, where an optimizer step reads the gradients. The study's
timed step sets ``.grad`` to ``None`` between steps (``zero_grad(set_to_none=True)``): there
autograd allocates each gradient afresh in the backward and DDP copies it into its bucket view
at once, so the saving holds after the backward, and during it only one freshly allocated
gradient lives at a time. A per-rank RSS would not resolve the few MB saved here: the process holds a
dozen DDP models and the torch runtime (hundreds of MB).

The copy itself is counted too: the last step runs under ``torch.profiler`` and the bytes of every
``aten::copy_`` in it (forward, backward and DDP's reducer, whose copies into and out of the
buckets dispatch as ``aten::copy_``) are summed per setting; the flag's saving is the difference.
"""

from __future__ import annotations

from mfulab.units import MB

SETTINGS = {"default": False, "bucket_view": True}


def storage_accounting(build, x, *, bucket_cap_mb: float, device: str) -> dict:
    """{setting: bytes} for the default flags and ``gradient_as_bucket_view``: parameter,
    gradient, bucket-buffer and separate-gradient storage bytes (see the module docstring).
    ``build()`` returns a fresh model; ``x`` is this rank's input."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    for name, view in SETTINGS.items():
        ddp = DDP(build().to(device), bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=view)
        buffers = {}

        def hook(state, bucket, buffers=buffers):
            storage = bucket.buffer().untyped_storage()
            buffers[storage.data_ptr()] = storage.nbytes()
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, hook)

        def step(ddp=ddp):
            torch.tanh(ddp(x)).pow(2).mean().backward()

        for i in range(4):  # the buckets are rebuilt after the first iterations; count the last
            buffers.clear()
            ddp.zero_grad(set_to_none=True)
            element_bytes = next(ddp.module.parameters()).element_size()
            copies = _copies_in(step, profiled=i == 3, element_bytes=element_bytes)
        grads = {}
        for p in ddp.module.parameters():
            storage = p.grad.untyped_storage()
            grads[storage.data_ptr()] = storage.nbytes()
        out[name] = {
            "param_bytes": sum(p.numel() * p.element_size() for p in ddp.module.parameters()),
            "grad_bytes": sum(p.grad.numel() * p.grad.element_size() for p in ddp.module.parameters()),
            "bucket_bytes": sum(buffers.values()),
            "grad_storages": len(grads),
            "separate_grad_bytes": sum(n for ptr, n in grads.items() if ptr not in buffers),
            **copies,
        }
        del ddp
    return out


def _copies_in(step, *, profiled: bool, element_bytes: int) -> dict:
    """Run ``step``; where ``profiled``, under the profiler, with the calls and bytes of the
    ``aten::copy_`` ops in it (the destination's elements × ``element_bytes``: the model's
    dtype, that of its activations and gradients)."""
    from torch.profiler import ProfilerActivity, profile

    if not profiled:
        step()
        return {}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    calls, copied = 0, 0
    for e in prof.events():
        if e.name != "aten::copy_":
            continue
        shape = e.input_shapes[0] if e.input_shapes else []
        numel = 1
        for n in shape:
            numel *= n
        calls, copied = calls + 1, copied + numel * element_bytes
    return {"copy_calls": calls, "copy_bytes": copied}


# the profiler's names of the destination's dtype (record_shapes), in bytes per element
ELEMENT_BYTES = {
    "float": 4,
    "double": 8,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "long int": 8,
    "int": 4,
    "bool": 1,
}


def memory_table(records):
    """Per setting: the bytes of :func:`storage_accounting` (rank 0), the gradient memory
    (buckets + separate gradients), and the saving against the default flags, measured and
    analytic (= the parameter bytes)."""
    import pandas as pd

    counts = records["ddp"].get("grad_memory")
    if not counts:
        return pd.DataFrame()
    base = counts["default"]["bucket_bytes"] + counts["default"]["separate_grad_bytes"]
    rows = []
    for name, c in counts.items():
        total = c["bucket_bytes"] + c["separate_grad_bytes"]
        rows.append(
            {
                "setting": "gradient_as_bucket_view" if name == "bucket_view" else "default flags",
                **c,
                "gradient_memory_bytes": total,
                "saved_bytes": base - total,
                "copy_bytes_avoided": counts["default"].get("copy_bytes", 0) - c.get("copy_bytes", 0)
                if "copy_bytes" in c
                else None,
                "analytic_saved_bytes": c["param_bytes"] if name == "bucket_view" else 0,
            }
        )
    return pd.DataFrame(rows)


def saved_text(records) -> str:
    """One clause for B6's gradient_as_bucket_view row: the memory measured and analytic."""
    t = memory_table(records)
    if t.empty:
        return ""
    m = t.set_index("setting")
    base, view = m.loc["default flags"], m.loc["gradient_as_bucket_view"]
    return (
        f"; memory (its documented benefit): gradients in {base.grad_storages} storages of their own "
        f"({base.separate_grad_bytes / MB:.2f} MB) beside the buckets with the default flags, "
        f"{view.separate_grad_bytes / MB:.2f} MB of their own with the flag; "
        f"{view.saved_bytes / MB:.2f} MB of gradient storage saved per rank, counted (analytic: the "
        f"gradients' bytes, {view.analytic_saved_bytes / MB:.2f} MB)"
    )


# The counted saving is taken as equal to the analytic one within this fraction of it
# (storage sizes are exact byte counts; the margin only absorbs a bucket's alignment padding).
MEMORY_MATCH_REL_TOL = 0.01


def memory_verdict(records) -> tuple[str, str]:
    """(verdict, reason) for "gradient_as_bucket_view saves a gradient copy", on memory:
    confirmed when the counted saving equals the analytic one (the gradients' bytes) within
    :data:`MEMORY_MATCH_REL_TOL`, refuted when it falls short of it, inconclusive when it
    exceeds it (something besides the copy was freed); not checkable without a count."""
    t = memory_table(records)
    if t.empty:
        return "not checkable", "; no gradient-memory count in these records"
    view = t.set_index("setting").loc["gradient_as_bucket_view"]
    saved, analytic = float(view.saved_bytes), float(view.analytic_saved_bytes)
    if abs(saved - analytic) <= MEMORY_MATCH_REL_TOL * analytic:
        return "confirmed", f": equal within {MEMORY_MATCH_REL_TOL:.0%} — the copy is gone"
    if saved < analytic:
        return "refuted", f": short of the gradients' size by more than {MEMORY_MATCH_REL_TOL:.0%}"
    return "inconclusive on this machine", ": more than the gradients' size — something else was freed"


def copy_verdict(records, copies_avoided: int) -> tuple[str, str] | None:
    """(verdict, evidence) for "gradient_as_bucket_view saves a gradient copy", on the copy: the
    ``aten::copy_`` bytes of one profiled step with the default flags minus those with the flag,
    against ``copies_avoided`` copies of the gradients' bytes: confirmed (an exact count) when
    equal within :data:`MEMORY_MATCH_REL_TOL`, refuted when fewer bytes were spared, inconclusive
    when more; None in records without the count."""
    t = memory_table(records)
    if t.empty or "copy_bytes" not in t or t.copy_bytes.isna().any():
        return None
    m = t.set_index("setting")
    base, view = m.loc["default flags"], m.loc["gradient_as_bucket_view"]
    avoided, expected = float(view.copy_bytes_avoided), copies_avoided * float(view.grad_bytes)
    if abs(avoided - expected) <= MEMORY_MATCH_REL_TOL * expected:
        verdict = "confirmed"
    elif avoided < expected:
        verdict = "refuted"
    else:
        verdict = "inconclusive on this machine"
    return verdict, (
        f"aten::copy_ in one profiled step on rank 0: {int(base.copy_calls)} calls, "
        f"{base.copy_bytes / MB:.2f} MB with the default flags; {int(view.copy_calls)} calls, "
        f"{view.copy_bytes / MB:.2f} MB with the flag: {avoided / MB:.2f} MB fewer, "
        f"{avoided / float(view.grad_bytes):.2f}× the gradients' {float(view.grad_bytes) / MB:.2f} MB "
        f"(expected: {copies_avoided} copy of each gradient)"
    )


def copy_row(records, cap: float, copies_avoided: int) -> tuple[str, str, str]:
    """(verdict, method, evidence) of B6's gradient_as_bucket_view row: on the copy
    (:func:`copy_verdict`), the memory beside it; on memory alone in records without the count."""
    by_copy = copy_verdict(records, copies_avoided)
    if by_copy is None:
        verdict, why = memory_verdict(records)
        method = (
            f"gradient storage on one rank after a step at bucket_cap_mb={cap:g}, with and without the "
            "flag, against the analytic saving (the gradients' bytes)"
        )
        return verdict, method, (saved_text(records) + why).lstrip("; ")
    verdict, evidence = by_copy
    method = (
        f"the bytes aten::copy_ moves in one DDP step on one rank at bucket_cap_mb={cap:g} (profiled), "
        f"with and without the flag, against {copies_avoided} copy of the gradients (reducer.cpp)"
    )
    return verdict, method, evidence + saved_text(records)
