"""The held-out scores' uncertainty (studies/predict/uncertainty.py): ratio errors, the
source-clustered bootstrap, and the refit on the rows the model has seen."""

import numpy as np
import pandas as pd
import pytest

from mfulab.studies.predict import uncertainty


def _table(model_errors, null_errors, sources, split="holdout"):
    n = len(model_errors)
    return pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(n)],
            "split": split,
            "source": sources,
            "device": "a100",
            "refused": "",
            "error": model_errors,
            "null_error": null_errors,
            # the 40%-MFU rule's error is model FLOPs / (peak · 0.4) / published − 1: set it to 0.5
            "model_flops_per_step": 0.6,
            "peak_flops_total": 1.0,
            "published_step_s": 1.0,
        }
    )


def test_a_ratio_error_cancels_what_two_rows_share():
    # both rows 10% fast: their ratio is exact; one 10% fast, one 10% slow: 1.1/0.9 − 1
    assert uncertainty.pair_ratio_errors([-0.1, -0.1]) == pytest.approx([0.0])
    assert uncertainty.pair_ratio_errors([0.1, -0.1]) == pytest.approx([1.1 / 0.9 - 1])
    assert uncertainty.pair_ratio_errors([-0.1, 0.1]) == pytest.approx([1.1 / 0.9 - 1])  # symmetric
    assert len(uncertainty.pair_ratio_errors([0.0, 0.1, 0.2, 0.3])) == 6


def test_the_bootstrap_tells_a_better_model_from_its_null_and_not_an_equal_one():
    rng = np.random.default_rng(1)
    sources = [f"s{i // 5}" for i in range(40)]
    close = rng.normal(0, 0.03, 40)
    far = rng.normal(0, 0.3, 40)
    better = uncertainty.clustered_bootstrap(_table(close, far, sources), n_boot=300).iloc[0]
    assert better.group == "holdouts" and better.sources == 8 and better.rows == 40
    assert better.lead_over_null_lo > 0 and better.draws_leading_null > 0.95
    assert better.predictor_lo <= better.predictor_median_abs_error <= better.predictor_hi
    other = rng.normal(0, 0.03, 40)  # as close as the predictor, its own noise
    same = uncertainty.clustered_bootstrap(_table(close, other, sources), n_boot=300).iloc[0]
    assert same.lead_over_null_lo <= 0 <= same.lead_over_null_hi
    text = uncertainty.bootstrap_text(pd.DataFrame([better]))
    assert "ahead of the null model" in text and "behind the 40%-MFU rule" not in text


def test_ratio_errors_pair_rows_within_a_source_only():
    df = _table([0.0, 0.2, -0.2, 0.5], [0.0, 0.0, 0.0, 0.0], ["a", "a", "b", "c"])
    runs = [{"id": i, "model": {"n_layers": 2}} for i in df.id]
    table = uncertainty.ratio_errors(df, runs)
    pooled = table[(table.group == "holdouts") & (table.pairs_within == "one source")].iloc[0]
    # one pair in source a (0% and +20%): 20% apart, on the margin; source b and c have one row each
    assert pooled.pairs == 1 and pooled.median_ratio_error == pytest.approx(0.2)
    assert pooled.null_median_ratio_error == 0


def test_the_refit_never_fits_on_a_holdout_row():
    from mfulab.studies.predict import analysis, bench
    from mfulab.studykit.registry import REGISTRY

    p = REGISTRY["predict"].params.from_dict({}).prepared()
    records = bench._published(p)
    runs = records["published_runs"]
    valid = analysis.validation(records, p)
    df = valid["table"]
    r = uncertainty.refit_on_seen(runs, df, fit_grid=p.fit_grid)
    seen = df[df.split.isin(uncertainty.SEEN) & (df.refused == "")]
    blind = df[df.split.isin(uncertainty.BLIND) & (df.refused == "")]
    assert r["seen_rows"] == len(seen) and r["blind_rows"] == len(blind)
    # the holdouts' published figures do not move the refit: change them in the runs (what the
    # fit prices from) and in the table, and refit
    import copy

    blind_ids = set(blind.id)
    changed = copy.deepcopy(runs)
    for row in changed:
        if row["id"] in blind_ids:
            row["published"] = {
                k: v * 3 if isinstance(v, int | float) else v for k, v in row["published"].items()
            }
    changed_df = analysis.validation({**records, "published_runs": changed}, p)["table"]
    assert not changed_df.published_step_s.equals(df.published_step_s)
    again = uncertainty.refit_on_seen(changed, changed_df, fit_grid=p.fit_grid)
    assert again["refit_value"] == r["refit_value"] and again["null_utilisation"] == r["null_utilisation"]
    assert again["after"] != r["after"]  # the holdouts themselves are scored against what changed


