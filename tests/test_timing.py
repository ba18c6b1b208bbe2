import numpy as np
import pytest

from mfulab.measure import timing
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim, verdict_below, verdict_from_interval


def test_summarize_median_iqr():
    t = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0], label="x")
    assert t.median_s == 3.0 and t.q1_s == 2.0 and t.q3_s == 4.0 and t.n == 5 and t.iqr_s == 2.0


def _timing(samples, label):
    return timing.summarize(samples, label=label)


def test_compare_detects_a_clear_speedup_and_says_inconclusive_otherwise():
    rng = np.random.default_rng(0)
    slow = _timing(rng.normal(2.0, 0.05, 30), "slow")
    fast = _timing(rng.normal(1.0, 0.05, 30), "fast")
    same = _timing(rng.normal(2.0, 0.05, 30), "same")
    c = timing.compare_timings(slow, fast)
    assert c.verdict == "faster" and c.ratio_lo > 1.8 and c.ratio_hi < 2.2
    assert timing.compare_timings(fast, slow).verdict == "slower"
    assert timing.compare_timings(slow, same).verdict == "inconclusive"


def test_matmul_ceiling_and_bandwidth_records():
    ceil = timing.matmul_ceiling(sizes=(32, 64), min_run_time_s=0.02)
    assert ceil["best_flops_per_s"] == max(r["achieved_flops_per_s"] for r in ceil["rows"])
    assert [r["flops"] for r in ceil["rows"]] == [2 * 32**3, 2 * 64**3]
    bw = timing.memory_bandwidth(sizes_bytes=(1 << 20,), min_run_time_s=0.02)
    assert bw["rows"][0]["moved_bytes"] == 2 * (1 << 20) and bw["plateau_bytes_per_s"] > 0


def test_verdicts():
    assert verdict_from_interval(1.4, 1.6, threshold=1.3) == "confirmed"
    assert verdict_from_interval(0.9, 1.5, threshold=1.3) == "inconclusive on this machine"
    assert verdict_from_interval(0.8, 0.95, threshold=1.3) == "refuted"
    assert verdict_from_interval(1.05, 1.2, threshold=1.3) == "refuted"  # smaller than claimed
    assert verdict_from_interval(0.95, 1.2, threshold=1.3) == "inconclusive on this machine"
    # a claimed bound: more workers gain under 1.1×
    assert verdict_below(0.9, 1.08, threshold=1.1) == "confirmed"
    assert verdict_below(1.12, 1.3, threshold=1.1) == "refuted"
    assert verdict_below(1.0, 1.2, threshold=1.1) == "inconclusive on this machine"
    # an effect capped by Amdahl: the measured lower bound against the largest ceiling's upper bound
    assert verdicts.verdict_under_ceiling(1.45, 2.0, threshold=1.43) == "confirmed"
    assert verdicts.verdict_under_ceiling(1.05, 1.2, threshold=1.43) == "refuted"
    assert verdicts.verdict_under_ceiling(1.05, 1.5, threshold=1.43) == "inconclusive on this machine"
    # B2: shown with three of its four losses, never with a name outside them (useful compute is
    # not a loss)
    assert verdicts.b2_verdict(["slow operators", "data wait", "scheduling waste"]) == "shown"
    assert (
        verdicts.b2_verdict(["slow operators", "slow operators", "data wait"])
        == "inconclusive on this machine"
    )
    with pytest.raises(ValueError, match="not B2 categories"):
        verdicts.b2_verdict(["useful compute", "data wait", "scheduling waste"])
    with pytest.raises(ValueError):
        Claim("X", "c", "m", "probably", "e", "measured here")


