"""The step-time predictor (mfulab.analytic.step), its machine figures (mfulab.analytic.rates), the published
runs it is validated against and its command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mfulab.analytic import comm, flops, parallel, step, step_terms
from mfulab.analytic.config import TransformerConfig
from mfulab.analytic.rates import Assumptions, Link, Rates, fit_matmul, machine_rates
from mfulab.errors import ParameterError

ROOT = Path(__file__).resolve().parents[1]
GPT = TransformerConfig(n_layers=8, d_model=1024, n_heads=16, vocab_size=32000, seq_len=1024, name="t")


def _rates(**kw) -> Rates:
    base = dict(
        peak_flops_per_s=100e12,
        matmul_flops_per_s=80e12,
        matmul_latency_s=5e-6,
        memory_bytes_per_s=1e12,
        memory_capacity_bytes=80 * 2**30,
        intra=Link(5e-6, 200e9),
        inter=Link(10e-6, 20e9),
        sources={},
    )
    return Rates(**{**base, **kw})


def test_gemm_time_is_latency_plus_the_slower_of_math_and_traffic():
    r = _rates()
    # big square: compute-bound, 2mnk / R∞ + t₀
    assert step_terms.gemm_s(4096, 4096, 4096, r) == pytest.approx(5e-6 + 2 * 4096**3 / 80e12)
    # k = 1 (an outer product): memory-bound, bytes (mk + kn + mn)·2 / BW + t₀
    assert step_terms.gemm_s(4096, 4096, 1, r) == pytest.approx(5e-6 + 2 * (4096 + 4096 + 4096**2) / 1e12)
    assert step_terms.gemm_s(64, 64, 64, r, count=10) == pytest.approx(
        5e-6 + max(10 * 2 * 64**3 / 80e12, 10 * 2 * 3 * 64**2 / 1e12)
    )


def test_layer_matmuls_are_the_four_gemms_forward_and_twice_backward():
    r = _rates(matmul_latency_s=0.0, memory_bytes_per_s=1e30)  # pure arithmetic
    terms = step_terms.layer_terms(
        GPT,
        micro_batch=2,
        tp=1,
        sequence_parallel=False,
        attention="naive",
        dropout=False,
        rates=r,
        a=Assumptions(),
    )
    T, h = 2 * 1024, 1024
    forward_flops = 2 * T * (3 * h * h + h * h + 4 * h * h + 4 * h * h)  # QKV, proj, up, down
    assert terms["matmul_s"] == pytest.approx(3 * forward_flops / 80e12)
    attention_forward_flops = 2 * 2 * (2 * 16) * 1024 * 1024 * 64  # QKᵀ and A·V over the full s×s
    assert terms["attention_s"] == pytest.approx(3 * attention_forward_flops / 80e12)


def test_one_device_without_communication_is_compute_alone_and_pp1_has_no_bubble():
    out = step.step_time(GPT, n_devices=1, global_batch=4, micro_batch=2, device="a100")
    assert out["tp_comm_s"] == out["pp_bubble_s"] == out["pp_p2p_s"] == out["dp_comm_exposed_s"] == 0
    compute = sum(out[k] for k in ("matmul_s", "attention_s", "memory_bound_s", "recompute_s", "optimizer_s"))
    assert out["step_s"] == pytest.approx(compute)
    assert sum(out[k] for k in step.TERMS) == pytest.approx(out["step_s"])


def test_pipeline_bubble_is_p_minus_1_over_v_micro_batch_slots():
    kw = dict(n_devices=8, pp=4, global_batch=16, micro_batch=1, device="a100")
    one = step.step_time(GPT, **kw)
    two = step.step_time(GPT, **kw, vpp=2)
    slot = one["pp_bubble_s"] / 3  # one micro-batch on the slowest stage
    assert two["pp_bubble_s"] == pytest.approx(1.5 * slot)
    dp = 8 // 4
    m = 16 // dp
    per_mb = (
        sum(one[k] for k in ("matmul_s", "attention_s", "memory_bound_s", "recompute_s", "tp_comm_s")) / m
    )
    assert slot == pytest.approx(per_mb)


def test_tp_communication_is_the_parallel_modules_per_layer_cost():
    out = step.step_time(
        GPT, n_devices=8, tp=8, global_batch=4, micro_batch=1, device="a100", sequence_parallel=True
    )
    a = Assumptions()
    per_layer = parallel.tp_comm_time_per_layer(
        GPT,
        micro_batch=1,
        tp=8,
        alpha_s=a.alpha_intra_s,
        link_bytes_per_s=a.link_efficiency * 300e9,
        sequence_parallel=True,
    )
    assert out["tp_comm_s"] == pytest.approx(per_layer * GPT.n_layers * 4)
    full = step.step_time(
        GPT, n_devices=8, tp=8, global_batch=4, micro_batch=1, device="a100", recompute="full"
    )
    # the same bytes without sequence parallelism; full recompute runs the forward's 2 again
    assert full["tp_comm_s"] == pytest.approx(1.5 * per_layer * GPT.n_layers * 4)


def test_mfu_conventions_and_recompute():
    out = step.step_time(GPT, n_devices=1, global_batch=2, device="a100", recompute="full")
    tokens = 2 * 1024
    assert out["mfu_palm"] == pytest.approx(
        flops.flops_per_token(GPT, convention="palm") * tokens / (312e12 * out["step_s"])
    )
    assert out["hfu_megatron"] > out["mfu_megatron"] and out["hfu_palm"] > out["mfu_palm"]
    assert out["recompute_s"] > 0


def test_layouts_that_cannot_exist_are_refused():
    with pytest.raises(ParameterError, match="does not divide"):
        step.step_time(GPT, n_devices=6, tp=4, global_batch=4, device="a100")
    with pytest.raises(ParameterError, match="heads"):
        step.step_time(GPT, n_devices=24, tp=3, global_batch=8, device="a100")
    with pytest.raises(ParameterError, match="no datasheet entry"):
        step.step_time(GPT, n_devices=1, global_batch=1, device="h999")
    with pytest.raises(ParameterError, match="unknown assumption"):
        step.step_time(GPT, n_devices=1, global_batch=1, device="a100", no_such=1)
    with pytest.raises(ParameterError, match="no link bandwidth"):  # no interconnect figure for an L4
        step.step_time(GPT, n_devices=2, tp=2, global_batch=2, device="l4")


def test_calibration_replaces_datasheet_figures():
    rows = [{"flops": f, "median_s": 2e-6 + f / 50e12} for f in (1e9, 1e10, 1e11)]
    r_inf, t0 = fit_matmul(rows)
    assert r_inf == pytest.approx(50e12) and t0 == pytest.approx(2e-6)
    cal = {
        "file": "x.json",
        "device_name": "box",
        "matmul": {"rows": rows, "best_flops_per_s": 45e12, "dtype": "bf16"},
        "bandwidth": {"plateau_bytes_per_s": 3e11},
    }
    rates = machine_rates("a100", dtype="bf16", calibration=cal, assumptions=Assumptions())
    assert rates.matmul_flops_per_s == pytest.approx(50e12) and rates.memory_bytes_per_s == 3e11
    assert rates.peak_flops_per_s == 312e12  # MFU stays against the datasheet
    alone = machine_rates(None, dtype="bf16", calibration=cal, assumptions=Assumptions())
    assert alone.peak_flops_per_s == 45e12 and "measured" in alone.sources["peak"]


def test_published_runs_load_and_cite_their_source():
    from mfulab.studies.predict import validate

    runs = validate.load_runs("studies/predict/published_runs.yaml")
    assert len(runs) >= 15
    for row in runs:
        citation = row["citation"]
        paper = "arXiv" in citation and ("Table" in citation or "§" in citation)
        repository = re.search(r"[\w.-]+/[\w.-]+ .*@ ?[0-9a-f]{7,40}", citation) is not None
        assert paper or repository or "bigscience" in citation.lower(), citation
        validate.row_inputs(row)  # every row is a layout the predictor accepts


def test_interleave_rules():
    from mfulab.studies.predict.validate import interleave_depth

    assert interleave_depth(48, 2, 48, rule="deepest") == 24
    assert interleave_depth(48, 2, 48, rule="smallest") == 2
    assert interleave_depth(60, 4, 56, rule="smallest") == 3
    assert interleave_depth(10, 4, 8) == 1  # no legal depth


def test_validation_summary_is_computed_from_the_rows(tmp_path):
    import yaml

    from mfulab.studies.predict import validate

    rows = validate.load_runs("studies/predict/published_runs.yaml")
    runs = [r for r in rows if r["split"] == "fit" and not r.get("unstated")][-3:]
    for row in runs:
        row["source"] = "fit"
    res = validate.validation(runs, fit_sources=("fit",), fit_grid=(0.6, 0.9, 0.05))
    s1 = validate.summary(res["table"], row_goal=0.15, median_goal=0.08)
    assert s1["published_median_abs_error"] == pytest.approx(res["table"].error.abs().median())
    runs[0]["published"] = {"step_s": runs[0]["published"].get("step_s", 1.0) * 3}
    res2 = validate.validation(runs, fit_sources=("fit",), fit_grid=(0.6, 0.9, 0.05))
    s2 = validate.summary(res2["table"], row_goal=0.15, median_goal=0.08)
    assert s2["published_max_abs_error"] > s1["published_max_abs_error"]
    bad = tmp_path / "runs.yaml"
    bad.write_text(yaml.safe_dump({"runs": [{"id": "x", "source": "s", "device": "a100"}]}))
    with pytest.raises(ParameterError, match="lacks citation"):
        validate.load_runs(bad)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mfulab", "predict", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_prints_the_breakdown_and_refuses_bad_input():
    base = ["--preset", "llama2-70b", "--devices", "1024", "--global-batch", "1024"]
    ok = _cli(*base, "--device", "h100-sxm", "--tp", "8", "--pp", "4")
    assert ok.returncode == 0, ok.stderr
    assert "pp_bubble" in ok.stdout and "MFU" in ok.stdout and "Megatron" in ok.stdout
    for args, why in (
        (["--device", "h999", "--tp", "8"], "no datasheet entry"),
        (["--device", "h100-sxm", "--tp", "3"], "does not divide"),
        (["--device", "h100-sxm", "--tp", "1"], "GiB per device"),
    ):
        bad = _cli(*base, *args)
        assert bad.returncode == 2 and why in bad.stderr, (args, bad.stderr)
    found = _cli(*base, "--device", "h100-sxm", "--search", "--top", "3")
    assert found.returncode == 0 and "step_s" in found.stdout


def test_uneven_end_stages_hold_what_the_interior_leaves():
    cfg = GPT.with_(n_layers=30)  # 30 layers over 4 stages: 8 + 8 inside, 7 + 7 at the ends
    with pytest.raises(ParameterError, match="do not split"):
        step.step_time(cfg, n_devices=4, pp=4, global_batch=8, device="a100")
    out = step.step_time(cfg, n_devices=4, pp=4, global_batch=8, device="a100", uneven_end_stages=True)
    a = Assumptions()
    rates = machine_rates("a100", dtype="bf16", assumptions=a)
    kw = dict(
        micro_batch=1, tp=1, sequence_parallel=False, attention="fused", dropout=False, rates=rates, a=a
    )
    layer = step_terms.layer_terms(cfg, **kw)
    edge = step_terms._edge_terms(cfg, micro_batch=1, tp=1, rates=rates, a=a)
    per_layer = layer["matmul_s"] + layer["attention_s"] + layer["memory_bound_s"]
    stages = [
        7 * per_layer + edge["embedding_s"],
        7 * per_layer + edge["logits_matmul_s"] + edge["loss_s"],
        8 * per_layer,
    ]
    assert out["pp_bubble_s"] == pytest.approx(3 * max(stages))  # (p − 1) slots of the slowest stage


def test_each_frameworks_dp_calls_carry_the_zero_traffic_at_its_own_granularity():
    from mfulab.analytic import memory

    psi, dp, m = 1e9, 16, 4
    for stage in (0, 1, 2, 3):  # DeepSpeed moves exactly the paper's bytes
        calls = comm.dp_collectives(
            psi, dp=dp, zero_stage=stage, micro_batches=m, framework="deepspeed", units=10
        )
        traffic = memory.zero_traffic_bytes_per_step(psi, zero_stage=stage, accumulation_steps=m)
        assert comm.dp_bytes_per_step(calls) == pytest.approx(traffic)
    fsdp = comm.dp_collectives(psi, dp=dp, zero_stage=3, micro_batches=m, framework="fsdp", units=10)
    assert (
        sum(c["calls"] for c in fsdp) == 3 * 10 * m
    )  # AG forward, AG backward, RS: per unit and micro-batch
    ddp = comm.dp_collectives(psi, dp=dp, zero_stage=0, micro_batches=m, framework="ddp")
    assert ddp[0]["calls"] == 1 + -(-(2 * psi - 2**20) // (25 * 2**20))  # 1 MiB first bucket, then 25 MiB
    megatron = comm.dp_collectives(psi, dp=dp, zero_stage=1, micro_batches=m, framework="megatron")
    assert [c["op"] for c in megatron] == ["reduce_scatter", "all_gather"]
    assert megatron[0]["bytes_per_call"] == pytest.approx(2 * 40e6)  # max(40M, 1M·dp) elements of bf16
    one = comm.dp_collectives(psi, dp=dp, zero_stage=1, micro_batches=m, framework="megatron", overlap=False)
    assert one[0]["calls"] == 1  # no --overlap-grad-reduce: one bucket
    for framework, stage in (("ddp", 2), ("fsdp", 0), ("megatron", 3)):
        with pytest.raises(ParameterError, match="runs ZeRO stage"):
            comm.dp_collectives(psi, dp=dp, zero_stage=stage, micro_batches=m, framework=framework)


def test_nccl_latency_counts_inter_node_steps_and_picks_the_faster_algorithm():
    from mfulab.analytic import comm

    lat = dict(
        base_s=8e-6, intra_step_s=3e-6, inter_step_s=10e-6, tree_intra_step_s=30e-6, tree_inter_step_s=50e-6
    )
    ring = comm.nccl_latency_s("all_gather", 64, 8, **lat)["ring"]
    assert ring == pytest.approx(8e-6 + (63 - 7) * 3e-6 + 7 * 10e-6)
    both = comm.nccl_latency_s("all_reduce", 512, 64, **lat)
    assert both["tree"] == pytest.approx(8e-6 + 2 * (7 * 30e-6 + 6 * 50e-6)) and both["tree"] < both["ring"]
    # the ring all-reduce over N > 1 nodes: 2(N − 1) of its 2(n − 1) steps cross nodes (tuning.cc, 2.23+)
    assert both["ring"] == pytest.approx(8e-6 + (2 * 511 - 2 * 63) * 3e-6 + 2 * 63 * 10e-6)
    assert comm.nccl_latency_s("all_reduce", 8, 1, **lat)["ring"] == pytest.approx(8e-6 + 14 * 3e-6)
    small_s, algorithm = comm.nccl_call_s("all_reduce", 1e3, 512, 64, link_bytes_per_s=25e9, **lat)
    assert algorithm == "tree" and small_s == pytest.approx(both["tree"] + 2e3 / 25e9)
    big_s, algorithm = comm.nccl_call_s("all_reduce", 1e10, 16, 2, link_bytes_per_s=25e9, **lat)
    assert algorithm == "ring"  # the ring's 2(n − 1)/n beats the tree's 2 on bandwidth


def test_fsdp_at_large_dp_pays_per_unit_not_per_25_mib_bucket():
    cfg = TransformerConfig(
        n_layers=80,
        d_model=8192,
        n_heads=64,
        n_kv_heads=8,
        d_ff=28672,
        vocab_size=32000,
        seq_len=4096,
        mlp="swiglu",
        norm="rmsnorm",
        bias=False,
        tied_embeddings=False,
        learned_positions=False,
    )
    out = step.step_time(
        cfg,
        n_devices=512,
        micro_batch=1,
        global_batch=512,
        zero_stage=3,
        framework="fsdp",
        recompute="full",
        device="a100",
    )
    assert out["dp_calls"] == 3 * (80 + 1)
    assert out["dp_comm_exposed_s"] <= out["dp_comm_s"] and out["dp_comm_exposed_s"] < 0.2 * out["step_s"]
    off = step.step_time(
        cfg,
        n_devices=512,
        micro_batch=1,
        global_batch=512,
        zero_stage=3,
        framework="fsdp",
        recompute="full",
        device="a100",
        overlap=False,
    )
    assert off["dp_comm_exposed_s"] == pytest.approx(off["dp_comm_s"])


def test_what_the_model_does_not_cover_is_refused():
    for kw, why in (
        (dict(context_parallel=2, attention="naive"), "fused kernel only"),
        (dict(context_parallel=3), "2·cp"),
        (dict(expert_parallel=2), "needs a MoE config"),
        (dict(dtype="fp8"), "scaling recipe"),
        (dict(dtype="fp4"), "not modelled"),
        (dict(fp8_recipe="delayed"), "given for a bf16 step"),
        (dict(zero_stage=3, framework="megatron"), "runs ZeRO stage"),
    ):
        with pytest.raises(ParameterError, match=why):
            step.step_time(GPT, n_devices=8, global_batch=8, device="h100-sxm", **kw)


def test_tp_comm_overlap_hides_tp_traffic_under_the_gemms():
    kw = dict(n_devices=8, tp=8, global_batch=8, device="a100", sequence_parallel=True)
    plain = step.step_time(GPT, **kw)
    hidden = step.step_time(GPT, **kw, tp_comm_overlap=True)
    assert 0 <= hidden["tp_comm_s"] < plain["tp_comm_s"]
    assert hidden["step_s"] == pytest.approx(plain["step_s"] - plain["tp_comm_s"] + hidden["tp_comm_s"])


def test_the_device_sustains_a_share_of_its_own_mamf():
    a = Assumptions(matmul_share_of_mamf=0.8)
    a100 = machine_rates("a100", dtype="bf16", assumptions=a)
    h100 = machine_rates("h100-sxm", dtype="bf16", assumptions=a)
    assert a100.matmul_flops_per_s == pytest.approx(0.8 * 271.2e12)
    assert h100.matmul_flops_per_s == pytest.approx(0.8 * 794.5e12)  # not A100's share of the peak
    l40s = machine_rates("l40s", dtype="bf16", assumptions=a)  # no MAMF figure: mamf_over_peak of the peak
    assert l40s.matmul_flops_per_s == pytest.approx(0.8 * 0.8 * l40s.peak_flops_per_s)
    assert "mamf_over_peak" in l40s.sources["matmul"]


def test_a_data_parallel_group_spread_over_nodes_uses_each_members_port():
    rates = _rates()
    assert rates.link(64, 8, ranks_per_node=4).bytes_per_s == pytest.approx(4 * 20e9)
    assert rates.link(8, 8, ranks_per_node=4).bytes_per_s == 200e9  # inside a node: NVLink
    r = machine_rates("a100", dtype="bf16", assumptions=Assumptions(network_bytes_per_s=6.25e9))
    assert (
        r.inter.bytes_per_s == pytest.approx(0.78 * 6.25e9)
        and "network_bytes_per_s" in r.sources["inter_node"]
    )


def test_rows_with_an_unstated_input_are_never_fitted_on():
    from mfulab.studies.predict import validate

    runs = validate.load_runs("studies/predict/published_runs.yaml")
    fitted = [r for r in runs if validate.fitted_on(r, ("korthikanti2022",))]
    assert fitted and all(not r.get("unstated") and r["source"] == "korthikanti2022" for r in fitted)
    assert any(r.get("unstated") and r["source"] == "korthikanti2022" for r in runs)


def test_cli_assumptions():
    base = ["--preset", "llama2-7b", "--devices", "8", "--device", "a100", "--tp", "8", "--global-batch", "8"]
    slow = _cli(*base, "--assume", "matmul_share_of_mamf=0.4")
    fast = _cli(*base)
    assert slow.returncode == fast.returncode == 0
    assert "matmul_share_of_mamf 0.4" in slow.stdout
    bad = _cli(*base, "--assume", "nosuch=1")
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr


def test_the_split_is_fixed_in_the_file_and_test_rows_are_never_fitted_on():
    from mfulab.studies.predict import validate

    data = validate.load_file("studies/predict/published_runs.yaml")
    split = data["split"]
    named = [s for name in validate.SPLITS for s in split[name]]
    assert len(named) == len(set(named)), "a source sits in two splits"
    assert {r["source"] for r in data["runs"]} <= set(named)
    fit_sources = tuple(split["fit"])
    assert not any(validate.fitted_on(r, fit_sources) for r in data["runs"] if r["split"] != "fit")
    assert sum(r["split"] == "test" for r in data["runs"]) >= 40
    assert split["frozen_at"], "the commit the test rows were first evaluated at"
    for held in ("holdout", "holdout-2"):  # each holdout file: its own split, first evaluated at its freeze
        assert split[held] and split[f"{held}_frozen_at"]
        assert {r["split"] for r in data["runs"] if r["source"] in split[held]} == {held}


def test_holdout_files_may_not_reuse_a_source_or_a_split(tmp_path):
    import yaml

    from mfulab.studies.predict import validate

    row = {
        "id": "r",
        "source": "s",
        "citation": "c",
        "device": "a100",
        "model": {"n_layers": 2},
        "layout": {"n_devices": 8},
        "published": {"step_s": 1.0},
    }

    def write(name, split, source="t"):
        (tmp_path / name).write_text(yaml.safe_dump({"split": split, "runs": [{**row, "source": source}]}))

    write("h1.yaml", {"holdout": ["t"], "holdout_frozen_at": "abc"})
    write("h2.yaml", {"holdout": ["u"], "holdout_frozen_at": "def"}, source="u")
    main = {"split": {"test": ["s"], "frozen_at": "x"}, "runs": [row]}
    main["holdout_files"] = ["h1.yaml", "h2.yaml"]
    (tmp_path / "runs.yaml").write_text(yaml.safe_dump(main))
    with pytest.raises(ParameterError, match="split names"):
        validate.load_file(tmp_path / "runs.yaml")
    write("h2.yaml", {"holdout-2": ["t"], "holdout-2_frozen_at": "def"})
    with pytest.raises(ParameterError, match="source is also in"):
        validate.load_file(tmp_path / "runs.yaml")
    write("h2.yaml", {"holdout-2": ["u"], "holdout-2_frozen_at": "def"}, source="u")
    data = validate.load_file(tmp_path / "runs.yaml")
    assert [r["split"] for r in data["runs"]] == ["test", "holdout", "holdout-2"]


def test_the_null_model_and_the_split_summary_are_computed_from_the_rows():
    from mfulab.studies.predict import scores, validate

    data = validate.load_file("studies/predict/published_runs.yaml")
    runs = [r for r in data["runs"] if r["source"] in ("korthikanti2022", "narayanan2021")]
    res = validate.validation(runs, fit_sources=("korthikanti2022",), fit_grid=(0.6, 1.0, 0.01))
    df = res["table"]
    u = res["null_utilisation"]
    row = runs[0]
    expected = validate.hardware_flops_per_step(row) / (row["layout"]["n_devices"] * 312e12 * u)
    assert df.null_error.iloc[0] == pytest.approx(expected / df.published_step_s.iloc[0] - 1)
    s = scores.split_summary(df).set_index("split")
    assert s.loc["development", "median_abs_error"] == pytest.approx(
        df[df.split == "development"].error.abs().median()
    )
    fit = df[df.split == "fit"]
    scored = fit.loo_error.where(fit.loo_error.notna(), fit.error)  # unstated-input rows: plain error
    assert s.loc["fit", "median_abs_error"] == pytest.approx(scored.abs().median())
    assert scores.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert scores.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_a_row_the_model_does_not_cover_is_kept_with_its_reason_and_scored_nowhere():
    from mfulab.studies.predict import validate

    data = validate.load_file("studies/predict/published_runs.yaml")
    refused = [validate.predict_row(r, matmul_share_of_mamf=0.8) for r in data["runs"]]
    refused = [r for r in refused if r["refused"]]
    assert refused and all(np.isnan(r["error"]) for r in refused)
    reasons = " ".join(r["refused"] for r in refused)
    assert "not modelled" in reasons and "do not split over pp" in reasons


def test_the_history_records_revisions_in_order():
    from mfulab.studies.predict import validate

    revisions = validate.read_history()
    assert len(revisions) >= 3 and all(r["commit"] and r["change"] for r in revisions)
    assert [r["date"] for r in revisions] == sorted(r["date"] for r in revisions)


def test_a_launch_bound_calibration_takes_its_best_rate():
    rows = [{"flops": f, "median_s": t} for f, t in ((1e6, 2e-3), (1e7, 1.5e-3), (1e8, 1e-3))]  # noise
    r_inf, t0 = fit_matmul(rows)
    assert r_inf == pytest.approx(1e8 / 1e-3) and t0 == 0.0


def test_fifo_channel_serialises_transfers_in_order():
    from mfulab.analytic import comm

    # ready at 0, 1, 1.5; each takes 1: the second waits for the first, the third for the second
    assert comm.fifo_channel([0.0, 1.0, 1.5], [1.0, 1.0, 1.0]) == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    # a late transfer starts when it is ready, not when the channel frees
    assert comm.fifo_channel([0.0, 5.0], [1.0, 1.0]) == [(0.0, 1.0), (5.0, 6.0)]
    with pytest.raises(ParameterError):
        comm.fifo_channel([0.0], [1.0, 2.0])
    with pytest.raises(ParameterError):
        comm.fifo_channel([0.0], [-1.0])


def test_ring_only_forces_the_ring_and_dp_group_prices_like_dp_terms():
    from mfulab.analytic import comm

    lat = Assumptions().nccl_latencies()
    # a small all-reduce over 128 nodes: NCCL's tree wins on latency; ring_only forces the ring
    best_s, best = comm.nccl_call_s("all_reduce", 1e6, 1024, 128, link_bytes_per_s=20e9, **lat)
    ring_s, ring = comm.nccl_call_s(
        "all_reduce", 1e6, 1024, 128, link_bytes_per_s=20e9, ring_only=True, **lat
    )
    assert best == "tree" and ring == "ring" and ring_s > best_s
    # the step model's DP group is what dp_terms prices its calls on
    from mfulab.analytic.config import preset

    r = step.step_time(preset("llama2-70b"), n_devices=512, tp=8, pp=4, global_batch=512, device="a100")
    g = r["dp_group"]
    assert g["dp"] == r["layout"]["dp"] and g["n_nodes"] >= 1 and g["link_bytes_per_s"] > 0
    one_s, _ = step_terms.dp_call_s("all_reduce", 25 * 2**20, g)
    assert one_s > 0


def test_partial_recompute_plans_sit_between_none_and_full():
    """Megatron's --recompute-method block/uniform and the MLP policy priced by the one model:
    block:k re-runs k of a stage's layers, uniform:k all of them (full's compute, less memory
    than none), mlp the MLP branch of every layer."""
    from mfulab.analytic.config import preset

    cfg = preset("article-13b")  # 40 layers
    run = dict(n_devices=8, tp=8, global_batch=8, device="a100", attention="naive")
    r = {q: step.step_time(cfg, recompute=q, **run) for q in ("none", "block:10", "uniform:8", "full", "mlp")}
    assert r["none"]["recompute_s"] == 0 < r["block:10"]["recompute_s"] < r["full"]["recompute_s"]
    assert r["block:10"]["recompute_s"] == pytest.approx(r["full"]["recompute_s"] * 10 / 40)
    assert r["uniform:8"]["recompute_s"] == pytest.approx(r["full"]["recompute_s"])
    assert 0 < r["mlp"]["recompute_s"] < r["full"]["recompute_s"]
    # recomputing a layer repeats its forward TP collectives: 6 of 4 under full, 5 under mlp
    assert r["full"]["tp_comm_s"] == pytest.approx(1.5 * r["none"]["tp_comm_s"])
    assert r["mlp"]["tp_comm_s"] == pytest.approx(1.25 * r["none"]["tp_comm_s"])

    # HFU counts the recomputed FLOPs, MFU does not
    def extra(q):
        return r[q]["hfu_palm"] / r[q]["mfu_palm"] - 1

    assert extra("none") == 0 < extra("block:10") == pytest.approx(extra("full") * 10 / 40)
    assert extra("uniform:8") == pytest.approx(extra("full"))
    mem = {q: v["memory_gib"] for q, v in r.items()}
    assert mem["full"] < mem["uniform:8"] < mem["none"] and mem["full"] < mem["block:10"] < mem["none"]
    with pytest.raises(ParameterError, match="recompute policy"):
        step.step_time(cfg, recompute="every_k:3", **run)
    with pytest.raises(ParameterError, match="block:41"):
        step.step_time(cfg, recompute="block:41", **run)


def test_flash_attention_runs_at_each_devices_published_share():
    """FlashAttention-2 reaches 35% of H100's peak and the bottom of 50–73% of A100's (devices.yaml):
    a device's own figure, not A100's fraction; an explicit share overrides it, and a device
    without a figure falls back to A100's."""
    h100 = machine_rates("h100-sxm", dtype="bf16", assumptions=Assumptions())
    a100 = machine_rates("a100", dtype="bf16", assumptions=Assumptions())
    l40s = machine_rates("l40s", dtype="bf16", assumptions=Assumptions())
    assert h100.flash_attention_flops_per_s == pytest.approx(0.35 * h100.peak_flops_per_s)
    assert a100.flash_attention_flops_per_s == pytest.approx(0.5 * a100.peak_flops_per_s)
    assert l40s.flash_attention_flops_per_s == pytest.approx(0.5 * l40s.peak_flops_per_s)
    forced = machine_rates("h100-sxm", dtype="bf16", assumptions=Assumptions(flash_attention_efficiency=0.6))
    assert forced.flash_attention_flops_per_s == pytest.approx(0.6 * h100.peak_flops_per_s)
    halved = machine_rates("h100-sxm", dtype="bf16", assumptions=Assumptions(flash_attention_scale=0.5))
    assert halved.flash_attention_flops_per_s == pytest.approx(0.175 * h100.peak_flops_per_s)
    cfg = TransformerConfig(n_layers=2, d_model=1024, n_heads=8, vocab_size=1000, seq_len=4096)
    kw = dict(micro_batch=1, tp=1, sequence_parallel=False, attention="fused", dropout=False, a=Assumptions())
    slow = step_terms.layer_terms(cfg, rates=h100, **kw)["attention_s"]
    fast = step_terms.layer_terms(cfg, rates=forced, **kw)["attention_s"]
    assert slow > 1.5 * fast  # 0.35 against 0.6 of the same peak, less the two launches


