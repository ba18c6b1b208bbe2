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
