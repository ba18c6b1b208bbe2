"""A held-out split with no row priced still reports what its rows priced as noted show."""

import pandas as pd

from mfulab.studies.predict import analysis


def test_an_unpriced_split_reports_its_as_noted_rows_against_the_null_model():
    noted = pd.DataFrame(
        [
            {
                "split": "holdout-3",
                "rows_priced_as_noted": 17,
                "median_signed_error": -0.232,
                "median_abs_error": 0.232,
                "max_abs_error": 0.38,
                "rows_within_25pct": 0.53,
                "null_median_abs_error": 0.153,
            }
        ]
    )
    empty = pd.DataFrame({"split": []})
    text = analysis.test_text({}, empty, "holdout-3", as_noted=noted)
    assert "17 rows" in text and "23.2%" in text and "worse than the null model" in text
    better = noted.assign(median_abs_error=0.10)
    assert "a median below the null model's" in analysis.test_text({}, empty, "holdout-3", as_noted=better)
    assert analysis.test_text({}, empty, "holdout-3") == "No holdout-3 row is priced."


def test_ranking_text_counts_the_efficiency_order_over_wide_sweeps_only():
    import pandas as pd

    from mfulab.studies.predict import scores

    rank = pd.DataFrame(
        {
            "source": ["a", "b", "c"],
            "sweep": ["s1", "s2", "s3"],
            "rho_throughput": [1.0, 0.9, 0.8],
            "null_rho_throughput": [1.0, 0.9, float("nan")],
            "rho_mfu": [0.9, 0.2, -0.5],
            "predicted_mfu_spread": [0.5, 0.6, 0.1],  # the third inside a ±38% margin: noise
        }
    )
    text = scores.ranking_text(rank, 0.38)
    assert "median `rho_mfu` +0.20, ≥ +0.8 in 1 of 3" in text
    assert "over the 2 sweeps whose predicted MFU spreads more than the ±38% margin, median +0.55" in text
    assert "lowest +0.20 (b, s2)" in text
    assert scores.ranking_text(rank.iloc[:0], 0.38) == ""