def test_hsdp_shards_inside_the_group_and_all_reduces_the_shard_among_its_replicas():
    """FSDP's HYBRID_SHARD (``shard_group`` g): gathers and reduce-scatters among g ranks, then
    each reduced shard (1/g of the gradients) all-reduced among the dp/g replicas; the states
    shard over g only, so a replica holds more memory than under a full shard."""
    calls = comm.dp_collectives(
        8e9,
        dp=128,
        zero_stage=3,
        micro_batches=1,
        framework="fsdp",
        units=33,
        shard_group=8,
        grad_bytes_per_elem=2,
    )
    groups = {(c["op"], c["phase"]): c.get("group") for c in calls}
    assert groups[("all_gather", "forward")] == "shard" and groups[("reduce_scatter", "backward")] == "shard"
    replica = next(c for c in calls if c.get("group") == "replica")
    assert replica["op"] == "all_reduce" and replica["bytes_per_call"] * 33 == pytest.approx(8e9 * 2 / 8)
    with pytest.raises(ParameterError, match="shard_group"):
        comm.dp_collectives(8e9, dp=128, zero_stage=1, micro_batches=1, framework="megatron", shard_group=8)
    with pytest.raises(ParameterError, match="shard_group"):
        comm.dp_collectives(8e9, dp=128, zero_stage=3, micro_batches=1, framework="fsdp", shard_group=3)
    cfg = TransformerConfig(n_layers=8, d_model=2048, n_heads=16, vocab_size=32000, seq_len=2048)
    kw = dict(n_devices=64, micro_batch=1, global_batch=64, device="a100", framework="fsdp", zero_stage=3)
    full, hybrid = step.step_time(cfg, **kw), step.step_time(cfg, shard_group=8, **kw)
    assert hybrid["memory_gib"] > full["memory_gib"]
    assert "all_reduce" in hybrid["dp_algorithms"] and "all_reduce" not in full["dp_algorithms"]
    shard, replica = (
        step_terms.dp_group({"tp": 1, "dp": 64, "devices_per_node": 8}, rates=_rates(), a=Assumptions(), **g)
        for g in ({"size": 8}, {"size": 8, "stride": 8})
    )
    assert shard["n_nodes"] == 1 and shard["link_bytes_per_s"] == 200e9  # inside a node
    assert replica["n_nodes"] == 8 and replica["link_bytes_per_s"] == 20e9  # one port per member


