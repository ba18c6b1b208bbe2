"""Analysis of the ``fusion`` study: the roofline points, attention memory scaling, the
kernel SDPA picks, model-level ``torch.compile`` and matmul dtypes as tables, A8 at the
article's scale, the claims table (A7, A8, B3, B4, B5) and the headline metrics. A7's
analysis (the sub-block, its RNG, its share of a layer, Amdahl) is in ``norm_fusion``.

Every function reads the plain records of ``bench.measure`` (here or from another machine)
or the articles' stated inputs in ``stated``; claim verdicts are computed from the numbers.
"""

from __future__ import annotations

from mfulab.analytic import devices
from mfulab.analytic.config import ATTENTION_IMPLS
from mfulab.results import run_identity
from mfulab.studies.fusion import ln_at_scale, norm_fusion, sdpa_rules
from mfulab.studies.fusion.bytes_model import ln_residual_dropout_flops
from mfulab.studies.fusion.norm_fusion import dram_served
from mfulab.studies.fusion.stated import A8_STATED, B4_DATASHEET_DEVICE, B5_STATED_SPEEDUP
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def a8_article_scale() -> dict:
    """A8 at the article's setting read as Korthikanti's Table 2 prints it (``ln_at_scale``)."""
    return ln_at_scale.article_scale()


def roofline_points(records):
    """Each measured kernel placed on this device's roofline (FLOP/s vs FLOPs per byte), with
    two byte counts for the sub-block: the passes over memory it really makes (the counts of
    ``norm_fusion.ln_table``: ATen's source for eager on CPU, inductor's generated source for
    compiled; passes × N·e bytes) and the bytes model's minimum (``bytes_model``: 5·N·e eager,
    4·N·e fused at p = 0). ``intensity_flops_per_byte`` is the counted one where known."""
    import pandas as pd

    from mfulab.measure.timing import torch_dtype

    ln = records["ln"]
    llc = ln.get("last_level_cache_bytes")
    rows = []
    for r in norm_fusion.ln_table(records).itertuples():
        dropout = r.dropout_p > 0
        fl = ln_residual_dropout_flops(tokens=r.tokens, hidden=ln["hidden"], dropout=dropout)
        counted = r.passes_over_memory
        known = pd.notna(counted)
        counted_bytes = counted * r.tokens * ln["hidden"] * ln["dtype_bytes"] if known else None
        model_intensity = fl / r.min_bytes
        rows.append(
            {
                "kernel": f"LN+residual{'+dropout' if dropout else ''} ({r.impl}, {r.shape})",
                "passes_counted": counted if known else None,
                "intensity_flops_per_byte": fl / counted_bytes if counted_bytes else model_intensity,
                "intensity_bytes_model": model_intensity,
                "achieved_flops_per_s": fl / r.median_s,
                "dram_roof_vs_copy": r.dram_roof_vs_copy,
                "cache_resident": not dram_served(4 * r.tokens * ln["hidden"] * ln["dtype_bytes"], llc),
            }
        )
    best = max(records["ceiling"]["rows"], key=lambda r: r["achieved_flops_per_s"])
    element_bytes = torch_dtype(records["ceiling"]["dtype"]).itemsize
    matmul_intensity = best["flops"] / (3 * best["size"] ** 2 * element_bytes)
    rows.append(
        {
            "kernel": f"matmul {best['size']}³",
            "passes_counted": None,
            "intensity_flops_per_byte": matmul_intensity,
            "intensity_bytes_model": matmul_intensity,
            "achieved_flops_per_s": best["achieved_flops_per_s"],
            "dram_roof_vs_copy": None,
            "cache_resident": False,
        }
    )
    return pd.DataFrame(rows)


def ln_fusion_speedup_largest_p(records):
    """The compiled-vs-eager comparison of the sub-block at the largest dropout p (None: none)."""
    comps = [c for c in norm_fusion.comparisons(records) if "compiled" in c["candidate"]]
    return max(comps, key=lambda c: c["dropout_p"]) if comps else None


