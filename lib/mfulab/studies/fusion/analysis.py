"""Analysis of the ``fusion`` study: the roofline points, attention memory scaling, the
kernel SDPA picks, model-level ``torch.compile`` and matmul dtypes as tables, and A8 at the
article's scale. A7's analysis (the sub-block, its RNG, its share of a layer, Amdahl) is in
``norm_fusion``; ``claims`` composes the rows and the headline metrics from these tables.

Every function reads the plain records of ``bench.measure`` (here or from another machine)
or the articles' stated inputs in ``stated``.
"""

from __future__ import annotations

from mfulab.analytic import devices
from mfulab.analytic.config import ATTENTION_IMPLS
from mfulab.studies.fusion import attention_memory, norm_fusion, sdpa_rules
from mfulab.studies.fusion.bytes_model import ln_residual_dropout_flops
from mfulab.studies.fusion.norm_fusion import dram_served
from mfulab.studies.fusion.stated import B4_DATASHEET_DEVICE


def a8_article_scale() -> dict:
    """A8 at the article's setting read as Korthikanti's Table 2 prints it (``attention_memory``)."""
    return attention_memory.article_scale()


def roofline_points(records):
    """Each measured kernel placed on this device's roofline (FLOP/s vs FLOPs per byte), with
    two byte counts for the sub-block: the passes over memory it really makes (the counts of
    ``norm_fusion.ln_table``: ATen's source for eager on CPU, inductor's generated source for
    compiled; passes × N·e bytes) and the bytes model's minimum (``bytes_model``: 5·N·e eager,
    4·N·e fused at p = 0). ``intensity_flops_per_byte`` is the counted one where known."""
    import pandas as pd

    from mfulab.measure.timing import torch_dtype

    ln = records["ln"]
    llc = norm_fusion.cache_bytes(ln)
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


def dtype_note(records) -> str:
    """Which dtypes' ceilings were measured, and any size the calibration did not time because
    one call took too long (a dtype this device has no fast kernel for)."""
    parts = []
    for d, v in records["matmul_dtypes"].items():
        because = v.get("skipped_because")
        parts.append(f"{d}" + (f" ({because}; the ceiling is over the smaller sizes)" if because else ""))
    isa = records.get("cpu_isa")
    cpu = (
        f" This CPU: torch dispatches to {isa['torch_capability']}; matmul flags "
        f"{', '.join(isa['matmul_flags']) or 'none'} (bf16 GEMMs need AVX512_BF16 or AMX to beat fp32)."
        if isa and records["device"] == "cpu"
        else ""
    )
    return "Matmul ceilings measured for: " + "; ".join(parts) + "." + cpu


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


def cuda_flash_reasons_article() -> list[str]:
    """Why the article's own attention inputs (``stated.B3_ARTICLE_INPUTS``) would not get CUDA's
    flash kernel on its A100 (``sdpa_rules``; empty: eligible)."""
    from mfulab.studies.fusion.stated import B3_ARTICLE_INPUTS

    return sdpa_rules.cuda_flash_ineligible(**B3_ARTICLE_INPUTS)
