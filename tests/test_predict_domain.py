"""The step model's tested domain, read from chapter 09's validation table."""

import pandas as pd
import pytest

from mfulab.studies.predict import domain


def _validation():
    return pd.DataFrame(
        {
            "split": ["test", "test", "holdout", "holdout", "fit"],
            "device": ["a100", "h100-sxm", "a100", "h100-sxm", "a100"],
            "framework": ["megatron", "fsdp", "ddp", "ddp", "megatron"],
            "refused": ["", "", "not modelled: JAX/XLA GSPMD (Pax): mesh", "", ""],
            "error": [0.1, -0.3, float("nan"), 0.2, 0.0],
        }
    )


def test_domain_counts_priced_and_refused_rows_per_held_out_split():
    t = domain.domain_table(_validation()).set_index("split")
    assert (t.loc["test", "rows"], t.loc["test", "priced"], t.loc["test", "refused"]) == (2, 2, 0)
    assert (t.loc["holdout", "priced"], t.loc["holdout", "refused"]) == (1, 1)
    everything = t.loc["all held out"]
    assert everything.rows == 4 and everything.priced == 3  # the fit split is not held out
    assert everything.median_abs_error == pytest.approx(0.2)
    assert everything.devices == "a100, h100-sxm" and "ddp" in everything.frameworks
    text = domain.domain_text(_validation())
    assert "Of 4 published held-out rows it priced 3" in text and "JAX/XLA GSPMD (1)" in text
    assert "Ascend 910B" in text  # no 910B row priced: the chapters' 910B cases are extrapolation