def attention_table(records):
    import pandas as pd

    return pd.DataFrame(records["attention"]["rows"]).drop(columns=["times_s"])


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 2 for O(n²), 1 for O(n)."""
    import numpy as np

    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


def attention_slopes(records) -> dict:
    df = attention_table(records)
    out = {}
    for impl in ATTENTION_IMPLS:
        d = df[(df.impl == impl) & df.saved_bytes.notna()]
        if len(d) >= 2:
            out[f"{impl}_saved_bytes_slope"] = loglog_slope(d.seq_len, d.saved_bytes)
            out[f"{impl}_time_slope"] = loglog_slope(d.seq_len, d.median_s)
    return out


def compile_table(records):
    import pandas as pd

    rows = pd.DataFrame(records["compile"]["rows"]).drop(columns=["times_s"])
    comps = {c["candidate"]: c for c in records["compile"]["comparisons"]}
    rows["speedup_vs_eager"] = [comps[v]["ratio"] if v in comps else 1.0 for v in rows.variant]
    rows["speedup_lo"] = [comps[v]["ratio_lo"] if v in comps else None for v in rows.variant]
    rows["speedup_hi"] = [comps[v]["ratio_hi"] if v in comps else None for v in rows.variant]
    rows["verdict"] = [comps[v]["verdict"] if v in comps else None for v in rows.variant]
    return rows


def dtype_table(records):
    import pandas as pd

    rows = []
    base = records["matmul_dtypes"]["fp32"]["best_flops_per_s"]
    for d, v in records["matmul_dtypes"].items():
        rows.append(
            {
                "dtype": d,
                "best_flops_per_s": v["best_flops_per_s"],
                "best_size": v["best_size"],
                "vs_fp32": v["best_flops_per_s"] / base,
            }
        )
    sheet = devices.device_spec(B4_DATASHEET_DEVICE).flops_per_s
    rows.append(
        {
            "dtype": "A100 datasheet tf32 / fp32",
            "best_flops_per_s": None,
            "best_size": None,
            "vs_fp32": sheet["tf32"] / sheet["fp32"],
        }
    )
    return pd.DataFrame(rows)


def _claims_a8(records) -> list[Claim]:
    slopes = attention_slopes(records)
    if "naive_saved_bytes_slope" not in slopes or "sdpa_saved_bytes_slope" not in slopes:
        return []
    ok = slopes["naive_saved_bytes_slope"] > 1.7 and slopes["sdpa_saved_bytes_slope"] < 1.3
    a8 = a8_article_scale()
    sens = ln_at_scale.sensitivity()
    memory_cut, step_cut = A8_STATED["activation_reduction"], A8_STATED["step_time_reduction"]
    return [
        Claim(
            "A8",
            "fused (flash) attention turns activation memory O(n²) into O(n)",
            "exact bytes saved for backward vs sequence length, naive vs SDPA (log-log slope)",
            verdicts.verdict_from_agreement(ok),
            f"slopes: naive {slopes['naive_saved_bytes_slope']:.2f}, SDPA "
            f"{slopes['sdpa_saved_bytes_slope']:.2f} "
            f"(thresholds > 1.7 and < 1.3)",
            basis=verdicts.CONSTRUCTION,
        ),
        Claim(
            "A8",
            f"7B, seq 4096, batch 16: activation memory −{memory_cut:.0%}, step time −{step_cut:.0%}",
            "Korthikanti Table 2 with and without the a·s² terms, over the readings of the unstated "
            "setup (sensitivity table); attention share of FLOPs",
            "analytic only",
            f"activations per layer −{a8['activation_reduction']:.0%} by Table 2 as printed; "
            f"over the readings of the sensitivity table ({ln_at_scale.sensitivity_sentence(sens)}): "
            + (
                f"never a smaller cut than the stated −{memory_cut:.0%}"
                if sens.reduction.min() >= memory_cut
                else f"some readings give less than the stated −{memory_cut:.0%}"
            )
            + "; which reading applies depends on the article's unstated setup. "
            f"The −{step_cut:.0%} step time cannot be derived from memory alone: it needs naive attention "
            f"(its matmuls {a8['attention_flops_share_palm']:.0%} of the model FLOPs at this length, plus "
            f"its memory-bound softmax and masking over a·s² elements) to take ≥ {step_cut:.0%} of the step",
            basis=verdicts.ANALYSIS,
        ),
    ]


def _claim_b4(records) -> Claim:
    dt = dtype_table(records).set_index("dtype")
    claim = "TF32 doubles matmul throughput on A100-class GPUs"
    sheet_ratio = dt.loc["A100 datasheet tf32 / fp32", "vs_fp32"]
    if "tf32" in dt.index:
        ratio = dt.loc["tf32", "vs_fp32"]
        return Claim(
            "B4",
            claim,
            "matmul ceiling tf32 vs fp32 on this GPU",
            verdicts.verdict_from_agreement(ratio >= 1.8),
            f"tf32/fp32 = {ratio:.2f}×; bf16/fp32 = {dt.loc['bf16', 'vs_fp32']:.2f}×; "
            f"A100 datasheet tf32/fp32 = {sheet_ratio:.0f}×",
            basis=verdicts.MEASURED,
        )
    return Claim(
        "B4",
        claim,
        "matmul ceiling fp32 vs bf16 on this CPU; TF32 exists only on NVIDIA tensor cores",
        "not checkable",
        "no TF32 on a CPU, so the claim's quantity does not exist here; "
        f"bf16/fp32 here = {dt.loc['bf16', 'vs_fp32']:.2f}×; "
        f"the A100 datasheet gives tf32/fp32 = {sheet_ratio:.0f}× (dense), more than double",
        basis=verdicts.MEASURED,
    )


def compile_first_call(row) -> str:
    """What a compiled variant's first call measured, as words: the graphs, the inductor cache
    state (warm: every kernel loaded from the on-disk cache), and the cold compile when measured."""
    hits, misses = int(row.cache_hits), int(row.cache_misses)
    graphs = int(row.graphs_compiled)
    text = (
        f"first call {row.first_call_s:.1f} s, {graphs} dynamo graph{'s' if graphs != 1 else ''}, "
        f"{row.cache} inductor cache ({hits} of {hits + misses} inductor graphs loaded from it)"
    )
    cold = getattr(row, "cold_first_call_s", None)
    if cold is not None and cold == cold:
        return text + f"; cold (fresh process, empty cache) {cold:.1f} s"
    if row.cache == "warm":
        return text + ": a warm-cache compile, not the cold compile a user pays once"
    return text


def _claim_b5(records) -> list[Claim]:
    """Measured on every device; a verdict only on CUDA: the claim is about an 8B model's step
    on GPUs, and a CPU's small model is not its regime (never refuted or confirmed by it)."""
    ct = compile_table(records).set_index("variant")
    if "compiled (default)" not in ct.index:
        return []
    r = ct.loc["compiled (default)"]
    breaks = "no graph break" if int(r.graphs_compiled) == 1 else f"{int(r.graphs_compiled)} graphs"
    gain = f"{breaks}; {compile_first_call(r)}"
    if "compiled, graph break per block" in ct.index:
        g = ct.loc["compiled, graph break per block"]
        gain += (
            f"; with a forced break in every block ({int(g.breaks_taken_per_step)} taken per step, "
            f"{int(g.graphs_compiled)} graphs) {g.speedup_vs_eager:.2f}× "
            f"[{g.speedup_lo:.2f}, {g.speedup_hi:.2f}]"
        )
    recompiled = records["compile"].get("recompiled_during_timing")
    if recompiled:
        gain += f"; {recompiled} graph(s) recompiled during the timed rounds"
    comp = records["compile"]
    on_gpu = records["device"] == "cuda"
    verdict = (
        verdicts.verdict_from_interval(r.speedup_lo, r.speedup_hi, threshold=B5_STATED_SPEEDUP[0])
        if on_gpu
        else "inconclusive on this machine"
    )
    why = "" if on_gpu else "; the claim's regime is an 8B model's step on GPUs, not a small model on a CPU"
    return [
        Claim(
            "B5",
            "torch.compile cuts step time by 8–12%; graph breaks erase the gain",
            f"training step of {comp['preset']} (seq {comp['seq_len']}, micro-batch {comp['micro_batch']}), "
            f"eager vs compiled, {int(r.n)} interleaved rounds",
            verdict,
            f"speed-up {r.speedup_vs_eager:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}] "
            f"(threshold {B5_STATED_SPEEDUP[0]:.2f}×); {gain}{why}",
            basis=verdicts.TOY,
        )
    ]