def test_ddp_with_zero_redundancy_optimizer_broadcasts_each_parameter_after_the_step():
    """DDP + torch's ZeroRedundancyOptimizer (framework ddp, ZeRO 1): DDP's bucketed all-reduce,
    then one broadcast per parameter tensor from its owner, after the optimizer, exposed."""
    cfg = TransformerConfig(n_layers=4, d_model=1024, n_heads=8, vocab_size=32000, seq_len=1024)
    kw = dict(n_devices=8, micro_batch=4, global_batch=64, device="a100", framework="ddp")
    plain, zero = step.step_time(cfg, zero_stage=0, **kw), step.step_time(cfg, zero_stage=1, **kw)
    n_tensors = len(flops.param_tensors(cfg))
    assert zero["dp_calls"] == plain["dp_calls"] + n_tensors
    assert "broadcast" in zero["dp_algorithms"]
    assert zero["dp_comm_exposed_s"] > plain["dp_comm_exposed_s"]
    assert zero["memory_gib"] < plain["memory_gib"]  # the optimizer states are sharded


def test_megatron_reduces_a_bf16_runs_gradients_in_fp32_unless_stated():
    """Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16 (megatron/training/arguments.py):
    its DP traffic is twice the bf16 figure; a stated width wins; other frameworks keep bytes_per_elem."""
    kw = dict(n_devices=64, tp=2, micro_batch=1, global_batch=64, device="a100", overlap=False)
    default = step.step_time(GPT, framework="megatron", **kw)
    stated = step.step_time(GPT, framework="megatron", grad_bytes_per_elem=2, **kw)
    assert default["assumptions"]["grad_bytes_per_elem"] == 4
    assert stated["assumptions"]["grad_bytes_per_elem"] == 2
    assert default["dp_comm_s"] > 1.5 * stated["dp_comm_s"]
    assert step.step_time(GPT, framework="ddp", **kw)["assumptions"]["grad_bytes_per_elem"] == 2
    fp16 = step.step_time(GPT, framework="megatron", dtype="fp16", **kw)
    assert fp16["assumptions"]["grad_bytes_per_elem"] == 2


