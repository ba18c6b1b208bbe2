"""The step model's error line that chapters 02–05 show beside their at-scale verdicts."""

import pytest
import yaml

from mfulab.studykit.step_error import read_history, step_model_error_line


def test_the_error_line_quotes_the_latest_revision_and_its_null(tmp_path):
    path = tmp_path / "history.yaml"
    split = {"rows_priced": 10, "median_abs_error": 0.3, "max_abs_error": 0.9, "null_median_abs_error": 0.4}
    latest = {**split, "median_abs_error": 0.12, "max_abs_error": 0.5, "null_median_abs_error": 0.2}
    revisions = [
        {"commit": "aaa", "date": "2026-01-01", "test": split},
        {"commit": "bbb", "date": "2026-02-01", "test": latest, "holdout": {"rows_priced": 0}},
    ]
    path.write_text(yaml.safe_dump({"revisions": revisions}))
    line = step_model_error_line(path)
    assert "bbb" in line and "aaa" not in line
    assert "test: median |error| 12% over 10 rows (max 50%; null model 20%)" in line
    assert "holdout:" not in line  # a split with no priced row says nothing


def test_no_history_says_so(tmp_path):
    assert read_history(tmp_path / "none.yaml") == []
    assert "no recorded validation" in step_model_error_line(tmp_path / "none.yaml")


def test_the_committed_history_gives_a_line():
    assert read_history() and "median |error|" in step_model_error_line()


def test_the_decisive_margin_is_the_latest_recorded_pair_ratio_p90(tmp_path):
    """The course's margin is the 90th percentile of the model's error on ratios of held-out runs
    of one model on one device, read from the latest revision that recorded it."""
    from mfulab.studykit.step_error import FALLBACK_MARGIN, decisive_margin

    path = tmp_path / "history.yaml"
    revisions = [
        {"commit": "aaa", "date": "2026-01-01", "pair_ratio_error": {"pairs": 9, "median": 0.1, "p90": 0.4}},
        {
            "commit": "bbb",
            "date": "2026-02-01",
            "pair_ratio_error": {"pairs": 12, "median": 0.05, "p90": 0.3},
        },
        {"commit": "ccc", "date": "2026-03-01"},  # a revision that recorded no ratios: the last that did
    ]
    path.write_text(yaml.safe_dump({"revisions": revisions}))
    assert decisive_margin(path=path) == 0.3
    path.write_text(yaml.safe_dump({"revisions": revisions[2:]}))
    assert decisive_margin(path=path) == FALLBACK_MARGIN


def test_each_kind_of_comparison_reads_its_own_recorded_margin(tmp_path):
    """A revision that records margins per kind gives each kind its own; one that recorded only
    the pooled figure gives that to both; an unknown kind is an error, not a silent default."""
    from mfulab.studykit.step_error import decisive_margin

    path = tmp_path / "history.yaml"
    pooled = {
        "commit": "aaa",
        "date": "2026-01-01",
        "pair_ratio_error": {"pairs": 9, "median": 0.1, "p90": 0.4},
    }
    by_kind = {
        "commit": "bbb",
        "date": "2026-02-01",
        "pair_ratio_error": {"pairs": 12, "median": 0.05, "p90": 0.3},
        "pair_ratio_error_by_kind": {"layout": {"p90": 0.15}, "switch": {"p90": 0.48}},
    }
    path.write_text(yaml.safe_dump({"revisions": [pooled, by_kind]}))
    assert decisive_margin("layout", path=path) == 0.15 and decisive_margin("switch", path=path) == 0.48
    path.write_text(yaml.safe_dump({"revisions": [pooled]}))
    assert decisive_margin("layout", path=path) == decisive_margin("switch", path=path) == 0.4
    with pytest.raises(ValueError):
        decisive_margin("toggle", path=path)


def test_the_decisive_line_is_where_no_single_source_places_it(tmp_path):
    """Where a revision recorded the 90th percentile with each source left out, the decisive line
    is the largest of them (never below the point 90th percentile): one publication's pairs
    cannot move a verdict across it."""
    from mfulab.studykit.step_error import decisive_margin, margin_figures

    path = tmp_path / "history.yaml"
    kinds = {
        "layout": {"p90": 0.149, "p90_one_source_out_max": 0.174},
        "switch": {"p90": 0.476, "p90_one_source_out_max": 0.40},  # every source left out lowers it
    }
    rev = {"commit": "ccc", "date": "2026-03-01", "pair_ratio_error_by_kind": kinds}
    path.write_text(yaml.safe_dump({"revisions": [rev]}))
    assert decisive_margin("layout", path=path) == 0.174
    assert decisive_margin("switch", path=path) == 0.476
    assert margin_figures("layout", path=path) == {
        "p90": 0.149,
        "one_source_out_max": 0.174,
        "decisive": 0.174,
    }


def test_the_at_scale_share_stays_the_order_chapter_09_fits_and_the_cli_uses_it():
    """The share of MAMF every planner and the CLI give a step's GEMMs is a rounded value of the
    share chapter 09 fits on published runs: a refit that moves away from it is caught here."""
    from mfulab.analytic.rates import AT_SCALE_MATMUL_SHARE_OF_MAMF
    from mfulab.run.predict_cli import assumptions

    fitted = read_history()[-1]["fitted_share_of_mamf"]
    assert abs(AT_SCALE_MATMUL_SHARE_OF_MAMF - fitted) <= 0.025
    assert assumptions([])["matmul_share_of_mamf"] == AT_SCALE_MATMUL_SHARE_OF_MAMF
    assert assumptions(["matmul_share_of_mamf=0.6"])["matmul_share_of_mamf"] == 0.6


def test_a_revision_records_how_far_one_source_moves_each_margin():
    """The history records, per kind, the point 90th percentile beside the largest one with a
    source left out, the figure the decisive line is read from."""
    import pandas as pd

    from mfulab.studies.predict import history

    pairs = pd.DataFrame(
        {
            "kind": ["switch"] * 6,
            "source": ["a", "a", "a", "b", "b", "c"],
            "ratio_error": [0.1, 0.2, 0.3, 0.9, 1.0, 0.05],
            "settings_differing": [1, 2, 2, 1, 2, 2],
        }
    )
    fig = history.kind_figures(pairs)["switch"]
    left_out = [pairs[pairs.source != s].ratio_error.quantile(0.9) for s in "abc"]
    assert fig["p90_one_source_out_max"] == pytest.approx(max(left_out), abs=1e-4)
    assert fig["p90_one_source_out_max"] >= fig["p90"] and fig["p90_lo"] <= fig["p90_hi"]
