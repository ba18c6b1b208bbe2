"""B5's mechanism, measured where inductor's CPU fuser can show it: a chain of pointwise ops with
no reduction, y = gelu(a + b) · c + a, eager against ``torch.compile`` whole and compiled with a
graph break after every op (``torch._dynamo.graph_break()``), all interleaved.

The article (B §2.2) puts compile's gain on inductor's fuser merging small ops into large kernels,
and says many graph breaks make performance fall. The LayerNorm sub-block cannot show the first on
a CPU (inductor's kernel there makes more passes than eager's, ``norm_fusion``); a pointwise chain
can. Eager runs four kernels, 7 tensor reads and 4 writes; inductor one loop, 3 reads (a, b, c) and
1 write. Memory-bound, with each ordinary write also reading its line first
(``bytes_model.dram_traffic_passes``), that is 15 passes against 5: 3× at most. Broken after every
op, each graph is one op again: eager's passes, plus what each graph's call costs (guards, the
compiled function's entry), which a tensor small enough to stay in cache exposes.

Two sizes: ``dram`` (the LN sub-block's DRAM shape: a, b, c and y beyond the cache) and ``small``
(:data:`SMALL_ROWS` rows: a few hundred KiB in cache, where a compiled graph's fixed cost per call,
its guards and entry, is of the order of its work; eager's dispatch is a small part of it).
"""

from __future__ import annotations

import time

EAGER_READS_WRITES = (7, 4)  # add (a, b → t), gelu (t → t), mul (t, c → t), add (t, a → y)
FUSED_READS_WRITES = (3, 1)  # one loop: a, b, c read, y written
SMALL_ROWS = 64  # rows of the cache-resident size (× ln_hidden columns)
IMPLS = ("eager", "compiled", "compiled, break after every op")


def chain(a, b, c):
    """y = gelu(a + b) · c + a, four pointwise ops."""
    import torch.nn.functional as F

    t = F.gelu(a + b)
    return t * c + a


def chain_broken(a, b, c):
    """The same chain with a graph break after every op: under ``torch.compile``, four graphs."""
    import torch._dynamo
    import torch.nn.functional as F

    t = a + b
    torch._dynamo.graph_break()
    t = F.gelu(t)
    torch._dynamo.graph_break()
    t = t * c
    torch._dynamo.graph_break()
    return t + a


