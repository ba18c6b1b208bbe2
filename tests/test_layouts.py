"""The layout planner: which layouts exist, ranked by the one step model (step.step_time),
the fit / no-fit boundary, and the planner and the predictor agreeing on every layout."""

import pytest

from mfulab.analytic import layouts, step
from mfulab.analytic.config import preset
from mfulab.errors import ParameterError


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


def test_the_planner_and_the_predictor_agree_on_every_layout_they_both_rank():
    cfg = preset("llama2-13b").with_(seq_len=2048)
    kw = dict(n_devices=64, global_batch=128, device="a100", matmul_share_of_mamf=0.8)
    df = layouts.plan(cfg, top=None, include_unfit=True, **kw)
    assert len(df) > 50
    for _, r in df.iterrows():
        out = step.step_time(
            cfg,
            n_devices=64,
            tp=int(r.tp),
            pp=int(r.pp),
            vpp=int(r.v),
            micro_batch=int(r.micro_batch),
            global_batch=128,
            recompute=r.recompute_policy,
            sequence_parallel=bool(r.tp > 1),
            zero_stage=int(r.zero_stage),
            device="a100",
            matmul_share_of_mamf=0.8,
        )
        assert out["step_s"] == pytest.approx(r.step_s, rel=1e-12)
        assert out["memory_gib"] == pytest.approx(r.memory_gib, rel=1e-12)
        assert sum(r[k] for k in step.TERMS) == pytest.approx(r.step_s)


def test_plan_ranks_fitting_layouts_by_step_time_and_refuses_an_impossible_batch():
    cfg = preset("gpt2-350m").with_(seq_len=1024)
    df = layouts.plan(cfg, n_devices=64, global_batch=256, device="a100", top=None)
    assert df.fits.all() and df.step_s.is_monotonic_increasing
    small = layouts.plan(
        preset("llama2-13b"), n_devices=16, global_batch=32, device="a100", top=None, include_unfit=True
    )
    assert (~small.fits).any() and small.fits.any()
    with pytest.raises(ParameterError, match="splits global batch"):
        layouts.plan(cfg, n_devices=64, global_batch=3, device="a100")
    with pytest.raises(ParameterError, match="do not fill nodes"):
        layouts.plan(cfg, n_devices=12, global_batch=12, device="a100")


def test_the_fit_boundary_is_the_memory_margin():
    cfg = preset("llama2-13b")
    kw = dict(n_devices=16, tp=4, pp=1, micro_batch=1, global_batch=16, zero_stage=1, device="a100")
    need = step.step_time(cfg, **kw, memory_margin=0.0)["memory_gib"] * 2**30
    capacity = 80 * 2**30
    margin_fits = 1 - need / capacity - 1e-6
    assert step.step_time(cfg, **kw, memory_margin=margin_fits)["fits"]
    assert not step.step_time(cfg, **kw, memory_margin=margin_fits + 2e-6)["fits"]


def test_a_framework_restricts_the_zero_stages_the_planner_ranks():
    cfg = preset("gpt2-350m").with_(seq_len=1024)
    df = layouts.plan(cfg, n_devices=64, global_batch=256, device="a100", top=None, framework="fsdp")
    assert set(df.zero_stage) <= {2, 3} and set(df.framework) == {"fsdp"}
