"""The step model's tested domain, read from chapter 09's own tables."""

import pandas as pd

from mfulab.studies.predict import domain, scores


def _tables():
    validation = pd.DataFrame(
        {
            "split": ["test", "test", "holdout", "holdout", "fit"],
            "device": ["a100", "h100-sxm", "a100", "h100-sxm", "a100"],
            "framework": ["megatron", "fsdp", "ddp", "ddp", "megatron"],
            "refused": ["", "", "not modelled: JAX/XLA GSPMD (Pax): mesh", "", ""],
            "error": [0.1, -0.3, float("nan"), 0.2, 0.0],
            "loo_error": [float("nan")] * 4 + [0.0],
            "null_error": [0.2, 0.2, float("nan"), 0.1, 0.1],
            "model_flops_per_step": [1e18] * 5,
            "peak_flops_total": [1e15] * 5,
            "published_step_s": [2000.0] * 5,
        }
    )
    return {
        "validation": validation,
        "splits": scores.split_summary(validation),
        "decisive_margin": scores.decisive_margin_check(validation),
    }


def test_domain_counts_priced_and_refused_rows_per_held_out_split():
    t = _tables()
    d = domain.domain_table(t).set_index("split")
    assert (d.loc["test", "rows"], d.loc["test", "priced"], d.loc["test", "refused"]) == (2, 2, 0)
    assert (d.loc["holdout", "priced"], d.loc["holdout", "refused"]) == (1, 1)
    assert "fit" not in d.index  # the fit split is not held out
    assert d.loc["test", "devices"] == "a100, h100-sxm" and d.loc["holdout", "frameworks"] == "ddp"
    text = domain.domain_text(t)
    assert "Of 4 published held-out rows it priced 3" in text and "JAX/XLA GSPMD (1)" in text
    assert "a median |error| of 20% there" in text  # 0.1, 0.3, 0.2 pooled
    assert "Ascend 910B" in text  # no 910B row priced: the chapters' 910B cases are extrapolation
