"""Exact saved-tensor accounting, policies, parameters and the planner."""

import collections
from pathlib import Path

import pytest
import torch

from mfulab import memprobe
from mfulab.config import ParameterError, TransformerConfig
from mfulab.model import GPT
from mfulab.studies import get
from mfulab.studies.recompute import analysis, bench, planner
from mfulab.studies.recompute.params import Params

STUDY = get("recompute")
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / STUDY.notebook

CFG = TransformerConfig(n_layers=3, d_model=64, n_heads=4, vocab_size=128, seq_len=32, name="t3")


def test_single_linear_layer_saves_its_input_only():
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(5, 16, requires_grad=True)
    with memprobe.SavedTensorAccountant(lin) as acc:
        y = lin(x)
    rows = acc.unique()
    assert [r["bytes"] for r in rows] == [5 * 16 * 4]  # the weight is a parameter: excluded
    del y


def per_layer(policy, attn_impl, every_k=1, micro_batch=2):
    rows = bench.saved_tensors(
        CFG, policy=policy, every_k=every_k, micro_batch=micro_batch, attn_impl=attn_impl
    )
    out = collections.defaultdict(int)
    for r in rows:
        if r["layer"] is not None:
            out[r["layer"]] += r["bytes"]
    return dict(out)


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
@pytest.mark.parametrize("policy", ["none", "selective", "mlp", "full"])
def test_saved_bytes_equal_table2_plus_named_terms(policy, attn_impl):
    measured = per_layer(policy, attn_impl)
    terms = analysis.reference_layer_terms(CFG, micro_batch=2, policy=policy, attn_impl=attn_impl)
    expected = sum(terms.values())
    assert measured == {0: expected, 1: expected, 2: expected}


def test_attention_block_by_hand():
    # naive attention, no recompute, b=2, s=32, h=64, a=4, fp32: 16 s·b·h elements + softmax a·s²·b
    # + a 32×32 bool mask + 2 LayerNorms × (mean, rstd) × s·b floats
    s, b, h, a = 32, 2, 64, 4
    assert per_layer("none", "naive")[0] == 4 * (16 * s * b * h + a * s * s * b) + s * s + 2 * 2 * s * b * 4


def test_every_k_and_full_keep_only_block_inputs():
    assert per_layer("every_k", "naive", every_k=2) == {
        0: 2 * 32 * 64 * 4,
        1: 2 * 32 * 64 * 4,
        2: per_layer("none", "naive")[2],
    }


def test_gradients_agree_across_policies():
    ref = bench.gradients(CFG, policy="none", every_k=1, attn_impl="naive", device="cpu", micro_batch=2)
    for policy in ("selective", "mlp", "full", "every_k") + (("sac",) if bench.sac_available() else ()):
        g = bench.gradients(CFG, policy=policy, every_k=1, attn_impl="naive", device="cpu", micro_batch=2)
        for name in ref:
            torch.testing.assert_close(g[name], ref[name], rtol=1e-5, atol=1e-6)


def test_recompute_flops_counted():
    none = bench.hardware_flops_per_token(CFG, policy="none", every_k=1, device="cpu")
    full = bench.hardware_flops_per_token(CFG, policy="full", every_k=1, device="cpu")
    sel = bench.hardware_flops_per_token(CFG, policy="selective", every_k=1, device="cpu")
    mlp = bench.hardware_flops_per_token(CFG, policy="mlp", every_k=1, device="cpu")
    L, h, s = 3, 64, 32
    # torch's non-reentrant checkpoint stops recomputing once the tensors backward needs are
    # back, so the last matmul of each region (A·V, the MLP's down projection) is not re-run
    assert sel - none == L * 2 * s * h  # QKᵀ forward again, per token
    assert mlp - none == L * 2 * h * 4 * h  # the up projection again
    assert full - none == L * (2 * 8 * h * h + 4 * s * h)  # all forward matmuls but the down projection


def test_policy_validation():
    with pytest.raises(ParameterError, match="recompute policy must be one of"):
        bench.model_kwargs("half", every_k=1, n_layers=4)
    with pytest.raises(ParameterError, match="every_k"):
        bench.model_kwargs("every_k", every_k=5, n_layers=4)
    with pytest.raises(ParameterError):
        GPT(CFG, recompute="full", recompute_layers=4)


def case(**changes):
    base = {
        "name": "t",
        "preset": "article-13b",
        "device_memory_gib": 64,
        "peak_flops_per_s": 3.2e14,
        "tp": 8,
        "pp": 1,
        "dp": 4,
        "zero_stage": 2,
        "global_batch": 32,
        "micro_batches": [1, 2, 4, 8],
        "policies": ["none", "full"],
    }
    base.update(changes)
    return base