def test_op_rates_replace_the_copy_bandwidth_and_flash_share_for_their_terms_only():
    """A calibration with the ops' own rates moves the memory-bound and attention terms, not the
    GEMMs or the optimizer (which stay on the matmul fit and the copy bandwidth)."""
    cal = {
        "file": "x",
        "device_name": "cpu",
        "matmul": {
            "dtype": "fp32",
            "best_flops_per_s": 1e11,
            "rows": [{"flops": 1e9, "median_s": 0.01}, {"flops": 2e9, "median_s": 0.02}],
        },
        "bandwidth": {"plateau_bytes_per_s": 20e9},
    }
    kw = dict(n_devices=1, micro_batch=2, global_batch=2, device=None, dtype="fp32", attention="fused")
    base = step.step_time(GPT, calibration=cal, **kw)
    slow = {
        **cal,
        "elementwise": {"bytes_per_s": 5e9, "source": "t"},
        "attention": {"flops_per_s": 1e9, "source": "t"},
    }
    ops = step.step_time(GPT, calibration=slow, **kw)
    assert ops["memory_bound_s"] == pytest.approx(4 * base["memory_bound_s"])
    assert ops["attention_s"] > 10 * base["attention_s"]
    assert ops["matmul_s"] == base["matmul_s"] and ops["optimizer_s"] == base["optimizer_s"]
    assert "timed alone" in ops["sources"]["elementwise"]


