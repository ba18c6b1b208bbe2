"""Analysis of claim A7 (fused LayerNorm + residual + dropout, "one layer's forward ≈30%
faster"): the sub-block in the memory-bound regime, the dropout RNG's cost, the passes over
memory that explain eager vs compiled, the sub-block's share of a layer measured here, and
Amdahl's bound for the article's 13B layer with its sensitivity.

The verdicts are about the **layer** (the claim's unit), with the threshold the claim's own
"about −30% time" implies at its low end, 1 / (1 − 0.25) = 1.33× (``stated.A7_LAYER_SPEEDUP``).
"""

from __future__ import annotations

from mfulab.measure.timing import RUN_TO_RUN_DRIFT, compare_timings, summarize
from mfulab.studies.fusion import layer_share, onepass
from mfulab.studies.fusion.bytes_model import copy_roof_factor, dram_traffic_passes
from mfulab.studies.fusion.stated import (
    A7_ARTICLE_DEVICE,
    A7_ARTICLE_DTYPE,
    A7_ARTICLE_KERNELS,
    A7_ARTICLE_PRESET,
    A7_ARTICLE_SEQUENCE_PARALLEL,
    A7_ARTICLE_TP,
    A7_ASSUMED_BANDWIDTH_EFFICIENCY,
    A7_ASSUMED_LAUNCH_S,
    A7_ASSUMED_MATMUL_EFFICIENCY,
    A7_LAYER_SPEEDUP,
    A7_SENSITIVITY,
    A7_TOKENS_PER_CALL,
)
from mfulab.units import MIB

EAGER_PASSES_SOURCE = (
    "ATen on CPU: add reads x, a and writes h (3 passes); layer_norm reads h and writes y (2), its "
    "per-row mean/variance and normalisation passes stay in L1; dropout (Dropout.cpp _dropout_impl) "
    "is noise = empty_like(a).bernoulli_(1 − p); noise.div_(1 − p); a * noise: 6 more passes"
)


def eager_cpu_reads_writes(dropout: bool) -> tuple[int, int]:
    """Tensor reads and writes of ATen's eager sub-block on CPU (EAGER_PASSES_SOURCE): add 2 + 1,
    layer_norm 1 + 1; dropout: bernoulli_ 0 + 1, div_ 1 + 1, a * noise 2 + 1."""
    return (3, 2) if not dropout else (6, 5)


def eager_cpu_passes(dropout: bool) -> int:
    """Passes over [tokens, hidden] tensors of ATen's eager sub-block on CPU (EAGER_PASSES_SOURCE)."""
    return sum(eager_cpu_reads_writes(dropout))


def reads_writes(records, impl: str, q: float) -> tuple[int, int] | None:
    """(reads, writes) of tensor passes: ATen's source for eager on CPU, inductor's generated
    source for compiled, the hand-written kernels' source for the C variants; None where not counted."""
    gen = (records["ln"].get("generated") or {}).get(_key(q))
    if impl == "eager" and records["device"] == "cpu":
        return eager_cpu_reads_writes(q > 0)
    if impl in onepass.VARIANTS:
        return onepass.reads_writes(impl)
    if impl == "compiled" and gen:
        return tuple(int(sum(col)) for col in zip(*gen["per_nest"]))
    return None


def _key(q: float) -> str:
    return f"p={q:g}"


def ln_rows(records) -> dict:
    """The sub-block's rows by (shape, impl, p): shape ``dram`` (p = 0, beyond the cache) or
    ``layer`` (the layer's activations, p = 0 and p)."""
    return {(r["shape"], r["impl"], r["dropout_p"]): r for r in records["ln"]["rows"]}


def _times(row):
    import numpy as np

    return np.array(row["times_s"])


