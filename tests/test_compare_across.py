"""Chapter 10's cross-chapter table: the claim ids several chapters judge, and which rows
disagree (same basis, different verdicts, neither left open)."""

from mfulab.studies.compare import across


def _records(rows_by_study):
    return {
        "machines": ["box"],
        "metrics": {
            study: {
                "box": {
                    "claims": [
                        {"id": i, "claim": f"{study} {i}", "verdict": v, "basis": b} for i, v, b in rows
                    ]
                }
            }
            for study, rows in rows_by_study.items()
        },
    }


def test_same_basis_different_decided_verdicts_disagree_and_open_ones_do_not():
    rec = _records(
        {
            "recompute": [("A12", "confirmed (analysis)", "analysis"), ("A17", "refuted", "arithmetic")],
            "parallelism": [("A12", "analytic only", "analysis")],
            "mfu": [("B2", "inconclusive on this machine", "toy")],
            "anatomy": [("B2", "shown", "toy"), ("B15", "refuted", "toy")],
            "dataloader": [("B2", "shown", "measured")],
        }
    )
    table = across.across_chapters(rec)
    assert set(table.claim_id) == {"A12", "B2"}  # A17 and B15 are judged in one chapter only
    flagged = table[table.disagrees_with != ""].set_index("study")
    assert flagged.disagrees_with.to_dict() == {
        "recompute": "parallelism: analytic only",
        "parallelism": "recompute: confirmed (analysis)",
    }  # an inconclusive toy run and a shown one on another basis disagree with nothing
    assert "A12 on box" in across.across_note(table) and "B2" in across.across_note(table)
    assert "no two chapters" in across.across_note(table[table.claim_id == "B2"])
    rec["metrics"]["recompute"]["box"]["claims"][0]["measured"] = "the article's layout on 910B cards"
    detail = across.flagged_detail(rec, table).set_index("study")
    assert list(detail.index) == ["parallelism", "recompute"] or set(detail.index) == {
        "parallelism",
        "recompute",
    }
    assert detail.loc["recompute", "how"] == "the article's layout on 910B cards"
    assert detail.loc["parallelism", "how"] == ""  # a row without its how: left empty, not invented


def test_an_open_verdict_beside_a_decided_one_on_the_same_basis_is_marked_apart():
    rec = _records(
        {
            "mfu": [("B2", "inconclusive on this machine", "toy")],
            "anatomy": [("B2", "shown", "toy")],
            "dataloader": [("B2", "shown", "measured")],
        }
    )
    table = across.across_chapters(rec).set_index("study")
    assert (table.disagrees_with == "").all()  # no contradiction: one run lacks the regime
    assert table.open_beside.to_dict() == {
        "mfu": "anatomy: shown",
        "anatomy": "mfu: inconclusive on this machine",
        "dataloader": "",  # another basis
    }
    assert "one chapter open where another decides" in across.across_note(table.reset_index())
    assert "B2 on box" in across.across_note(table.reset_index())