def _calibrated_records(cfg):
    return {
        "params": {"micro_batch": 2, "dtype": "fp32"},
        "config": cfg.to_dict(),
        "device_name": "cpu",
        "calibration": {
            "file": "x",
            "matmul": {
                "dtype": "fp32",
                "best_flops_per_s": 1e11,
                "rows": [{"flops": 1e8, "median_s": 1e-3}, {"flops": 2e8, "median_s": 2e-3}],
            },
            "bandwidth": {"plateau_bytes_per_s": 20e9},
        },
        "op_profile": {
            "categories": ["matmul", "attention core", "norm / elementwise", "optimizer", "other ops"],
            "steps": [
                {
                    "wall_s": 0.01,
                    "categories_s": {
                        "matmul": 0.004,
                        "attention core": 0.002,
                        "norm / elementwise": 0.003,
                        "optimizer": 0.0005,
                        "other ops": 0.0005,
                    },
                }
            ],
        },
        "step": {"median_s": 0.01},
    }


def test_the_calibrated_check_second_reading_prices_the_timed_ops():
    """The op-rate reading's memory-bound, attention and optimizer terms are the timed ops'
    seconds (the embedding lookup priced at the same rate adds its small share), its GEMMs a fit
    to the step's own GEMMs (three per linear layer); records without op timings keep the first
    reading alone."""
    from mfulab.analytic import rates
    from mfulab.studies.predict import calibrated, op_rates

    cfg = TransformerConfig(n_layers=2, d_model=64, n_heads=2, vocab_size=256, seq_len=32, name="tiny")
    records = _calibrated_records(cfg)
    first = calibrated.comparison(records)
    assert first.predicted_op_rates_s.isna().all()
    measured = op_rates.measure(cfg, micro_batch=2, dtype="fp32", device="cpu", warmup=1, min_samples=3)
    # the identities below are arithmetic: they read the ops' medians, set here (GEMMs on a line
    # t = t₀ + F/R, so the fit's t₀ is known) so that a busy machine's timings cannot move them
    t0_s, gemm_flops_per_s = 20e-6, 5e9
    ops = {
        name: {**v, "median_s": t0_s + v["flops"] / gemm_flops_per_s if "flops" in v else 1e-3}
        for name, v in measured.items()
    }
    records["op_rates"] = ops
    check = calibrated.comparison(records).set_index("class")
    timed_elementwise = op_rates.step_seconds(ops, ("norms", "activation", "residual", "loss"))
    timed_attention = op_rates.step_seconds(ops, ("attention",))
    assert check.loc["memory_bound", "predicted_op_rates_s"] == pytest.approx(timed_elementwise, rel=0.02)
    assert check.loc["attention", "predicted_op_rates_s"] == pytest.approx(timed_attention, rel=1e-9)
    assert check.loc["optimizer", "predicted_op_rates_s"] == pytest.approx(ops["optimizer"]["median_s"])
    # where the launches alone (2 kernels × n_layers × t₀) reach the timed attention, no rate
    # matches it and the term is the launches
    launches_s = 2 * cfg.n_layers * t0_s
    ops["attention"] = {**ops["attention"], "median_s": 0.5 * launches_s / ops["attention"]["per_step"]}
    bound = calibrated.comparison(records).set_index("class")
    assert bound.loc["attention", "predicted_op_rates_s"] == pytest.approx(launches_s, rel=1e-6)
    ops = records["op_rates"] = measured
    rows = op_rates.gemm_rows(ops)
    assert len(rows) == 3 * len(op_rates.linear_shapes(cfg)) == 3 * 7  # q, k, v, out, up, down, logits
    assert {r["flops"] for r in rows} == {2.0 * 64 * 64 * 64, 2.0 * 64 * 64 * 256}
    cal, _ = calibrated.op_rate_reading(records, calibrated.prediction(records))
    assert cal["matmul"]["rows"] == rows
    assert rates.fit_matmul(rows) != rates.fit_matmul(records["calibration"]["matmul"]["rows"])


