"""The emulated mode on its own stack, sized for both sides of the title's trade-off, and the A6
row that reads them (``buckets.tradeoff``); the torchrun run of both modes is
test_buckets.test_ddp_layout_matches_rules_and_gradients_match_reference."""

import numpy as np
import pytest

from mfulab.studies.buckets import analysis, tradeoff
from mfulab.studies.buckets.params import Params, baseline_cap, configurations, mode_caps, stack_dims


def test_each_mode_has_its_stack_and_caps_and_older_records_fall_back():
    p = Params().to_dict()
    assert stack_dims(p, "real") == (p["stack_layers"], p["stack_hidden"], p["batch"])
    assert stack_dims(p, "emulated") == (16, 1024, 8)
    assert mode_caps(p, "emulated") == [0.0001, 4, 8, 16, 64] and mode_caps(p, "real") == p["bucket_caps_mb"]
    # the emulated sweep has no 25 MiB: its no_sync baseline is its largest cap
    assert baseline_cap(p, "real") == 25 and baseline_cap(p, "emulated") == 64
    assert {c[1] for c in configurations(p) if c[0] == "emulated"} == set(mode_caps(p, "emulated"))
    old = {k: v for k, v in p.items() if not k.startswith("emulated_stack") and k != "emulated_batch"}
    old.pop("emulated_bucket_caps_mb")
    assert stack_dims(old, "emulated") == stack_dims(old, "real")
    assert mode_caps(old, "emulated") == p["bucket_caps_mb"]
    # the memory estimate counts the emulated stack's replicas too
    gpu = Params(device="cuda", modes=["real", "emulated"]).predicted_peak_bytes()
    real_only = Params(device="cuda", modes=["real"]).predicted_peak_bytes()
    assert gpu - real_only >= 5 * 3 * 4 * 16 * 1024 * 1024


def _rows(mode: str, steps_ms: dict, rounds: int, rng) -> list:
    return [
        {
            "mode": mode,
            "bucket_cap_mb": cap,
            "variant": "default",
            "buckets": 1,
            "step_times_s": list(ms / 1e3 * (1 + 0.01 * rng.standard_normal(rounds))),
            "no_sync_times_s": [0.03] * rounds,
        }
        for cap, ms in steps_ms.items()
    ]


def _records(emulated_ms: dict, real_ms: dict | None = None, rounds: int = 12) -> dict:
    """Both sweeps: the real one's caps take ``real_ms``, the emulated one's ``emulated_ms`` (± a
    little noise per round)."""
    rng = np.random.default_rng(0)
    real_ms = real_ms or {0.0001: 170, 1: 47, 25: 44}
    rows = _rows("real", real_ms, rounds, rng) + _rows("emulated", emulated_ms, rounds, rng)
    params = {**Params().to_dict(), "modes": ["real", "emulated"]}
    fit = {"alpha_s": 476e-6, "link_bytes_per_s": 1.3e9}
    return {"params": params, "ddp": {"rows": rows, "world_size": 2, "allreduce_fit": fit}}


@pytest.mark.parametrize(
    ("emulated_ms", "verdict"),
    [
        ({0.0001: 212, 4: 210, 16: 214, 64: 254}, "shown"),
        ({0.0001: 212, 4: 205, 16: 214, 64: 209}, "inconclusive on this machine"),
        ({0.0001: 212, 4: 210, 16: 214, 64: 200}, "not shown"),  # one bucket is the fastest
    ],
)
def test_the_tradeoff_row_needs_both_sides_beyond_the_interval(emulated_ms, verdict):
    """Too many calls from the real sweep, a late start from the emulated one."""
    records = _records(emulated_ms)
    (row,) = tradeoff.tradeoff_claim(records)
    assert row.verdict == verdict and row.id == "A6" and row.basis == "toy regime"
    assert "too many calls: 0.0001 MiB takes 3." in row.evidence and "a late start: 64 MiB" in row.evidence
    # one all-reduce of the 16 × 1024² stack's 64 MiB at the calibration's α–β
    assert 50e-3 < analysis.one_shot_s(records, "emulated") < 55e-3
    assert f"{analysis.one_shot_s(records, 'emulated') * 1e3:.0f} ms" in row.evidence


def test_the_too_many_calls_side_comes_from_the_real_sweep():
    records = _records({0.0001: 212, 4: 210, 64: 254}, real_ms={0.0001: 45, 1: 47, 25: 44})
    (row,) = tradeoff.tradeoff_claim(records)
    assert row.verdict == "inconclusive on this machine"


def test_no_row_without_both_sweeps():
    records = _records({0.0001: 95, 4: 80, 64: 128})
    records["params"]["modes"] = ["real"]
    assert tradeoff.tradeoff_claim(records) == []