def sdpa_cases_table(records):
    """The kernel SDPA picked on this device per input case (``kernels.sdpa_dispatch_cases``)."""
    import pandas as pd

    return pd.DataFrame(records["attention"].get("dispatch_cases", []))


def cuda_flash_reasons(records) -> list[str]:
    """Why this run's attention inputs would not get CUDA's flash kernel (``sdpa_rules``)."""
    att = records["attention"]
    cap = att.get("cuda_capability")
    return sdpa_rules.cuda_flash_ineligible(
        dtype=att["dtype"],
        head_dim=att.get("head_dim", records["params"]["attn_head_dim"]),
        sm=tuple(cap) if cap else (8, 0),
    )


def _claims_b3(records) -> list[Claim]:
    """Row 1: the kernel SDPA picked on this device (a fact of this device). Row 2 on a CPU:
    what CUDA would pick cannot be observed here; PyTorch's rules say when flash is not eligible."""
    att = records["attention"]
    backend = att["backend"]
    fused = backend is not None and any(k in backend for k in ("flash", "efficient", "cudnn"))
    where = "this GPU" if records["device"] == "cuda" else "this CPU"
    cases = "; ".join(f"{c['case']}: {c['backend'].split(' (')[0]}" for c in att.get("dispatch_cases", []))
    rows = [
        Claim(
            "B3",
            f"scaled_dot_product_attention picks a flash / memory-efficient kernel by itself (on {where})",
            f"the aten kernel SDPA dispatched to on {where} ({att['dtype']}, causal, no mask tensor) and for "
            "inputs that change the choice",
            verdicts.verdict_from_agreement(fused),
            f"dispatched to {backend}" + (f"; {cases}" if cases else ""),
            basis=verdicts.CONSTRUCTION,
        )
    ]
    if records["device"] != "cuda":
        reasons = cuda_flash_reasons(records)
        rows.append(
            Claim(
                "B3",
                "… and on CUDA GPUs (the claim's hardware)",
                "PyTorch's CUDA flash eligibility rules (sdp_utils.cpp) applied to this run's inputs "
                "on an A100",
                "not checkable",
                "a CPU cannot show CUDA's dispatch; flash is not eligible for fp32 inputs, an explicit "
                f"attn_mask, head dims that differ or exceed {sdpa_rules.FLASH_MAX_HEAD_DIM}, GPUs before "
                "sm80, is_causal with unequal lengths, some head dims in training on sm86/89; this run's "
                "inputs on an A100: "
                + ("; ".join(reasons) + " → memory-efficient or math" if reasons else "eligible"),
                basis=verdicts.CONSTRUCTION,
            )
        )
    return rows