def test_the_calibrated_check_reads_the_calibration_re_timed_beside_the_step():
    """With the calibration's benchmarks re-timed in the run, the first reading prices the step
    at the re-timed rates and ``drift`` keeps the file's figures and the step they predict."""
    from mfulab.studies.predict import calibrated

    cfg = TransformerConfig(n_layers=2, d_model=64, n_heads=2, vocab_size=256, seq_len=32, name="tiny")
    records = _calibrated_records(cfg)
    assert calibrated.drift(records) is None
    from_file = calibrated.comparison(records).set_index("class")
    file_matmul = records["calibration"]["matmul"]
    slow_rows = [{**r, "median_s": 2 * r["median_s"]} for r in file_matmul["rows"]]
    records["calibration_now"] = {
        "matmul": {**file_matmul, "best_flops_per_s": 5e10, "rows": slow_rows},
        "bandwidth": {"plateau_bytes_per_s": 10e9},
        "measured_at": "later",
    }
    now = calibrated.comparison(records).set_index("class")
    assert now.loc["matmul", "predicted_s"] == pytest.approx(
        2 * from_file.loc["matmul", "predicted_s"], rel=0.01
    )
    assert now.loc["optimizer", "predicted_s"] == pytest.approx(2 * from_file.loc["optimizer", "predicted_s"])
    d = calibrated.drift(records)
    assert d["now_matmul_flops_per_s"] == 5e10 and d["file_copy_bytes_per_s"] == 20e9
    assert d["file_step_s"] == pytest.approx(from_file.loc["step", "predicted_s"])
    # the file's step re-derives from its classes, which the text prints
    assert d["file_classes_s"]["matmul"] == pytest.approx(from_file.loc["matmul", "predicted_s"])
    assert sum(d["file_classes_s"].values()) == pytest.approx(d["file_step_s"], rel=1e-6)
    text = calibrated.drift_text(records)
    assert "the file alone predicts" in text and f"matmul {d['file_classes_s']['matmul'] * 1e3:.1f}" in text


