"""The layout planner: which layouts exist, the fit / no-fit boundary, and terms that add up."""

import pytest

from mfulab import layouts, memory, parallel
from mfulab.config import ParameterError, preset

LINKS = dict(intra_node=layouts.Link(5e-6, 150e9), inter_node=layouts.Link(10e-6, 25e9))


def _cluster(n=64, memory_bytes=80e9):
    return layouts.Cluster(
        n_devices=n, devices_per_node=8, device_memory_bytes=memory_bytes, peak_flops_per_s=312e12, **LINKS
    )


def test_only_layouts_that_can_exist_are_candidates():
    cfg = preset("gpt2-350m")  # 16 heads, 24 layers
    rows = list(layouts.candidate_layouts(cfg, n_devices=64, global_batch=256))
    assert rows
    for r in rows:
        assert cfg.n_heads % r["tp"] == 0 and cfg.n_layers % (r["pp"] * r["v"]) == 0
        assert r["tp"] * r["pp"] * r["dp"] == 64 and r["dp"] * r["micro_batch"] * r["m"] == 256
        assert r["pp"] == 1 or r["m"] >= r["pp"]
        assert r["v"] == 1 or (r["pp"] > 1 and r["m"] % r["pp"] == 0)
    gpt2 = preset("gpt2-124m")  # 12 heads: no TP of 8
    assert all(r["tp"] != 8 for r in layouts.candidate_layouts(gpt2, n_devices=64, global_batch=256))


def test_terms_add_up_to_the_step_and_the_bubble_follows_the_formula():
    cfg = preset("gpt2-350m").with_(seq_len=1024)
    layout = {
        "tp": 2,
        "pp": 4,
        "dp": 8,
        "v": 2,
        "micro_batch": 1,
        "m": 8,
        "zero_stage": 1,
        "recompute_policy": "full",
    }
    t = layouts.layout_terms(cfg, layout, cluster=_cluster(), global_batch=64)
    parts = ("compute_s", "recompute_s", "pp_bubble_s", "tp_comm_s", "pp_p2p_s", "dp_exposed_s")
    assert sum(t[k] for k in parts) == pytest.approx(t["step_s"])
    bubble = parallel.pipeline_bubble_fraction(p=4, m=8, v=2)
    assert t["pp_bubble_s"] == pytest.approx(bubble * (t["compute_s"] + t["recompute_s"]))
    assert t["recompute_s"] > 0 and t["dp_exposed_s"] <= t["dp_comm_s"]


def test_fit_boundary_is_the_memory_margin():
    cfg = preset("gpt2-350m").with_(seq_len=1024)
    layout = {
        "tp": 1,
        "pp": 1,
        "dp": 8,
        "v": 1,
        "micro_batch": 4,
        "m": 2,
        "zero_stage": 2,
        "recompute_policy": "none",
    }
    mem = memory.memory_per_device(cfg, micro_batch=4, dp=8, zero_stage=2)["total_bytes"]
    margin = 0.1
    fits = layouts.layout_terms(
        cfg,
        layout,
        cluster=_cluster(n=8, memory_bytes=mem / (1 - margin)),
        global_batch=64,
        memory_margin=margin,
    )
    short = layouts.layout_terms(
        cfg, layout, cluster=_cluster(n=8, memory_bytes=0.99 * mem / (1 - margin)), global_batch=64
    )
    assert fits["fits"] and not short["fits"]
    assert fits["memory_gib"] == pytest.approx(mem / 2**30)


def test_plan_ranks_fitting_layouts_by_step_time_and_refuses_an_impossible_batch():
    cfg = preset("gpt2-350m").with_(seq_len=1024)
    df = layouts.plan(cfg, cluster=_cluster(), global_batch=256, top=None)
    assert df.fits.all() and df.step_s.is_monotonic_increasing
    small = layouts.plan(
        cfg, cluster=_cluster(memory_bytes=4e9), global_batch=256, top=None, include_unfit=True
    )
    assert (~small.fits).any() and small.fits.any()
    with pytest.raises(ParameterError, match="splits global batch"):
        layouts.plan(cfg, cluster=_cluster(), global_batch=3)
    with pytest.raises(ParameterError, match="do not fill nodes"):
        _cluster(n=12)