def roofs(records) -> dict:
    """The DRAM bandwidth and matmul rates the chapter's roofline and model check use: the copy
    and the layer's MLP matmul timed in the sub-block's own rounds (``norm_fusion_bench.roof_controls``),
    beside the machine's calibration, taken once, earlier. A VM's speed moves between sessions, and
    its generic model name ("AMD EPYC") once let a calibration of another CPU generation stand in
    (18 GB/s and 80 GFLOP/s, while this study's kernels ran at 31 GB/s and 155 GFLOP/s), so a kernel
    is held to the roof measured beside it. The ceiling is the higher of
    the calibrated square matmul and the layer's GEMM: a ceiling no measured matmul beats. Records
    without in-round roofs (before 2026-12-07) fall back on the calibration."""
    calibrated_bw = (records.get("bandwidth") or {}).get("plateau_bytes_per_s")
    calibrated_mm = (records.get("ceiling") or {}).get("best_flops_per_s")
    measured = records["ln"].get("roofs") or {}
    copy, gemm = measured.get("roof: copy"), measured.get("roof: layer matmul")
    layer_mm = gemm["flops"] / gemm["median_s"] if gemm else calibrated_mm
    return {
        "bandwidth_bytes_per_s": copy["moved_bytes"] / copy["median_s"] if copy else calibrated_bw,
        "layer_matmul_flops_per_s": layer_mm,
        "ceiling_flops_per_s": max(x for x in (calibrated_mm, layer_mm, 0.0) if x is not None),
        "calibrated_bandwidth_bytes_per_s": calibrated_bw,
        "calibrated_ceiling_flops_per_s": calibrated_mm,
        "calibrated_at": (records.get("bandwidth") or {}).get("measured_at"),
    }


def roofs_table(records):
    """:func:`roofs` as the chapter prints it: each roof measured in this run's rounds beside the
    calibration's figure and their ratio."""
    import pandas as pd

    r = roofs(records)
    rows = [
        ("DRAM copy bandwidth (GB/s, read + write)", r["bandwidth_bytes_per_s"] / 1e9,
         r["calibrated_bandwidth_bytes_per_s"] / 1e9),
        ("fp32 matmul (GFLOP/s): layer's MLP GEMM here, best square in the calibration",
         r["layer_matmul_flops_per_s"] / 1e9, r["calibrated_ceiling_flops_per_s"] / 1e9),
    ]  # fmt: skip
    df = pd.DataFrame(rows, columns=["roof", "this_run", "calibration"])
    df["this_run_over_calibration"] = df.this_run / df.calibration
    df["calibrated_at"] = r["calibrated_at"]
    return df


def ln_table(records):
    """The sub-block per shape, implementation and p: time, time per element, minimum bytes,
    kernels over the tensor, passes over memory, and the achieved fraction of the measured
    copy bandwidth: with the bytes model's minimum bytes (``fraction_of_measured_bandwidth``),
    with the passes really made, passes × N·e (``fraction_of_bandwidth_by_passes``: counted like
    the copy, up to 1.5 for a DRAM-bound kernel), and against the kernel's own write-allocate
    roof (``fraction_of_dram_roof``: 1.0 is as fast as DRAM allows; ``bytes_model.copy_roof_factor``)."""
    import pandas as pd

    ln = records["ln"]
    df = pd.DataFrame(ln["rows"]).drop(columns=["times_s", "kernel_names", "small_kernels"], errors="ignore")
    df["ns_per_element"] = df.median_s / (df.tokens * ln["hidden"]) * 1e9
    bandwidth = roofs(records)["bandwidth_bytes_per_s"]  # the copy timed in the same rounds
    df["fraction_of_measured_bandwidth"] = df.achieved_bytes_per_s / bandwidth
    rw = [reads_writes(records, r.impl, r.dropout_p) for r in df.itertuples()]
    df["passes_over_memory"] = [sum(x) if x else None for x in rw]
    df["reads_writes"] = [f"{x[0]} + {x[1]}" if x else None for x in rw]
    counted_bytes = df.passes_over_memory.astype(float) * df.tokens * ln["hidden"] * ln["dtype_bytes"]
    df["fraction_of_bandwidth_by_passes"] = counted_bytes / df.median_s / bandwidth
    df["dram_roof_vs_copy"] = [
        copy_roof_factor(reads=x[0], writes=x[1], write_allocate=onepass.write_allocate(records, impl))
        if x
        else None
        for x, impl in zip(rw, df.impl)
    ]
    df["fraction_of_dram_roof"] = df.fraction_of_bandwidth_by_passes / df.dram_roof_vs_copy.astype(float)
    return df