def test_interleaved_rounds_are_paired_and_shuffled():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    out = timing.interleaved(fns, rounds=6, warmup=0, min_block_s=0.0, seed=1)
    assert set(out) == {"a", "b", "c"} and all(t.paired and t.n == 6 for t in out.values())
    # after the one sizing call per variant: 6 rounds, each running every variant exactly once
    rounds = [calls[3 + 3 * i : 6 + 3 * i] for i in range(6)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # the order is drawn per round


def test_paired_comparison_cancels_drift_that_independent_resampling_does_not():
    drift = np.linspace(1.0, 3.0, 20)  # the machine slows down 3× during the run
    rng = np.random.default_rng(0)
    a = drift * 1.10 * rng.normal(1, 0.005, 20)
    b = drift * 1.00 * rng.normal(1, 0.005, 20)
    paired = timing.compare_timings(
        timing.summarize(a, "a", paired=True), timing.summarize(b, "b", paired=True), run_to_run_drift=0
    )
    independent = timing.compare_timings(
        timing.summarize(a, "a"), timing.summarize(b, "b"), run_to_run_drift=0
    )
    assert paired.paired and not independent.paired
    assert paired.verdict == "faster" and paired.within_lo > 1.05
    assert independent.verdict == "inconclusive"


def test_run_to_run_drift_widens_the_interval():
    rng = np.random.default_rng(3)
    a = _timing(rng.normal(1.04, 0.002, 30), "a")
    b = _timing(rng.normal(1.00, 0.002, 30), "b")
    tight = timing.compare_timings(a, b, run_to_run_drift=0)
    wide = timing.compare_timings(a, b, run_to_run_drift=0.05)
    assert tight.verdict == "faster"  # a 4% effect, well resolved within one run...
    assert wide.verdict == "inconclusive"  # ...but smaller than the drift between fresh runs
    assert wide.ratio_lo == pytest.approx(tight.within_lo / 1.05)
    with pytest.raises(ValueError):
        timing.compare_timings(a, b, run_to_run_drift=-0.1)


def test_summary_line_groups_rows_of_one_claim():
    from mfulab.studykit.verdicts import summary_line

    rows = [
        Claim("A1", "c", "m", "confirmed", "e", "measured here"),
        Claim("B15", "c", "m", "refuted", "e", "the article's own arithmetic"),
        Claim("B15", "c", "m", "confirmed", "e", "the article's own arithmetic"),
    ]
    assert summary_line(rows) == "* **A1**: confirmed; **B15**: refuted / confirmed (2 rows)."


def test_interleaved_with_a_fixed_block_size_makes_no_sizing_call():
    calls = []
    out = timing.interleaved({"a": lambda: calls.append("a")}, rounds=3, warmup=1, number=4)
    assert len(calls) == 1 + 3 * 4 and out["a"].n == 3
    with pytest.raises(ValueError):
        timing.interleaved({"a": lambda: None}, rounds=3, number=0)


def test_a_matmul_ceiling_records_the_tf32_override_variables(monkeypatch):
    """NVIDIA's containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE: "fp32" ceilings are then TF32's,
    whatever allow_tf32 says; the record must say so."""
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    out = timing.matmul_ceiling(device="cpu", dtype="fp32", sizes=(32,), min_run_time_s=0.01)
    assert out["tf32_overrides"] == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
    assert (
        timing.matmul_ceiling(device="cpu", dtype="fp32", sizes=(32,), min_run_time_s=0.01)["tf32_overrides"]
        == {}
    )


def test_interval_rules_for_a_claimed_range_and_a_claimed_band():
    """The generic rules two studies use (buckets' flag rows, recompute's B7 size): confirmed
    only inside, refuted only where the interval excludes the claim, otherwise inconclusive."""
    from mfulab.studykit import verdicts

    rng = dict(claimed=1.03, bound=1.2, drift=0.05)
    assert verdicts.confirmable_bound(0.05, 1.03) == pytest.approx(1.03 * 1.05**2)
    assert verdicts.verdict_in_range(1.05, 1.17, **rng) == "confirmed"
    assert verdicts.verdict_in_range(0.93, 1.02, **rng) == "refuted"
    assert verdicts.verdict_in_range(1.25, 1.4, **rng) == "inconclusive on this machine"  # past the bound
    assert verdicts.verdict_in_range(0.8, 0.95, **rng) == "inconclusive on this machine"  # below 1: noise
    assert verdicts.verdict_in_range(1.05, 1.07, claimed=1.03, bound=1.1, drift=0.05).startswith(
        "inconclusive"
    )
    band = dict(band=(1.25, 1.33), drift=0.05)
    assert verdicts.verdict_in_band(1.24, 1.38, **band) == "confirmed"
    assert verdicts.verdict_in_band(1.02, 1.15, **band) == "refuted"
    assert verdicts.verdict_in_band(1.45, 1.6, **band) == "refuted"
    assert verdicts.verdict_in_band(1.23, 1.46, **band) == "inconclusive on this machine"


def test_the_reference_training_step_learns_and_frees_its_gradients():
    import torch

    from mfulab.analytic.config import preset
    from mfulab.measure.train import reference_model, synthetic_batch, train_step

    cfg = preset("tiny").with_(vocab_size=64, seq_len=8)
    model, opt = reference_model(cfg, attn_impl="sdpa", device="cpu", lr=1e-2)
    x, y = synthetic_batch(torch.Generator().manual_seed(0), cfg, 4, "cpu")
    assert x.shape == y.shape == (4, 8) and torch.equal(x[:, 1:], y[:, :-1])
    first = train_step(model, opt, x, y, device="cpu", dtype="fp32").item()
    for _ in range(20):
        last = train_step(model, opt, x, y, device="cpu", dtype="fp32").item()
    assert last < first  # one batch, twenty steps: the loss falls
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)
    again, _ = reference_model(cfg, attn_impl="sdpa", device="cpu")
    fresh, _ = reference_model(cfg, attn_impl="sdpa", device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), fresh.parameters()))  # seeded