def test_planner_fit_boundary_and_shortfall():
    plan = planner.plan_case(case())
    none = plan[plan.policy == "none"].set_index("micro_batch")
    # fits iff the memory model's total is within the card
    for _, row in none.iterrows():
        assert row.fits == (row.total_gib <= 64)
        assert row.shortfall_gib == pytest.approx(max(0.0, row.total_gib - 64))
    assert none.loc[1, "fits"] and not none.loc[8, "fits"]
    tiny = planner.plan_case(case(device_memory_gib=1))
    assert not tiny.fits.any() and (tiny.shortfall_gib > 0).all() and tiny.tokens_per_s.isna().all()
    full = plan[plan.policy == "full"].set_index("micro_batch")
    assert (full.mfu < full.hfu).all()  # recomputed FLOPs count in HFU only


def test_planner_bad_cases():
    with pytest.raises(ParameterError, match="misses"):
        planner.plan_case({"name": "x"})
    with pytest.raises(ParameterError, match="every_k"):
        planner.plan_case(case(policies=["every_k:41"]))
    with pytest.raises(ParameterError, match="positive"):
        planner.plan_case(case(tp=0))


@pytest.mark.parametrize(
    "values, name",
    [
        ({"policies": ["none", "half"]}, "policies"),
        ({"policies": ["full"]}, "policies"),
        ({"every_k": 99}, "every_k"),
        ({"micro_batches": []}, "micro_batches"),
        ({"micro_batches": [0, 2]}, "micro_batches"),
        ({"attn_impl": "flash"}, "attn_impl"),
        ({"memory_budget_mib": 0}, "memory_budget_mib"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"preset": "no-such-model"}, "no-such-model"),
        ({"planner_cases": [{"name": "x"}]}, "misses"),
        ({"sequence": 4}, "unknown parameters: sequence"),
    ],
)
def test_parameters_refused_with_their_name(values, name):
    with pytest.raises(ParameterError, match=name):
        Params.from_dict(values)


def test_every_k_checked_only_when_measured():
    assert Params(policies=("none", "full"), every_k=99).every_k == 99


def _cells(path):
    """The notebook's code cells (jupytext percent format) as (marker line, source), in order."""
    cells = [c.split("\n", 1) for c in path.read_text().split("\n# %%")[1:]]
    return [(head, body) for head, body in cells if not head.startswith(" [markdown]")]


def _notebook_planner(p, tmp_path):
    """Run the notebook's planner cell as it stands, with ``p`` for its parameters."""
    from mfulab import plots, results
    from mfulab.studies.recompute import figures, stated

    cell = next(body for _, body in _cells(NOTEBOOK) if "planner.plans_table" in body)
    ns = {
        "p": p,
        "out": tmp_path,
        "results": results,
        "plots": plots,
        "figures": figures,
        "planner": planner,
        "stated": stated,
        "display": lambda *a: None,
    }
    exec(cell, ns)
    return ns["plans"]


def test_notebook_defaults_run_the_planner(tmp_path):
    # opened by hand, the notebook's parameters cell injects nothing: the defaults must carry
    # the planner cases (an empty list once made pd.concat([]) fail)
    params_cell = next(body for head, body in _cells(NOTEBOOK) if head == ' tags=["parameters"]')
    ns = {}
    exec(params_cell, ns)
    assert ns["params"] == {} and ns["from_dir"] == ""
    p = Params.from_dict(ns["params"])
    assert p == Params() and len(p.planner_cases) == 5
    plans = _notebook_planner(p, tmp_path)
    assert set(plans.case) == {c["name"] for c in p.planner_cases}
    assert len(analysis._a17_claim(plans)) == 1


def test_no_planner_cases_give_an_empty_table(tmp_path):
    plans = _notebook_planner(Params(planner_cases=()), tmp_path)
    assert len(plans) == 0 and "fits" in plans.columns
    assert analysis._a17_claim(plans) == []


def test_smoke_notebook(run_cli, tmp_path):
    import json

    proc = run_cli("run", "recompute", "--profile", "smoke", "--results-root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "testbox" / "recompute"
    metrics = json.loads((out / "metrics.json").read_text())
    assert {c["id"] for c in metrics["claims"]} == {"B7", "A14", "A17", "A12"}
    assert metrics["layer_model_max_abs_rel_error_explained"] < 1e-9  # exact after the named terms
    assert metrics["layer_model_max_abs_rel_error_korthikanti"] < 0.05
    assert all(m.key in metrics for m in STUDY.metrics)  # flat keys for the comparison
    assert 0 < metrics["full_recompute_memory_share"] and metrics["full_recompute_step_time_ratio"] > 0
    assert all(v < 1e-5 for v in metrics["gradient_max_abs_diff"].values())
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"saved_by_op.png", "model_vs_measured.png", "pareto.png", "budget.png", "planner.png"} <= figures


def test_bad_policy_is_refused_before_work(run_cli, tmp_path):
    proc = run_cli(
        "run",
        "recompute",
        "--profile",
        "smoke",
        "-p",
        "policies",
        "[none, half]",
        "--results-root",
        str(tmp_path),
    )
    assert proc.returncode == 2 and "half" in proc.stderr and not any(tmp_path.iterdir())
    proc = run_cli(
        "run", "recompute", "--profile", "smoke", "-p", "every_k", "9", "--results-root", str(tmp_path)
    )
    assert proc.returncode == 2 and "every_k" in proc.stderr