def test_ratio_text_gives_the_holdouts_own_percentile_beside_the_margin():
    import pandas as pd

    from mfulab.studies.predict import uncertainty

    rows = []
    for group, p90 in (("all held out", 0.38), ("holdouts", 0.14)):
        for within in ("one source", "one source, model and device"):
            rows.append(
                {
                    "group": group,
                    "pairs_within": within,
                    "pairs": 50,
                    "groups": 5,
                    "margin": 0.3775,
                    "median_ratio_error": 0.05,
                    "p90_ratio_error": p90,
                    "share_within_margin": 0.9,
                    "group_share_within_margin": 0.9,
                    "null_share_within_margin": 0.8,
                }
            )
    text = uncertainty.ratio_text(pd.DataFrame(rows))
    assert "On the holdouts alone" in text and "device is 14.0% over 50 pairs in 5 groups" in text
    assert "On the holdouts alone" not in uncertainty.ratio_text(pd.DataFrame(rows[:2]))


def test_pairs_are_sorted_by_what_their_layouts_differ_in():
    """Two layouts that differ only in parallel degrees are a layout pair; a recompute policy, a
    ZeRO stage or an overlap switch (alone or with the layout), or nothing recorded, a switch."""
    from mfulab.studies.predict import margins

    base = {"n_devices": 64, "tp": 8, "pp": 1, "micro_batch": 1, "recompute": "selective", "zero_stage": 1}
    assert margins.pair_kind(base, base | {"tp": 4, "pp": 2}) == "layout"
    assert margins.pair_kind(base, base | {"n_devices": 128, "micro_batch": 2}) == "layout"
    assert margins.pair_kind(base, base | {"recompute": "full"}) == "switch"
    assert margins.pair_kind(base, base | {"zero_stage": 3, "tp": 4}) == "switch"
    assert margins.pair_kind(base, {k: v for k, v in base.items() if k != "zero_stage"}) == "switch"
    assert margins.pair_kind(base, dict(base)) == "switch"  # a difference the file does not record


def test_kind_margins_pair_one_model_on_one_device_in_bf16_only():
    from mfulab.studies.predict import margins

    df = _table([0.0, 0.1, 0.3, -0.2, 0.4], [0.0] * 5, ["a"] * 5)
    df["device"] = ["a100", "a100", "a100", "a100", "h100"]
    layout = {"n_devices": 8, "tp": 1, "recompute": "none"}
    runs = [
        {"id": df.id[0], "model": {"n_layers": 2}, "layout": layout},
        {"id": df.id[1], "model": {"n_layers": 2}, "layout": layout | {"tp": 2}},  # layout pair with 0
        {"id": df.id[2], "model": {"n_layers": 2}, "layout": layout | {"recompute": "full"}},  # switch
        {"id": df.id[3], "model": {"n_layers": 2}, "layout": layout | {"dtype": "fp8"}},  # no FP8 pairs
        {"id": df.id[4], "model": {"n_layers": 2}, "layout": layout},  # another device: no pair
    ]
    got = margins.kind_margins(margins.kind_pairs(df, runs))
    assert got["layout"]["pairs"] == 1 and got["layout"]["p90"] == pytest.approx(0.1)
    # 0 vs +30% and +10% vs +30% (recompute and tp differ): two switch pairs, 30% and 18.2% apart
    assert got["switch"]["pairs"] == 2 and got["switch"]["one_setting"] == 1
    assert got["switch"]["median"] == pytest.approx((0.3 + 1.3 / 1.1 - 1) / 2, abs=1e-4)