def test_matmul_ceiling_stops_at_a_size_whose_one_call_is_too_slow():
    """A dtype without a fast kernel here (bf16 emulated on a CPU without AVX512_BF16 or AMX took
    100 s for one 2048³ call) must not stall the calibration: a size whose first call exceeds
    ``max_call_s`` is not timed, nor any larger; the smallest always is."""
    out = timing.matmul_ceiling(sizes=(16, 32, 64), min_run_time_s=0.01, max_call_s=0.0)
    assert [r["size"] for r in out["rows"]] == [16] and out["best_size"] == 16
    assert out["skipped_sizes"] == [32, 64] and "32³ fp32 matmul took" in out["skipped_because"]
    full = timing.matmul_ceiling(sizes=(16, 32), min_run_time_s=0.01, max_call_s=60.0)
    assert [r["size"] for r in full["rows"]] == [16, 32] and full["skipped_sizes"] == []


def test_tf32_state_follows_the_override_variables(monkeypatch):
    """D14: cuBLAS honours NVIDIA_TF32_OVERRIDE=0 (TF32 off) and NVIDIA's containers set
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (TF32 on) whatever allow_tf32 says; the recorded state
    must follow them (checked on the CUDA path's logic, which a CPU build can run)."""
    import torch

    for name in timing.TF32_OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        assert timing.tf32_state("cuda") is False
        monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
        assert timing.tf32_state("cuda") is True
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")  # off wins: cuBLAS never uses TF32 then
        assert timing.tf32_state("cuda") is False
        assert timing.tf32_state("cpu") is None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_a_claim_of_possibility_needs_one_scenario_where_it_happens():
    assert verdicts.any_scenario([False, True, False]) == "confirmed"
    assert verdicts.any_scenario([False, False]) == "refuted"
    assert verdicts.any_scenario([False, None]) == "analytic only"  # none yes, one open
    with pytest.raises(ValueError):
        verdicts.any_scenario([])


def test_one_rule_over_scenarios_yes_no_or_neither():
    assert verdicts.over_scenarios([True, True]) == "confirmed"
    assert verdicts.over_scenarios([False, False]) == "refuted"
    assert verdicts.over_scenarios([True, False]) == "analytic only"
    assert verdicts.over_scenarios([True, None]) == "analytic only"  # a tie leaves it open
    assert verdicts.over_scenarios([False, None]) == "analytic only"
    with pytest.raises(ValueError):
        verdicts.over_scenarios([])