def comparisons(records) -> list[dict]:
    """Every fused variant vs eager at the same shape and p (paired rounds), with the
    bytes-model prediction and, on CPU, the prediction from the passes actually made; the one-pass
    kernel's controls are compared with each other in ``a7_controls``, not here."""
    ln, rows = records["ln"], ln_rows(records)
    rng = rng_table(records)
    eager_rng = rng[rng.impl == "eager"].dropout_share_of_sub_block if len(rng) else []
    rng_share = float(eager_rng.iloc[0]) if len(eager_rng) else None
    out = []
    for (where, impl, q), r in rows.items():
        if impl == "eager" or impl in onepass.CONTROLS:  # the controls: a7_controls, against each other
            continue
        base = rows[(where, "eager", q)]
        # in DRAM the ratio drifts between fresh runs far more than the default (params.py)
        dram_drift = records.get("params", {}).get("ln_dram_ratio_drift", RUN_TO_RUN_DRIFT)
        drift = {"run_to_run_drift": dram_drift} if where == "dram" else {}
        c = compare_timings(
            summarize(base["times_s"], base["label"], paired=True),
            summarize(r["times_s"], r["label"], paired=True),
            **drift,
        )
        mine, theirs = reads_writes(records, impl, q), reads_writes(records, "eager", q)
        by_passes = sum(theirs) / sum(mine) if mine and theirs else None
        by_traffic = (
            dram_traffic_passes(reads=theirs[0], writes=theirs[1])
            / dram_traffic_passes(
                reads=mine[0], writes=mine[1], write_allocate=onepass.write_allocate(records, impl)
            )
            if mine and theirs
            else None
        )
        out.append(
            {
                "shape": where,
                "dropout_p": q,
                **c.to_dict(),
                "predicted": ln["predicted"][_key(q)],
                "predicted_by_passes": by_passes,
                "predicted_by_traffic": by_traffic,
                # with dropout on and its RNG most of eager's time, the sub-block is not memory-bound
                "eager_rng_share": rng_share if q > 0 else None,
                "bytes_model_applies": not (q > 0 and rng_share is not None and rng_share > RNG_BOUND_SHARE),
            }
        )
    return out


# above this share of the eager sub-block's time spent drawing dropout's random numbers, the
# sub-block is RNG-bound, not memory-bound, and the bytes model does not describe it
RNG_BOUND_SHARE = 0.5


def rng_table(records):
    """Dropout's cost at the layer's shape: the sub-block at p minus the same at p = 0, per
    implementation and round (eager: ATen's bernoulli_ + div_ + mul; compiled: inductor's
    per-element Philox draw), next to the whole p = 0 sub-block per element in DRAM."""
    import numpy as np
    import pandas as pd

    ln, rows = records["ln"], ln_rows(records)
    q = ln["dropout_p"]
    numel = ln["layer"]["tokens"] * ln["hidden"]
    out = []
    for impl in ("eager", "compiled"):
        if ("layer", impl, q) not in rows:
            continue
        with_p, without = _times(rows[("layer", impl, q)]), _times(rows[("layer", impl, 0.0)])
        dram = rows.get(("dram", impl, 0.0))
        rng_s = float(np.median(with_p - without))
        out.append(
            {
                "impl": impl,
                "sub_block_p0_s": float(np.median(without)),
                f"sub_block_p{q:g}_s": float(np.median(with_p)),
                "dropout_s": rng_s,
                "dropout_share_of_sub_block": rng_s / float(np.median(with_p)),
                "dropout_ns_per_element": rng_s / numel * 1e9,
                "dram_p0_sub_block_ns_per_element": (
                    dram["median_s"] / (dram["tokens"] * ln["hidden"]) * 1e9 if dram else None
                ),
            }
        )
    return pd.DataFrame(out)


