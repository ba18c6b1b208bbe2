"""Analysis of the ``mfu`` study: FLOPs conventions, the counting check, MFU under each
convention, the headline metrics and ``outcome`` (the claims and metrics the notebook publishes).

The measured run's time split is in ``time_split``, the claims table in ``claims``, the
articles' arithmetic in ``article_arithmetic``. Every function reads the plain records of
``bench.measure`` (here or from another machine) or the articles' stated inputs in ``stated``.
"""

from __future__ import annotations

from mfulab.analytic import flops
from mfulab.analytic.config import TransformerConfig, preset
from mfulab.results import run_identity
from mfulab.studies.mfu.article_arithmetic import convention_label
from mfulab.studies.mfu.params import Params
from mfulab.studies.mfu.time_split import breakdown, datasheet_peak, exact_count_ratio


def conventions_table(preset_names, seq_lens):
    """FLOPs per token under each convention for several presets and sequence lengths."""
    import pandas as pd

    rows = []
    for name in preset_names:
        cfg0 = preset(name)
        for T in seq_lens:
            cfg = cfg0.with_(seq_len=T)
            for conv in flops.CONVENTIONS:
                rows.append(
                    {
                        "preset": name,
                        "seq_len": T,
                        "n_params": flops.param_count(cfg),
                        "convention": conv,
                        "flops_per_token": flops.flops_per_token(cfg, convention=conv),
                        "attention_share": flops.attention_flops_share(cfg, convention=conv),
                    }
                )
    df = pd.DataFrame(rows)
    six_n = df[df.convention == "6n"].set_index(["preset", "seq_len"]).flops_per_token
    df["relative_to_6n"] = [r.flops_per_token / six_n[(r.preset, r.seq_len)] for r in df.itertuples()]
    return df


# nanoGPT's estimate_mfu (karpathy/nanoGPT, model.py): "A100 GPU bfloat16 peak flops is 312 TFLOPS"
NANOGPT_PROMISED_FLOPS_PER_S = 312e12


def nanogpt_flops_per_token(cfg) -> float:
    """nanoGPT's ``estimate_mfu`` numerator per token (karpathy/nanoGPT, model.py, after PaLM
    App. B): 6·N + 12·L·H·Q·T with N = ``get_num_params(non_embedding=True)``, every parameter
    less the learned position embeddings (the tied token embedding stays: it is the LM head), and
    T = ``block_size``, the model's context (``cfg.seq_len``), not the length a batch runs at.
    One formula in the course: :func:`frameworks.nanogpt`."""
    from mfulab.studies.mfu import frameworks

    return frameworks.nanogpt(cfg)


def nanogpt_table(preset_names, seq_lens):
    """nanoGPT's ``estimate_mfu`` beside the course's conventions, per preset and length: its
    FLOPs per token against ``palm`` (the same formula over every parameter) and ``6n`` at the
    length run. A model with learned positions runs only up to its own table (GPT-2's 1,024):
    longer lengths are left out for it, since a longer table would add parameters the model does
    not have; shorter ones keep the table, and nanoGPT's attention term its ``block_size``."""
    import pandas as pd

    rows = []
    for name in preset_names:
        native = preset(name)
        for T in seq_lens:
            if native.learned_positions and T > native.seq_len:
                continue
            # a learned table keeps its own size whatever the length run; rotary models have none
            cfg = native if native.learned_positions else native.with_(seq_len=T)
            nano = nanogpt_flops_per_token(cfg)
            palm = flops.flops_per_token(cfg, convention="palm", seq_len=T)
            rows.append(
                {
                    "preset": name,
                    "seq_len": T,
                    "block_size": cfg.seq_len,
                    "nanogpt_flops_per_token": nano,
                    "palm_flops_per_token": palm,
                    "nanogpt_over_palm": nano / palm,
                    "nanogpt_over_6n": nano / flops.flops_per_token(cfg, convention="6n", seq_len=T),
                }
            )
    return pd.DataFrame(rows)


