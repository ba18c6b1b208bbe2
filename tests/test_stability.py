import pytest

from mfulab import results
from mfulab.errors import ParameterError
from mfulab.run import stability
from mfulab.studykit import stability_report
from mfulab.studykit.verdicts import Claim


def test_row_keys_number_repeated_ids():
    claims = [Claim(i, "c", "m", "confirmed", "e", "measured here") for i in ("A1", "B6", "B6", "B6")]
    assert stability_report.row_keys(claims) == ["A1", "B6", "B6 (2)", "B6 (3)"]


def test_summarize_runs_finds_flips_and_drift():
    runs = [
        {"verdicts": {"A": "confirmed", "B": "refuted"}, "metrics": {"x": 1.0, "y": 2.0}},
        {
            "verdicts": {"A": "confirmed", "B": "inconclusive on this machine"},
            "metrics": {"x": 1.1, "y": 2.0},
        },
        {"verdicts": {"A": "confirmed", "B": "refuted"}, "metrics": {"x": 0.9, "y": 2.0}},
    ]
    report = stability.summarize_runs(runs)
    assert report["flips"] == ["B"]
    assert report["verdicts"]["A"] == ["confirmed"] * 3
    assert report["drift"]["x"]["drift"] == pytest.approx(0.2)
    assert report["drift"]["y"]["drift"] == 0.0


def test_numeric_keeps_only_finite_numbers():
    assert stability_report.numeric({"a": 1, "b": "flash", "c": float("nan"), "d": True, "e": 2.5}) == {
        "a": 1.0,
        "e": 2.5,
    }


def test_describe_says_when_nothing_flipped_and_when_stale():
    report = stability.summarize_runs([{"verdicts": {"A": "confirmed"}, "metrics": {"x": 1.0}}] * 2)
    report.update(
        runs=2, profile="cpu", measured_at="now", library_sha256="old", assumed_run_to_run_drift=0.05
    )
    text = stability_report.describe(report, current_library="new")
    assert "no verdict flipped" in text and "earlier library" in text
    assert "No stability record" in stability_report.describe(None)


def test_refuses_a_single_run_and_a_study_without_measurement():
    with pytest.raises(ParameterError, match="at least 2"):
        stability.run("fusion", n=1)
    with pytest.raises(ParameterError, match="measures nothing of its own"):
        stability.run("compare", n=2)


def test_only_declared_metrics_count_towards_the_drift_target():
    runs = [{"verdicts": {}, "metrics": {"ratio": r, "iqr_s": q}} for r, q in ((1.0, 1.0), (1.05, 2.0))]
    report = stability.summarize_runs(runs, declared={"ratio"})
    assert report["max_declared_drift"] == pytest.approx(0.05 / 1.025)
    assert report["drift"]["iqr_s"]["declared"] is False


def test_calibration_figures_read_every_part():
    cal = {
        "stamp": {"torch": "x"},
        "parts": {
            "matmul:fp32": {"best_flops_per_s": 3e11},
            "bandwidth": {"plateau_bytes_per_s": 2.5e10},
            "collectives:gloox2": {"alpha_s": 1.5e-4, "link_bytes_per_s": 1.5e9},
        },
    }
    assert stability.calibration_figures(cal) == {
        "matmul:fp32 best_flops_per_s": 3e11,
        "bandwidth plateau_bytes_per_s": 2.5e10,
        "collectives:gloox2 alpha_s": 1.5e-4,
        "collectives:gloox2 link_bytes_per_s": 1.5e9,
    }


def test_published_render_is_compared_with_the_runs(tmp_path):
    from mfulab import results

    runs = [{"verdicts": {"A": "confirmed", "A (2)": "refuted"}, "metrics": {"x": v}} for v in (1.0, 1.02)]
    report = stability.summarize_runs(runs)
    report.update(runs=2, profile="cpu", measured_at="now", library_sha256="s", assumed_run_to_run_drift=0.05)
    results.save_table(tmp_path, "claims", _claims_table(["A", "A"], ["confirmed", "refuted"]))
    results.save_metrics(tmp_path, {"x": 1.0})
    agree = stability_report.describe(report, published=stability_report.published_outcome(tmp_path))
    assert "agrees with all 2 runs in every row" in agree and "`x` 2.0%" in agree

    results.save_table(tmp_path, "claims", _claims_table(["A", "A"], ["confirmed", "confirmed"]))
    results.save_metrics(tmp_path, {"x": 1.5})
    differ = stability_report.against_published(report, stability_report.published_outcome(tmp_path))
    assert (
        "differ from the runs' in 1 row(s): A (2)" in differ and "`x` 49.0%" in differ
    )  # (1.5 − 1.0) / 1.02
    assert stability_report.published_outcome(tmp_path / "none") is None