def article_sensitivity(measured_launch_s: float | None = None):
    """Amdahl's bound for the article's 13B layer on its cards, over the assumptions, with a
    launch-cost row at ``measured_launch_s`` (this machine's eager dispatch per op) when given."""
    launches = [("launch per kernel", x) for x in A7_SENSITIVITY["launch_s"]]
    if measured_launch_s:
        launches.append(("launch per kernel (this machine's eager dispatch)", measured_launch_s))
    sens = {k: v for k, v in A7_SENSITIVITY.items() if k != "launch_s"}
    return layer_share.sensitivity(
        preset_name=A7_ARTICLE_PRESET,
        dtype=A7_ARTICLE_DTYPE,
        device=A7_ARTICLE_DEVICE,
        matmul_efficiency=A7_ASSUMED_MATMUL_EFFICIENCY,
        bandwidth_efficiency=A7_ASSUMED_BANDWIDTH_EFFICIENCY,
        target_speedup=A7_LAYER_SPEEDUP,
        tp=A7_ARTICLE_TP,
        sequence_parallel=A7_ARTICLE_SEQUENCE_PARALLEL,
        launch_s=A7_ASSUMED_LAUNCH_S,
        kernels=A7_ARTICLE_KERNELS,
        tokens_per_call=A7_TOKENS_PER_CALL,
        launches=launches,
        **sens,
    )


def measured_launch_s(records) -> float | None:
    """This machine's cost of one eager op dispatch (``records["launch"]``, the median over its
    timed rounds; None in records from before it was measured)."""
    launch = records.get("launch")
    return launch["per_op_s"] if launch else None


DRAM_LLC_MULTIPLE = 4  # a working set this many times the last-level cache is served by DRAM


def cache_bytes(ln: dict) -> float | None:
    """The cache the sub-block was sized against: the larger of the last-level cache the system
    reports and the calibration's cache floor (records from before the floor: the LLC)."""
    return ln.get("cache_bytes") or ln.get("last_level_cache_bytes")


def dram_served(working_set_bytes: float, llc_bytes: float | None) -> bool:
    """Whether a working set is beyond the last-level cache by :data:`DRAM_LLC_MULTIPLE`
    (unknown cache: assumed so)."""
    return not llc_bytes or working_set_bytes >= DRAM_LLC_MULTIPLE * llc_bytes


def regime(records) -> str:
    """Whether the DRAM run's working set (x, a, h, y) is beyond the last-level cache, as a
    sentence with the numbers."""
    ln = records["ln"]
    ws, llc, cache = ln["working_set_bytes"], ln.get("last_level_cache_bytes"), cache_bytes(ln)
    shape = f"[{ln['tokens']}, {ln['hidden']}] {ln['dtype']}"
    text = f"The sub-block's working set (x, a, h, y) is {ws / MIB:.0f} MiB ({shape})"
    if not cache:
        return text + "."
    if llc and cache > llc:
        text += (
            f", {ws / cache:.1f}× the {cache / MIB:.0f} MiB the calibration treats as cache (the "
            f"system reports a {llc / MIB:.0f} MiB last-level cache, but copies on this machine stay "
            "partly cache-served well beyond it): "
        )
    else:
        text += f", {ws / cache:.1f}× the {cache / MIB:.0f} MiB last-level cache: "
    text += (
        "DRAM serves it, the memory-bound regime of the bytes model."
        if dram_served(ws, cache)
        else f"**not** beyond the cache (under {DRAM_LLC_MULTIPLE}×): a kernel can beat the DRAM "
        "bandwidth here."
    )
    return text + (f" ({ln['note']})" if ln.get("note") else "")


