"""The α–β model where it applies (the bandwidth regime) and article B's NCCL environment block."""

import pandas as pd
import pytest

from mfulab.analytic import comm
from mfulab.studies.overlap import ab_regime, nccl_reference


def _records(llc=8 * 2**20):
    return {"device": "cpu", "last_level_cache_bytes": llc, "collectives": {"world_size": 2}}


def test_regime_fit_describes_times_that_follow_the_model_and_names_a_slower_calibration():
    """Times that follow α–β exactly above a quarter of the cache fit with no residual there; a
    calibration with twice the bandwidth misses them by about half, and the sentence says the
    machine's speed moved. Below the floor the times are noise the fit must not see."""
    alpha_s, link = 1e-3, 1e9
    sizes = [2**k for k in range(10, 27)]
    times = [
        comm.collective_time("all_reduce", s, 2, alpha_s=alpha_s, link_bytes_per_s=link)
        if s >= 2 * 2**20
        else 5e-3
        for s in sizes
    ]
    rows = pd.DataFrame({"size_bytes": sizes, "time_s": times})
    fit = ab_regime.regime_fit(_records(), rows, {"alpha_s": alpha_s, "link_bytes_per_s": 2 * link})
    assert fit["floor_bytes"] == 2 * 2**20 and fit["sizes"] == 6
    assert fit["max_abs_residual"] == pytest.approx(0, abs=1e-9)
    assert fit["held_out_median_abs_error"] == pytest.approx(0, abs=1e-9)  # each size from the others
    assert fit["bandwidth_vs_calibration"] == pytest.approx(0.5)
    assert -0.5 < fit["calibration_median_error"] < -0.35
    text = ab_regime.regime_sentence(fit)
    assert "describes this machine" in text and "speed moved" in text
    assert ab_regime.regime_fit(_records(llc=2**30), rows, {"alpha_s": 1, "link_bytes_per_s": 1}) is None
    assert "no fit" in ab_regime.regime_sentence(None)


def test_b16_refutes_the_variable_nothing_reads():
    detail, memory, stable, connections, timeout, qps, gdr, site = nccl_reference.b16_env_claims()
    assert detail.verdict == "refuted" and "TORCH_DISTRIBUTED_DEBUG" in detail.evidence
    # one verdict per statement: the buffer's memory is what the variable sets (documentation alone:
    # it confirms as it refutes); "more stable" is not checkable
    assert memory.verdict == "confirmed" and memory.basis == detail.basis == "documented specification"
    assert "4× the memory" in memory.evidence
    assert stable.verdict == "not checkable" and "busbw" in stable.evidence
    assert connections.verdict == "not checkable" and "Megatron-LM requires 1" in connections.evidence
    # one row per InfiniBand line: 4.096 µs × 2^20 = 4.3 s by default, × 2^22 = 17.2 s
    assert timeout.verdict == "confirmed" and "4.3 s" in timeout.evidence and "17.2 s" in timeout.evidence
    assert qps.verdict == "confirmed" and "default 1" in qps.evidence
    assert gdr.verdict == "not checkable" and "PHB" in gdr.evidence
    assert site.verdict == "not checkable" and "RoCE" in site.evidence