def test_the_calibrated_check_pairs_each_round_and_refuses_to_score_a_moving_machine():
    """Round i's step is set against the prediction from round i's re-timed benchmarks: a machine
    that runs every round at half speed moves both sides and leaves the paired error where it
    was; rounds whose step and benchmarks disagree widen the IQR past the limit, and the summary
    says the run cannot score the model."""
    from mfulab.studies.predict import calibrated

    cfg = TransformerConfig(n_layers=2, d_model=64, n_heads=2, vocab_size=256, seq_len=32, name="tiny")
    records = _calibrated_records(cfg)
    assert calibrated.paired_step_errors(records) is None  # no per-round times
    speed = [1.0, 0.5, 1.0, 0.5, 1.0]  # the machine's speed per round
    mm_rows = [
        {"flops": 1e8, "median_s": 1e-3, "times_s": [1e-3 / v for v in speed]},
        {"flops": 2e8, "median_s": 2e-3, "times_s": [2e-3 / v for v in speed]},
    ]
    copy = {"moved_bytes": 2e9, "median_s": 0.1, "times_s": [0.1 / v for v in speed]}
    records["calibration_now"] = {
        "matmul": {"dtype": "fp32", "best_flops_per_s": 1e11, "rows": mm_rows},
        "bandwidth": {"plateau_bytes_per_s": 20e9, "rows": [copy]},
        "measured_at": "now",
    }
    fast = calibrated.prediction(records)["step_s"]  # every median is a full-speed round's
    records["step"] = {"median_s": fast, "times_s": [fast / v for v in speed]}
    errors = calibrated.paired_step_errors(records)
    assert errors == pytest.approx([0.0] * len(speed), abs=1e-9)
    assert calibrated.paired_summary(records)["valid"]
    records["step"]["times_s"] = [fast] * len(speed)  # the step never slowed, its benchmarks did
    ps = calibrated.paired_summary(records)
    assert ps["q3"] - ps["q1"] > calibrated.PAIRED_IQR_LIMIT and not ps["valid"]
    assert max(calibrated.paired_step_errors(records)) > 0.5


def test_a_not_modelled_row_is_refused_and_priced_apart_as_its_note_says():
    """``not_modelled`` refuses a row for the goals; ``price_not_modelled`` prices it as noted, and
    the validation table scores it only in ``error_as_noted`` (as_noted_summary, per held-out split)."""
    from mfulab.studies.predict import scores, validate

    runs = validate.load_runs(ROOT / "studies/predict/published_runs.yaml")
    fit_rows = [dict(r) for r in runs if r["source"] == "korthikanti2022" and not r.get("unstated")][:3]
    row = fit_rows[0]
    plain = validate.predict_row(row)
    noted_row = {**row, "not_modelled": "a feature the layout fields cannot express; priced as stated"}
    refused = validate.predict_row(noted_row)
    assert refused["refused"].startswith("not modelled") and np.isnan(refused["error"])
    priced = validate.predict_row(noted_row, price_not_modelled=True)
    assert priced["refused"] == "" and priced["error"] == pytest.approx(plain["error"])
    held = {**noted_row, "split": "holdout"}
    res = validate.validation([*fit_rows, held], fit_sources=(row["source"],), fit_grid=(0.5, 1.0, 0.01))
    table = scores.as_noted_summary(res["table"])
    assert list(table.split) == ["holdout"] and int(table.rows_priced_as_noted.iloc[0]) == 1
    assert table.median_abs_error.iloc[0] == pytest.approx(abs(res["table"].error_as_noted.iloc[-1]))
    assert np.isnan(res["table"].error.iloc[-1])  # refused for the goals