def _claims_table(ids, verdicts):
    import pandas as pd

    return pd.DataFrame({"id": ids, "claim": "c", "measured": "m", "verdict": verdicts, "evidence": "e"})


def test_the_basis_sets_the_label():
    """One rule (docs/claims.md): a toy regime's or a construction's 'confirmed' is only shown,
    a toy's 'refuted' is not shown, an analysis's decision is marked, and a label that does not
    go with its basis is refused."""
    from mfulab.studykit import verdicts

    def row(decision, basis):
        return Claim("X", "c", "m", decision, "e", basis).verdict

    assert row("confirmed", verdicts.TOY) == "shown" and row("refuted", verdicts.TOY) == "not shown"
    assert row("confirmed", verdicts.CONSTRUCTION) == "shown"
    assert row("refuted", verdicts.CONSTRUCTION) == "refuted"  # an exact count can refute
    assert row("confirmed", verdicts.ANALYSIS) == "confirmed (analysis)"
    assert row("confirmed", verdicts.MEASURED) == "confirmed"
    assert row("inconclusive on this machine", verdicts.TOY) == "inconclusive on this machine"
    with pytest.raises(ValueError):
        row("analytic only", verdicts.MEASURED)
    with pytest.raises(ValueError):
        row("confirmed", "a hunch")
    # a datasheet or a tool's documentation can decide; the article's words alone cannot
    assert row("refuted", verdicts.DOCUMENTED) == "refuted"
    assert row("not checkable", verdicts.STATEMENT) == "not checkable"
    with pytest.raises(ValueError):
        row("confirmed", verdicts.STATEMENT)


def test_keep_holds_the_last_runs_measurements(tmp_path, monkeypatch):
    """``make stability KEEP=DIR`` copies the last fresh run's measurements, so that ``make
    <study> FROM=DIR`` renders one of the runs stability.json describes, not a fourth one."""
    from mfulab.studykit.outcome import Outcome
    from mfulab.studykit.registry import Study

    made = []

    def fake_measure(study_id, param_file, overrides, out, results_root):
        results.save_measurements(out, {"run": len(made)})
        made.append(out)

    monkeypatch.setattr(stability, "_measure_once", fake_measure)
    monkeypatch.setattr(Study, "outcome_fn", lambda self: lambda r, p: Outcome([], {"run": r["run"]}))
    keep = tmp_path / "last"
    path = stability.run("mfu", n=3, profile="smoke", results_root=tmp_path / "results", keep=keep)
    assert len(made) == 3 and results.load_measurements(keep) == {"run": 2}
    assert results.read_json(path)["drift"]["run"]["values"] == [0.0, 1.0, 2.0]


def test_claims_read_as_a_verdict_sentence_and_a_list():
    from mfulab.studykit import verdicts

    c = Claim(
        "A6",
        "the sweet spot",
        "a simulator",
        "refuted",
        "best 400 MiB (ties: 200; 400); 19 of 21",
        "toy regime",
    )
    assert verdicts.evidence_parts(c.evidence) == ["best 400 MiB (ties: 200; 400)", "19 of 21"]
    text = verdicts.claims_markdown([c])
    # a summary table to scan, the key number its first clause; every row in full, folded below
    assert text.startswith("| id | verdict | basis | the article says | key number |")
    assert "| A6 | **not shown** | toy regime | the sweet spot | best 400 MiB (ties: 200; 400) |" in text
    assert "**A6 · not shown** (toy regime): the sweet spot" in text.split("<details>")[1]
    assert "- best 400 MiB (ties: 200; 400)\n- 19 of 21\n- *how*: a simulator" in text
    pipe = Claim("B1", "max |diff| is 0", "a count", "confirmed", "max |diff| 0", "by construction")
    assert "max \\|diff\\| is 0" in verdicts.claims_markdown([pipe]).splitlines()[2]


def test_a_key_number_is_cut_at_a_word_boundary():
    from mfulab.studykit import verdicts

    long = "reaches 60.7% of the measured matmul ceiling " * 6
    cell = verdicts._cell(long, verdicts.KEY_NUMBER_CHARS)
    assert cell.endswith(" …") and len(cell) <= verdicts.KEY_NUMBER_CHARS + 1
    # the text before the ellipsis is whole words of the original
    assert long.startswith(cell.removesuffix(" …")) and long[len(cell) - 2] == " "


def test_an_analysis_at_assumed_configurations_is_labelled_as_an_analysis():
    from mfulab.studykit import verdicts

    assert verdicts.label("confirmed", verdicts.ASSUMED) == "confirmed (analysis)"
    row = Claim("B10", "a cost", "a model", "analytic only", "x", verdicts.ASSUMED)
    assert row.verdict == "analytic only"
    with pytest.raises(ValueError):
        Claim("B10", "a cost", "a model", "shown", "x", verdicts.ASSUMED)