def nanogpt_on_this_run(records, b: dict) -> dict:
    """What nanoGPT's ``estimate_mfu`` would print for this run's steady step (``b``: the time
    split's ``breakdown``): its numerator over its fixed A100 bf16 denominator, beside the
    course's ``palm`` MFU over this device's ceiling. The same step, two readings."""
    cfg = TransformerConfig(**records["config"])
    flops_per_s = nanogpt_flops_per_token(cfg) * b["steady_tokens_per_s"]
    return {
        "nanogpt_flops_per_s": flops_per_s,
        "nanogpt_mfu": flops_per_s / NANOGPT_PROMISED_FLOPS_PER_S,
        "promised_flops_per_s": NANOGPT_PROMISED_FLOPS_PER_S,
        "course_mfu_vs_ceiling": b["steady_mfu_vs_ceiling"],
        "course_convention": b["convention"],
    }


def published_mamf_table():
    """The denominator's gap where it is published: per device of ``devices.yaml`` with a
    measured best GEMM (stas00's MAMF finder), its dense datasheet peak, that MAMF and their
    ratio, with the sources, and the datasheet's with-sparsity figure where the vendor's table
    leads with it (2× the dense peak: a denominator no dense training step can reach)."""
    import pandas as pd

    from mfulab.analytic.devices import DEVICES

    rows = []
    for d in DEVICES:
        for dtype, mamf in (d.mamf_flops_per_s or {}).items():
            peak = d.flops_per_s.get(dtype)
            if peak is None:
                continue
            rows.append(
                {
                    "device": d.key,
                    "dtype": dtype,
                    "datasheet_dense_peak_flops_per_s": peak,
                    "datasheet_with_sparsity_flops_per_s": 2 * peak if "sparsity" in d.note else None,
                    "mamf_flops_per_s": mamf,
                    "mamf_over_peak": mamf / peak,
                    # a MAMF measured on this device cites the finder directly; one borrowed from a
                    # sibling part (same tensor cores and clocks) is an assumption
                    "mamf_measured_on_device": d.mamf_source.startswith("stas00/"),
                    "peak_source": d.source,
                    "mamf_source": d.mamf_source,
                }
            )
    return pd.DataFrame(rows)


def published_mamf_text(table) -> str:
    """The :func:`published_mamf_table` in one line of markdown: each device's MAMF as a share of
    its dense peak, and the with-sparsity figure where the vendor's table leads with it."""
    from mfulab.units import si

    def one(r) -> str:
        text = (
            f"{r.device} {r.dtype}: MAMF {si(r.mamf_flops_per_s, 'FLOP/s')} = **{r.mamf_over_peak:.0%}** "
            f"of the dense peak {si(r.datasheet_dense_peak_flops_per_s, 'FLOP/s')}"
        )
        if not r.mamf_measured_on_device:
            text += " (assumed: a sibling part's measurement)"
        sparse = r.datasheet_with_sparsity_flops_per_s
        if sparse == sparse and sparse:  # NaN (no with-sparsity figure) fails the first test
            text += f" (the with-sparsity figure, {si(sparse, 'FLOP/s')}, is twice that)"
        return text

    return "; ".join(one(r) for r in table.itertuples())


def count_table(records: dict):
    """Analytic FLOPs per token vs FlopCounterMode (naive attention) for the measured model."""
    import pandas as pd

    cfg = TransformerConfig(**records["config"])
    fc = records["flop_count"]
    counted = fc["naive_flops_per_token"]
    rows = [
        {"source": "FlopCounterMode, naive attention", "flops_per_token": counted},
        {"source": "FlopCounterMode, SDPA", "flops_per_token": fc["sdpa_flops_per_token"]},
        {
            "source": "analytic: 6·N_matmul + 12·L·H·Q·T",
            "flops_per_token": flops.exact_matmul_flops_per_token(cfg),
        },
    ]
    for conv in flops.CONVENTIONS:
        rows.append(
            {
                "source": f"convention {convention_label(conv, cfg)}",
                "flops_per_token": flops.flops_per_token(cfg, convention=conv),
            }
        )
    df = pd.DataFrame(rows)
    df["relative_difference_vs_counter"] = df.flops_per_token / counted - 1
    return df