def test_kind_margins_carry_their_own_uncertainty_over_sources():
    """The margin (a 90th percentile of pair ratio errors) is resampled by source: one source
    gives a degenerate interval; two sources whose pairs disagree give a wide one, and leaving
    either out gives the other's 90th percentile."""
    from mfulab.studies.predict import margins

    errors = [0.0, 0.1, 0.0, 0.5]
    df = _table(errors, [0.0] * 4, ["s1", "s1", "s2", "s2"])
    df["device"] = "a100"
    layout = {"n_devices": 8, "tp": 1}
    runs = [
        {"id": df.id[0], "model": {"n_layers": 2}, "layout": layout},
        {"id": df.id[1], "model": {"n_layers": 2}, "layout": layout | {"tp": 2}},
        {"id": df.id[2], "model": {"n_layers": 2}, "layout": layout},
        {"id": df.id[3], "model": {"n_layers": 2}, "layout": layout | {"tp": 4}},
    ]
    pairs = margins.kind_pairs(df, runs)
    got = margins.kind_uncertainty(pairs, n_boot=200)["layout"]
    # s1's pair is 10% apart, s2's 50%: the bootstrap's interval spans both, leaving one out gives the other
    assert got["p90_lo"] == pytest.approx(0.1) and got["p90_hi"] == pytest.approx(0.5)
    assert (got["p90_one_source_out_min"], got["p90_one_source_out_max"]) == pytest.approx((0.1, 0.5))
    assert got["largest_source_share"] == pytest.approx(0.5)
    table = margins.kind_table(margins.kind_margins(pairs), {"layout": got})
    assert table.p90_lo.iloc[0] == pytest.approx(0.1)


def test_the_null_model_is_scored_on_the_same_pairs_as_the_margins():
    """Each pair carries the null model's ratio error beside the model's; per kind, the null's
    90th percentile and the share of pairs the model gets closer, and the chapter's opening says
    what the model may decide from them."""
    from mfulab.studies.predict import margins

    df = _table([0.0, 0.1, 0.3], [0.0, 0.5, -0.3], ["a"] * 3)
    layout = {"n_devices": 8, "tp": 1, "recompute": "none"}
    runs = [
        {"id": df.id[0], "model": {"n_layers": 2}, "layout": layout},
        {"id": df.id[1], "model": {"n_layers": 2}, "layout": layout | {"tp": 2}},
        {"id": df.id[2], "model": {"n_layers": 2}, "layout": layout | {"tp": 4}},
    ]
    pairs = margins.kind_pairs(df, runs)
    assert list(pairs.null_ratio_error) == pytest.approx([0.5, 1 / 0.7 - 1, 1.5 / 0.7 - 1])
    null = margins.kind_null(pairs)["layout"]
    assert null["model_closer_share"] == 1.0 and null["null_p90"] > null["null_median"]
    table = margins.kind_table(margins.kind_margins(pairs), None, margins.kind_null(pairs))
    assert {"null_p90", "model_closer_share"} <= set(table.columns)
    # every pair here changes TP: the split group holds them all, the DP-only group none
    by_term = margins.layout_term_margins(pairs).set_index("layout pairs that change")
    assert by_term.loc["TP, PP or virtual stages", "pairs"] == 3 and len(by_term) == 1


def test_the_never_seen_group_leaves_out_the_rows_modelled_after_they_were_seen():
    """Holdout rows the model was extended to price after they were collected (HSDP, DDP +
    ZeroRedundancyOptimizer) are scored with the holdouts and again without them."""
    seen = list(uncertainty.MODELLED_AFTER_SEEN[:2])
    t = _table([0.1, 0.2, 0.05, 0.3], [0.2, 0.2, 0.2, 0.2], ["a", "a", "b", "b"])
    t["id"] = [seen[0], "x1", seen[1], "x2"]
    b = uncertainty.clustered_bootstrap(t, n_boot=50).set_index("group")
    assert b.loc["holdouts", "rows"] == 4 and b.loc[uncertainty.NEVER_SEEN, "rows"] == 2
    assert b.loc[uncertainty.NEVER_SEEN, "predictor_median_abs_error"] == pytest.approx(0.25)