def compile_sentence(records) -> str:
    """How long compiling the sub-block's three static graphs took, and whether inductor's
    kernels came from its on-disk cache (warm: not the cold compile a user pays once)."""
    ln = records["ln"]
    cache = ln.get("compile_cache")
    text = f"torch.compile of the sub-block (three static graphs) took {ln['compile_s']:.1f} s"
    if not cache:
        return text + "."
    hits, misses = cache["cache_hits"], cache["cache_misses"]
    text += f", {cache['state']} inductor cache ({hits} of {hits + misses} graphs loaded from it)"
    return text + (
        ": code generation and the C++ compiler were skipped." if cache["state"] == "warm" else "."
    )


def kernel_sentence(records) -> str:
    """What fusion did to kernels and passes, from the records (the text of notebook 03 §2)."""
    ln, rows = records["ln"], ln_rows(records)
    parts = []
    for q in sorted({r["dropout_p"] for r in ln["rows"]}):
        e, c = rows.get(("layer", "eager", q)), rows.get(("layer", "compiled", q))
        if not (e and c):
            continue
        s = f"at p = {q:g}: {e['kernels']} kernels over the tensor → {c['kernels']}"
        if c.get("small_kernels"):
            s += f" (+ {', '.join(c['small_kernels'])}, the seed of its random numbers)"
        gen = (ln.get("generated") or {}).get(_key(q))
        if gen and records["device"] == "cpu":
            s += (
                f", but the compiled kernel has {gen['tensor_loop_nests']} loop nests over the tensor, "
                f"{gen['tensor_passes']} passes over memory against eager's {eager_cpu_passes(q > 0)}"
            )
        parts.append(s)
    return "Kernels " + "; ".join(parts) + "." if parts else ""


def compiled_vs_eager_p0(records) -> str:
    """Why the compiled sub-block is slower than eager at p = 0 on a CPU, with this run's
    numbers: the passes over memory of each, their ratio, and the measured ratio."""
    ln = records["ln"]
    gen = (ln.get("generated") or {}).get("p=0")
    comp = {(c["shape"], c["dropout_p"]): c for c in comparisons(records) if "compiled" in c["candidate"]}
    comp = comp.get(("dram", 0.0))
    if not gen or not comp or records["device"] != "cpu":
        return ""
    (er, ew), (cr, cw) = eager_cpu_reads_writes(False), reads_writes(records, "compiled", 0.0)
    nests = ", ".join(
        f"{a} read{'s' if a != 1 else ''} + {b} write{'s' if b != 1 else ''}" for a, b in gen["per_nest"]
    )
    return (
        f"Inductor's C++ kernel for this graph is one function with {gen['loop_nests']} loop nests "
        f"({gen['tensor_loop_nests']} over the whole tensor; tensor-sized accesses per nest: {nests}). "
        f"Each nest runs over all rows before the next starts, so h goes through memory again for the "
        f"mean, the variance and the normalisation: **{gen['tensor_passes']} passes** over [{ln['tokens']}, "
        f"{ln['hidden']}] tensors. Eager makes **{eager_cpu_passes(False)}**: the add (x, a → h) and ATen's "
        f"layer_norm, whose per-row moments and normalisation run while the row sits in L1 (h → y). "
        f"Memory-bound, the time ratio is the ratio of DRAM traffic: {comp['predicted_by_passes']:.2f}× "
        f"by passes, **{comp['predicted_by_traffic']:.2f}×** counting each write twice (a cached store first "
        f"reads its line: write-allocate; reads + writes: eager {er} + {ew}, compiled {cr} + {cw}); "
        f"measured in DRAM {comp['ratio']:.2f}× [{comp['ratio_lo']:.2f}, {comp['ratio_hi']:.2f}] "
        "(compiled vs eager). "
        f"The bytes model's fused kernel (one loop, 4 passes: {comp['predicted']:.2f}× faster) is not what "
        "inductor generated here. This is inductor's C++ (CPU) backend; on a GPU its Triton backend "
        "writes a LayerNorm over a row that fits in one block as a persistent reduction, the row kept "
        "in registers, one pass, so the compiled-slower-than-eager result is not expected there (a "
        "prediction from inductor's code generation, not measured: no GPU ran this chapter)."
    )