def mfu_by_convention(records: dict):
    """The steady-state MFU that each FLOPs convention reports for the same measured step."""
    import pandas as pd

    rows = []
    for conv in flops.CONVENTIONS:
        b = breakdown(records, convention=conv)
        rows.append(
            {
                "convention": conv,
                "flops_per_step": b["flops_per_step"],
                "achieved_flops_per_s": b["steady_flops_per_s"],
                "mfu_vs_ceiling": b["steady_mfu_vs_ceiling"],
                "mfu_vs_datasheet": b["steady_mfu_vs_datasheet"],
                "global_mfu_vs_ceiling": b["global_mfu_vs_ceiling"],
            }
        )
    return pd.DataFrame(rows)


def headline_metrics(records: dict, p: Params | None = None, values: dict | None = None) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names); the
    time split's ``breakdown`` and the ``datasheet_peak`` from ``values`` where the outcome has
    them already."""
    values = values or {}
    b = values.get("breakdown") or breakdown(records)
    sheet = values.get("datasheet_peak") or datasheet_peak(records)
    return {
        **run_identity(records, "dtype", "preset"),
        "n_params": records["n_params"],
        "flops_convention": b["convention"],
        "matmul_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
        "in_process_ceiling_flops_per_s": b["ceiling_flops_per_s"]
        if b["ceiling_source"] == "in-process"
        else None,
        "memory_bandwidth_bytes_per_s": records["bandwidth"]["plateau_bytes_per_s"],
        "peak": {
            "datasheet_flops_per_s": sheet["flops_per_s"],
            "datasheet_source": sheet["source"],
            "datasheet_missing_because": sheet["why_none"],
            "measured_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
            "measured_ceiling_source": "this machine's calibration: best median FLOP/s over square matmuls",
        },
        "datasheet_peak_flops_per_s": sheet["flops_per_s"],
        "ceiling_over_datasheet": (
            records["ceiling"]["best_flops_per_s"] / sheet["flops_per_s"] if sheet["flops_per_s"] else None
        ),
        "steady_step_s": b["steady_step_s"],
        "steady_step_iqr_s": b["steady_step_q3_s"] - b["steady_step_q1_s"],
        "steady_tokens_per_s": b["steady_tokens_per_s"],
        "steady_mfu_vs_ceiling": b["steady_mfu_vs_ceiling"],
        "steady_mfu_vs_calibration": b["steady_flops_per_s"] / b["calibrated_ceiling_flops_per_s"],
        "steady_mfu_vs_datasheet": b["steady_mfu_vs_datasheet"],
        "global_mfu_vs_ceiling": b["global_mfu_vs_ceiling"],
        "local_mfu_vs_ceiling": b["local_mfu_vs_ceiling"],
        "global_mfu_vs_datasheet": b["global_mfu_vs_datasheet"],
        "local_mfu_vs_datasheet": b["local_mfu_vs_datasheet"],
        "time_split_s": {
            k: b[k]
            for k in (
                "compute_s",
                "data_s",
                "communication_s",
                "startup_readback_s",
                "unaccounted_s",
                "job_wall_s",
            )
        },
        "flop_count_rel_diff": records["flop_count"]["naive_flops_per_token"]
        / flops.exact_matmul_flops_per_token(TransformerConfig(**records["config"]))
        - 1,
    }


def headline_over_exact(records, convention: str) -> dict:
    """How far the headline convention's FLOPs per token sit from the two exact counts of this
    run's model: the dense-shape count (every matmul as run, the masked half of causal attention
    included: what ``FlopCounterMode`` sees with naive attention) and the mask-aware one (a causal
    query counts only the keys it sees: §4's exact count), as relative differences."""
    cfg = TransformerConfig(**records["config"])
    headline = flops.flops_per_token(cfg, convention=convention)
    return {
        "dense": headline / flops.exact_matmul_flops_per_token(cfg, mask="full") - 1,
        "causal": exact_count_ratio(records, convention) - 1,
    }