def test_unpriced_elementwise_ops_are_the_memory_bound_ops_no_term_prices():
    """The diagnostic lists memory-bound ops outside the model's priced set (a bias gradient's
    ``sum``), never the priced ones (GeLU, the loss) nor other classes, scaled to the timed step."""
    from mfulab.studies.predict import calibrated

    ops = [
        {"category": "norm / elementwise", "name": "aten::gelu_backward", "self_s": 0.3},
        {"category": "norm / elementwise", "name": "aten::sum", "self_s": 0.1},
        {"category": "norm / elementwise", "name": "aten::add", "self_s": 0.05},
        {"category": "norm / elementwise", "name": "GeluBackward0", "self_s": 0.01},
        {"category": "matmul", "name": "aten::mm", "self_s": 0.5},
    ]
    records = {"op_profile": {"steps": [{"wall_s": 1.0, "ops_self_s": ops}]}, "step": {"median_s": 2.0}}
    u = calibrated.unpriced_elementwise(records)
    assert u["ops"] == [("aten::sum", pytest.approx(0.2))] and u["total_s"] == pytest.approx(0.2)


def test_decisive_margin_is_placed_among_held_out_errors_only():
    """The margin's table counts held-out rows, never fit or development rows or refused ones."""
    import pandas as pd

    from mfulab.studies.predict import scores

    df = pd.DataFrame(
        {
            "split": ["fit", "development", "test", "test", "test", "holdout"],
            "refused": ["", "", "", "", "context parallelism", ""],
            "error": [0.5, 0.5, 0.1, -0.3, 0.9, 0.05],
        }
    )
    t = scores.decisive_margin_check(df).set_index("split")
    assert t.loc["test", "scored"] == 2 and t.loc["all held out", "scored"] == 3
    for kind in ("layout", "switch"):  # each share counts the held-out rows within its own margin
        margin = t.loc["test", f"{kind}_margin"]
        expected = sum(abs(e) <= margin for e in (0.1, -0.3)) / 2
        assert t.loc["test", f"within_{kind}_margin"] == pytest.approx(expected)


def test_per_term_check_sets_the_backward_forward_split_beside_its_null():
    """Korthikanti et al.'s Table 4 is the fit source, so the check also reads the split that the
    fitted share barely moves: backward ÷ forward, modelled and published, beside the 2× rule
    (3× under full recompute)."""
    from mfulab.studies.predict import scores
    from mfulab.studies.predict.bench import _published
    from mfulab.studies.predict.params import Params

    t = scores.per_term_check(_published(Params()), fitted=1.0)
    assert len(t) == 5
    published = t.published_backward_ms / t.published_forward_ms
    assert np.allclose(t.published_backward_over_forward, published)
    assert np.allclose(t.predicted_backward_over_forward, t.predicted_backward_ms / t.predicted_forward_ms)
    full = t.setting.str.contains("Baseline with recompute")
    assert (t.rule_of_thumb_backward_over_forward[full] == 3).all()
    assert (t.rule_of_thumb_backward_over_forward[~full] == 2).all()


def test_the_fourth_holdout_loads_by_its_stated_rules_and_is_refused_strictly():
    from mfulab.studies.predict import validate

    data = validate.load_file("studies/predict/published_runs.yaml")
    held = [r for r in data["runs"] if r["split"] == "holdout-4"]
    assert len(held) == 25 and data["split"]["holdout-4_frozen_at"]
    assert all(validate.predict_row(r)["refused"].startswith("not modelled") for r in held)
    gpt_oss = next(r for r in held if "gpt-oss" in r["id"])
    inputs = validate.row_inputs(gpt_oss)
    cfg = inputs["cfg"]
    assert cfg.norm == "rmsnorm" and not cfg.bias and not cfg.tied_embeddings  # validate.LLAMA_SHAPE
    assert cfg.windows[0] == 128 and cfg.windows[1] is None and len(cfg.windows) == cfg.n_layers
    assert inputs["grad_bytes_per_elem"] == 2  # grad_reduce_dtype: bf16
    fp8 = next(r for r in data["runs"] if r["id"] == "llmfoundry-h100fp8-mpt3b-s2048-8gpu")
    assert validate.row_inputs(fp8)["fp8_recipe"] == "current"  # the stated rule for a row naming none
    deepseek = next(r for r in held if r["id"] == "dgxc-deepseek-v3-h100-512-bf16")
    noted = validate.predict_row(deepseek, price_not_modelled=True)  # 61 layers over 8 stages: uneven ends
    assert not noted["refused"] and noted["ep_comm_s"] > 0


def test_the_modern_rows_summary_is_computed_from_its_rows():
    import pandas as pd

    from mfulab.studies.predict import modern

    table = pd.DataFrame(
        {
            "id": ["a", "b", "c"],
            "split": ["holdout-4", "holdout-4", "test"],
            "kind": ["MoE · BF16", "CP 2 · BF16", "FP8"],
            "error": [0.5, -0.1, -0.3],
            "null_error": [0.2, 0.4, 0.1],
            "refused": ["", "", ""],
            "matmul_share": [0.2, 0.6, 0.5],
            "ep_comm_share": [0.7, 0.0, 0.0],
        }
    )
    table["mfu40_error"] = [0.3, 0.2, 0.1]
    table["source"] = ["s1", "s2", "s3"]
    table["a2a_overlap_declared"] = [True, False, False]
    table["cp"] = [1, 2, 1]
    s = modern.summary(table).set_index("rows")
    assert s.loc["holdout-4: MoE, all-to-all overlap declared (priced exposed)", "priced"] == 1
    assert s.loc["CP rows of every split, cp = 2", "median_abs_error"] == pytest.approx(0.1)
    assert s.loc["holdout-4 (MoE, CP, FP8; as noted)", "median_abs_error"] == pytest.approx(0.3)
    assert s.loc["holdout-4: MoE rows", "priced"] == 1
    assert s.loc["earlier splits: FP8 rows", "null_median_abs_error"] == pytest.approx(0.1)
    table["model"] = ["m", "m", "m"]
    table["cp_comm_share"] = [0.0, 0.0, 0.0]
    table["device"] = ["d", "d", "d"]
    empty = pd.DataFrame()
    text = modern.text(modern.summary(table), empty, empty, table)
    assert "not below the null model's 10.0%" in text and "it fails the goals" in text
    assert "it meets the goals" not in text