def measure_pointwise_chain(tokens: int, hidden: int, *, device: str, dtype, rounds: int) -> dict:
    """Eager, compiled and compiled-with-breaks at the DRAM and the small size, interleaved, each
    gated against eager's output; the compiled graphs counted, the compiled kernel's passes read
    from inductor's generated source (``kernels.inductor_tensor_passes``)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    from mfulab.measure.timing import interleaved
    from mfulab.studies.fusion.compile_bench import compile_counters
    from mfulab.studies.fusion.kernels import inductor_tensor_passes

    gen = torch.Generator(device="cpu").manual_seed(1)
    shapes = {"dram": (tokens, hidden), "small": (SMALL_ROWS, hidden)}
    inputs = {
        k: tuple(torch.randn(*s, generator=gen).to(device, dtype) for _ in range(3))
        for k, s in shapes.items()
    }
    whole, broken = torch.compile(chain, dynamic=False), torch.compile(chain_broken, dynamic=False)
    t0 = time.perf_counter()
    g0 = compile_counters()["graphs_compiled"]
    _, codes = run_and_get_code(whole, *inputs["small"])
    passes = inductor_tensor_passes(codes[-1], SMALL_ROWS * hidden) if codes else None
    whole(*inputs["dram"])
    g1 = compile_counters()["graphs_compiled"]
    for args in inputs.values():
        broken(*args)
    g2 = compile_counters()["graphs_compiled"]
    graphs = {"compiled": (g1 - g0) / len(shapes), "compiled, break after every op": (g2 - g1) / len(shapes)}
    compile_s = time.perf_counter() - t0
    impls = {"eager": chain, "compiled": whole, "compiled, break after every op": broken}
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    rows, variants = [], {}
    for size, args in inputs.items():
        ref = chain(*args)
        for name, fn in impls.items():
            label = f"{size}: {name}"
            variants[label] = lambda fn=fn, args=args: fn(*args)
            rows.append(
                {
                    "size": size,
                    "impl": name,
                    "label": label,
                    "elements": args[0].numel(),
                    "correct": bool(torch.allclose(fn(*args), ref, atol=tol, rtol=tol)),
                }
            )
    timings = interleaved(variants, rounds=rounds, device=device, warmup=1, desc="pointwise chain")
    for r in rows:
        r.update(timings[r["label"]].to_dict(with_samples=True))
    return {
        "hidden": hidden,
        "tokens": tokens,
        "small_rows": SMALL_ROWS,
        "compile_s": compile_s,
        "graphs_per_shape": graphs,
        "compiled_passes": passes,
        "rows": rows,
        "rounds": rounds,
    }


def _traffic(reads_writes) -> int:
    from mfulab.studies.fusion.bytes_model import dram_traffic_passes

    return dram_traffic_passes(reads=reads_writes[0], writes=reads_writes[1])


def chain_table(records):
    """Per size and implementation: the median time with its quartiles, ns per element, the passes
    over memory (eager's and the broken chain's from ATen's ops, the compiled kernel's from its
    generated source) and the speed over eager and over the whole compiled chain, each a ratio of
    medians over paired rounds with its interval (widened by ``ln_dram_ratio_drift`` in DRAM, by
    the course's default at the small size). Empty in records from before the chain."""
    import pandas as pd

    from mfulab.measure.timing import RUN_TO_RUN_DRIFT, compare_timings, summarize

    pc = records.get("pointwise_chain")
    if not pc:
        return pd.DataFrame()
    by = {(r["size"], r["impl"]): r for r in pc["rows"]}
    counted = pc.get("compiled_passes") or {}
    fused = tuple(int(sum(c)) for c in zip(*counted["per_nest"])) if counted.get("per_nest") else None
    passes = {"eager": EAGER_READS_WRITES, "compiled": fused, IMPLS[2]: EAGER_READS_WRITES}
    from mfulab.studies.fusion.bytes_model import copy_roof_factor
    from mfulab.studies.fusion.norm_fusion import roofs

    e = records.get("ln", {}).get("dtype_bytes", 4)
    plateau = roofs(records)["bandwidth_bytes_per_s"] if records.get("bandwidth") else None
    out = []
    for (size, impl), r in by.items():
        drift = (
            records.get("params", {}).get("ln_dram_ratio_drift", RUN_TO_RUN_DRIFT)
            if size == "dram"
            else RUN_TO_RUN_DRIFT
        )
        row = {
            "size": size,
            "impl": impl,
            "elements": r["elements"],
            "median_s": r["median_s"],
            "q1_s": r["q1_s"],
            "q3_s": r["q3_s"],
            "ns_per_element": r["median_s"] / r["elements"] * 1e9,
            "reads_writes": f"{passes[impl][0]} + {passes[impl][1]}" if passes[impl] else None,
            "correct": r["correct"],
        }
        for base in ("eager", "compiled"):
            if impl == base:
                continue
            b = by[(size, base)]
            c = compare_timings(
                summarize(b["times_s"], b["label"], paired=True),
                summarize(r["times_s"], r["label"], paired=True),
                run_to_run_drift=drift,
            )
            row.update({f"vs_{base}": c.ratio, f"vs_{base}_lo": c.ratio_lo, f"vs_{base}_hi": c.ratio_hi})
        if impl == "compiled" and passes["compiled"]:
            row["predicted_vs_eager"] = _traffic(EAGER_READS_WRITES) / _traffic(passes["compiled"])
        if passes[impl] and plateau:  # as the LN table counts it: 1.0 is as fast as DRAM allows
            reads, writes = passes[impl]
            by_passes = (reads + writes) * r["elements"] * e / r["median_s"] / plateau
            row["fraction_of_dram_roof"] = by_passes / copy_roof_factor(reads=reads, writes=writes)
        out.append(row)
    return pd.DataFrame(out)


def fuser_claim(table, records):
    """Article B §2.2 puts compile's gain on two sources, inductor's fuser merging small ops into large
    kernels and shape specialisation; this row takes the first as a mechanism (fewer passes, less
    time), not its share of a model's gain: on the chain in DRAM, shown (a toy regime) when the
    compiled kernel makes fewer passes than eager and its interval of speed over eager lies above 1,
    not shown below 1, inconclusive on this machine otherwise; None without the chain."""
    from mfulab.studykit import verdicts
    from mfulab.studykit.verdicts import Claim

    if table is None or not len(table):
        return None
    t = table.set_index(["size", "impl"])
    c = t.loc[("dram", "compiled")]
    fewer = c.reads_writes is not None and sum(int(x) for x in c.reads_writes.split("+")) < sum(
        EAGER_READS_WRITES
    )
    verdict = (
        "shown"
        if fewer and c.vs_eager_lo > 1
        else "not shown"
        if c.vs_eager_hi < 1
        else "inconclusive on this machine"
    )
    graphs = records["pointwise_chain"]["graphs_per_shape"]
    return Claim(
        "B5",
        "the first of the two sources of compile's gain it names: inductor's fuser merges small ops into "
        "large kernels, which move fewer bytes and take less time",
        "y = gelu(a + b)·c + a on DRAM-sized tensors, eager (4 kernels) against torch.compile, interleaved, "
        "passes counted from ATen's ops and inductor's generated source",
        verdict,
        f"inductor made {graphs['compiled']:.0f} graph, one loop of {c.reads_writes} tensor passes against "
        f"eager's {EAGER_READS_WRITES[0]} + {EAGER_READS_WRITES[1]}; compiled runs {c.vs_eager:.2f}× "
        f"[{c.vs_eager_lo:.2f}, {c.vs_eager_hi:.2f}] eager's speed (DRAM traffic predicts "
        f"{c.predicted_vs_eager:.2f}×)"
        + (
            f"; eager at {t.loc[('dram', 'eager')].fraction_of_dram_roof:.0%} of its DRAM roof, the compiled "
            f"loop at {c.fraction_of_dram_roof:.0%}: "
            + (
                "something besides its bytes (the loop's arithmetic) limits it, so it gains less than the "
                "traffic predicts"
                if c.fraction_of_dram_roof < 0.7
                else "both near their roofs, as the traffic model assumes"
            )
            if "fraction_of_dram_roof" in t
            else ""
        )
        + "; on the LayerNorm sub-block, whose kernel makes more passes than eager's here, the same "
        "compiler is slower (§2)",
        basis=verdicts.TOY,
    )


def graph_break_claim(table, records):
    """Article B §2.2, "with many graph breaks, performance falls instead" (性能反而下降), on the chain
    broken after every op: shown (a toy regime) when, at the small size (in cache, where each
    graph's fixed cost per call shows), the broken chain runs slower than eager (interval below 1) and in DRAM
    slower than the whole compiled chain (the fusion lost); not shown when it is faster than eager at
    the small size or as fast as the whole chain in DRAM; inconclusive on this machine otherwise."""
    from mfulab.studykit import verdicts
    from mfulab.studykit.verdicts import Claim

    if table is None or not len(table):
        return None
    t = table.set_index(["size", "impl"])
    small, dram = t.loc[("small", IMPLS[2])], t.loc[("dram", IMPLS[2])]
    if small.vs_eager_hi < 1 and dram.vs_compiled_hi < 1:
        verdict = "shown"
    elif small.vs_eager_lo > 1 or dram.vs_compiled_lo >= 1:
        verdict = "not shown"
    else:
        verdict = "inconclusive on this machine"
    graphs = records["pointwise_chain"]["graphs_per_shape"]
    whole_small = t.loc[("small", "compiled")]
    n_broken = graphs[IMPLS[2]] or 1
    per_graph_s = (small.median_s - whole_small.median_s) / max(n_broken - 1, 1)
    return Claim(
        "B5",
        "with many graph breaks, compiled performance falls instead (性能反而下降)",
        "the same chain compiled with a graph break after every op, against eager and the whole compiled "
        f"chain, interleaved, at {records['pointwise_chain']['small_rows']} rows (in cache, where a graph's "
        "fixed cost per call shows) and in DRAM",
        verdict,
        f"{graphs[IMPLS[2]]:.0f} graphs per call; at the small size the broken chain runs "
        f"{small.vs_eager:.2f}× "
        f"[{small.vs_eager_lo:.2f}, {small.vs_eager_hi:.2f}] eager's speed (whole compiled "
        f"{whole_small.vs_eager:.2f}×: a compiled call's fixed cost already outweighs the fusion there; "
        f"each further graph adds {per_graph_s * 1e6:.0f} µs); in DRAM {dram.vs_eager:.2f}× eager's and "
        f"{dram.vs_compiled:.2f}× "
        f"[{dram.vs_compiled_lo:.2f}, {dram.vs_compiled_hi:.2f}] the whole compiled chain's",
        basis=verdicts.TOY,
    )
