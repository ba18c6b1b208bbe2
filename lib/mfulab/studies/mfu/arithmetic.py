"""The articles' own arithmetic for the ``mfu`` claims (A19, B1, B15), recomputed step by
step from what they state (``stated``); no measurement is involved."""

from __future__ import annotations

from ... import flops
from ...config import preset
from .stated import A19_STATED, B1_STATED, B15_STEPS


def a19_check() -> dict:
    """Each step of the 13B MFU example (article A §8), recomputed."""
    s = A19_STATED
    tokens = s["global_batch"] * s["seq_len"]
    correct_flops = 6 * s["n_params"] * tokens  # 6N already counts forward (2N) and backward (4N)
    article_flops = correct_flops * 3  # the article's extra ×3
    cluster_peak = s["n_devices"] * s["peak_flops_per_s"]
    division_result = s["stated_total_flops"] / (cluster_peak * s["step_time_s"])
    implied_mfu = flops.step_mfu(
        flops_per_step=correct_flops,
        step_time_s=s["step_time_s"],
        n_devices=s["n_devices"],
        peak_flops_per_s=s["peak_flops_per_s"],
    )
    min_devices_for_mfu_1 = correct_flops / (s["peak_flops_per_s"] * s["step_time_s"])
    return {
        "tokens_per_step": tokens,
        "flops_6n_x3": article_flops,
        "flops_6n": correct_flops,
        "cluster_peak_flops_per_s": cluster_peak,
        "stated_division_result": division_result,
        "implied_mfu_6n": implied_mfu,
        "min_devices_for_mfu_below_1": min_devices_for_mfu_1,
        "implied_mfu_on_32_devices": flops.step_mfu(
            flops_per_step=correct_flops,
            step_time_s=s["step_time_s"],
            n_devices=32,
            peak_flops_per_s=s["peak_flops_per_s"],
        ),
        "implied_mfu_palm_article_13b": flops.step_mfu(
            flops_per_step=flops.flops_per_token(preset("article-13b"), convention="palm") * tokens,
            step_time_s=s["step_time_s"],
            n_devices=s["n_devices"],
            peak_flops_per_s=s["peak_flops_per_s"],
        ),
    }


def b1_table():
    """B1's arithmetic under the article's 6·7e9 and under each convention for Llama-2-7B."""
    import pandas as pd

    s = B1_STATED
    cfg = preset("article-7b")
    peak_total = s["n_devices"] * s["peak_flops_per_s"]
    per_token = {"article: 6 × 7e9": 6 * s["n_params"]}
    per_token.update(
        {
            f"{conv} (N = {flops.param_count(cfg) / 1e9:.2f}B)": flops.flops_per_token(cfg, convention=conv)
            for conv in flops.CONVENTIONS
        }
    )
    rows = []
    for label, fpt in per_token.items():
        flops_per_step = fpt * s["tokens_per_step"]
        row = {
            "flops_convention": label,
            "flops_per_step": flops_per_step,
            "ideal_step_s": flops_per_step / peak_total,
        }
        for t in s["step_times_s"]:
            row[f"mfu_at_{t}s"] = flops.step_mfu(
                flops_per_step=flops_per_step,
                step_time_s=t,
                n_devices=s["n_devices"],
                peak_flops_per_s=s["peak_flops_per_s"],
            )
        rows.append(row)
    return pd.DataFrame(rows)


def b15_table():
    """Each optimisation step of the case study, its gain and its loss category."""
    import pandas as pd

    rows = []
    for (prev, _, _), (t, change, cat) in zip(B15_STEPS, B15_STEPS[1:]):
        rows.append(
            {"change": change, "category": cat, "step_before_s": prev, "step_after_s": t, "gain_s": prev - t}
        )
    df = pd.DataFrame(rows)
    gross = df.gain_s.clip(lower=0).sum()
    df["share_of_gross_gain"] = df.gain_s / gross
    return df