def claims(records) -> list[Claim]:
    """The claims table of this study (A7, A8, B3, B4, B5), verdicts computed from numbers."""
    out = norm_fusion.claims_a7(records) + _claims_a8(records) + _claims_b3(records)
    out.append(_claim_b4(records))
    return out + _claim_b5(records)


def headline_metrics(records) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    ln = norm_fusion.ln_table(records)
    slopes = attention_slopes(records)
    largest_p = ln_fusion_speedup_largest_p(records)
    layer = norm_fusion.layer_table(records)
    return {
        **run_identity(records, "dtype"),
        "matmul_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
        "memory_bandwidth_bytes_per_s": records["bandwidth"]["plateau_bytes_per_s"],
        "ln_fusion": norm_fusion.comparisons(records),
        "ln_rows": ln.to_dict(orient="records"),
        "ln_working_set_bytes": records["ln"]["working_set_bytes"],
        "ln_fusion_speedup_largest_p": largest_p["ratio"] if largest_p else None,
        "ln_layer_share": float(layer.sub_block_share.iloc[0]),  # the same row, so that
        "ln_layer_speedup_ceiling": float(layer.ceiling.iloc[0]),  # ceiling = 1/(1 − share)
        "ln_article_layer_speedup_ceiling": float(
            norm_fusion.article_sensitivity().layer_speedup_ceiling.iloc[0]
        ),
        "triton_skipped": records["ln"]["triton_skipped"],
        "sdpa_backend": records["attention"]["backend"],
        "attention_slopes": slopes,
        "attention_skipped": records["attention"]["skipped"],
        "naive_attention_saved_bytes_slope": slopes.get("naive_saved_bytes_slope"),
        "sdpa_saved_bytes_slope": slopes.get("sdpa_saved_bytes_slope"),
        "compile": compile_table(records).to_dict(orient="records"),
        "matmul_dtypes": dtype_table(records).to_dict(orient="records"),
        "a8_article_scale": a8_article_scale(),
        "claims": verdicts.records(claims(records)),
    }
