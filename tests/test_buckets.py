"""DDP bucket formation rules (against DDP itself), gradient equality, simulator edge cases,
the interleaved records, B6's mechanism bounds and verdict rule, A6's regime, the sensitivity
table and the heat map."""

import numpy as np
import pytest

from mfulab.analytic import comm
from mfulab.analytic.config import preset
from mfulab.errors import ParameterError
from mfulab.measure import launch
from mfulab.measure.timing import Comparison
from mfulab.studies.buckets import (
    analysis,
    b6_scale,
    bench,
    cluster_scale,
    figures,
    flags,
    grad_memory,
    graph_nodes,
    model_error,
    sensitivity,
    simulator,
)
from mfulab.studies.buckets.flags import B6_SEVERAL_PERCENT_RATIO
from mfulab.studies.buckets.params import Params
from mfulab.studies.buckets.stated import SCALE_CASE
from mfulab.studykit import verdicts

MIB = 2**20


def test_formation_rules():
    sizes = [3 * MIB, 1 * MIB, 2 * MIB, 5 * MIB, 1 * MIB]
    # a bucket closes once it reaches the cap; the crossing tensor stays in it; nothing is split
    assert simulator.form_buckets(sizes, bucket_cap_mb=4) == [[0, 1], [2, 3], [4]]
    assert simulator.form_buckets(sizes, bucket_cap_mb=1000) == [[0, 1, 2, 3, 4]]  # one bucket
    assert simulator.form_buckets(sizes, bucket_cap_mb=0.5) == [[0], [1], [2], [3], [4]]  # one tensor each
    # DDP's default cap uses a 1 MiB first bucket
    assert simulator.form_buckets(sizes, bucket_cap_mb=25, default_cap=True) == [[0], [1, 2, 3, 4]]
    with pytest.raises(ParameterError):
        simulator.form_buckets(sizes, bucket_cap_mb=0)


def test_zero_comm_cost_gives_compute_time():
    sizes = [MIB] * 10
    ready = [0.01 * (i + 1) for i in range(10)]
    r = simulator.simulate(
        sizes,
        ready,
        backward_end_s=0.1,
        bucket_cap_mb=2,
        n=8,
        alpha_s=0.0,
        link_bytes_per_s=float("inf"),
        forward_s=0.05,
    )
    assert r["step_s"] == pytest.approx(0.15) and r["exposed_comm_s"] == pytest.approx(0)


def test_one_bucket_starts_after_backward():
    sizes = [MIB] * 4
    ready = [0.01, 0.02, 0.03, 0.04]
    r = simulator.simulate(
        sizes, ready, backward_end_s=0.04, bucket_cap_mb=100, n=4, alpha_s=1e-4, link_bytes_per_s=1e9
    )
    t = comm.ring_all_reduce_time(4 * MIB, 4, alpha_s=1e-4, link_bytes_per_s=1e9)
    assert r["buckets"] == 1 and r["step_s"] == pytest.approx(0.04 + t)


def test_simulator_scale_layout():
    layout = simulator.model_layout(preset("llama2-70b"))
    assert len(layout) == 80 * 9 + 3  # 9 tensors per Llama block + embedding, final norm, head
    assert sum(n for _, n in layout) == 68_976_648_192  # the 70B parameter count
    speed = simulator.simulator_speed()
    assert speed["bucket_sizes"] == 20 and speed["tensors"] == 723


def test_ddp_layout_matches_rules_and_gradients_match_reference():
    spec = {
        "device": "cpu",
        "stack_layers": 4,
        "stack_hidden": 32,
        "batch": 4,
        "bucket_caps_mb": [0.0001, 0.005, 1],
        "flags_bucket_cap_mb": 1,
        "variants": ["default", "bucket_view", "static_graph", "find_unused", "find_unused+static_graph"],
        # the emulated mode on its own stack and caps (buckets.tradeoff: both sides of the trade-off)
        "modes": ["real", "emulated"],
        "emulated_layer_backward_s": 0.001,
        "emulated_stack_layers": 2,
        "emulated_stack_hidden": 64,
        "emulated_batch": 2,
        "emulated_bucket_caps_mb": [0.0001, 0.02],
        "rounds": 3,
        "emulated_rounds": 2,
        "seed": 0,
        "reps": 2,
        "count_memory": True,
    }
    out = launch.launch(bench.WORKER, spec, nproc=2, timeout_s=300)
    records = {"params": spec, "ddp": out}
    check = analysis.layout_check(records)
    assert all(v["equal"] for v in check.values()), check
    assert check["real:0.0001:default"]["actual"] == [32 * 4, 32 * 32 * 4] * 4  # every tensor alone
    assert check["real:0.005:default"]["actual"] == [2 * (32 * 4 + 32 * 32 * 4)] * 2  # closes past the cap
    assert check["emulated:0.0001:default"]["actual"] == [64 * 4, 64 * 64 * 4] * 2  # its own stack
    assert {r["bucket_cap_mb"] for r in out["rows"] if r["mode"] == "emulated"} == {0.0001, 0.02}
    assert set(out["sync_profile"]) == {"real", "emulated"}  # each mode's profile at its baseline cap
    assert max(out["gradient_gate"].values()) < 1e-6  # the flag variants' gradients too
    # every configuration timed in the same interleaved rounds, no_sync beside it
    assert {(r["bucket_cap_mb"], r["variant"]) for r in out["rows"] if r["mode"] == "real"} == {
        (0.0001, "default"),
        (0.005, "default"),
        (1, "default"),
        (1, "bucket_view"),
        (1, "static_graph"),
        (1, "find_unused"),
        (1, "find_unused+static_graph"),
    }
    assert all(
        len(r["step_times_s"]) == len(r["no_sync_times_s"]) == 3 for r in out["rows"] if r["mode"] == "real"
    )
    assert out["ddp_flags"]["real:1:static_graph"]["static_graph"] == 1
    assert out["ddp_flags"]["real:1:default"]["find_unused_parameters"] == 0
    both = out["ddp_flags"]["real:1:find_unused+static_graph"]
    assert both["find_unused_parameters"] == 1 and both["static_graph"] == 1
    # gradient_as_bucket_view: the gradients live in the buckets; the default flags hold them twice
    param_bytes = 4 * (32 * 32 + 32) * 4
    memory = out["grad_memory"]
    assert memory["default"]["separate_grad_bytes"] == memory["default"]["bucket_bytes"] == param_bytes
    assert memory["bucket_view"]["separate_grad_bytes"] == 0 and memory["bucket_view"]["grad_storages"] == 1
    table = grad_memory.memory_table({"ddp": out}).set_index("setting")
    assert table.loc["gradient_as_bucket_view"].saved_bytes == param_bytes
    # and the copy: one profiled step moves one gradient's worth of bytes fewer through aten::copy_
    assert table.loc["gradient_as_bucket_view"].copy_bytes_avoided == param_bytes


def test_worker_target_is_the_package():
    assert bench.WORKER == "mfulab.studies.buckets.bench:ddp_worker"
    assert launch._resolve(bench.WORKER) is bench.ddp_worker


def test_params():
    import yaml

    from conftest import ROOT

    params = yaml.safe_load((ROOT / "studies" / "buckets" / "smoke.yaml").read_text()) or {}
    Params.from_dict(params)
    for name, value, match in (
        ("bucket_caps_mb", [0], "bucket_caps_mb"),
        ("bucket_caps_mb", [-1, 2], "bucket_caps_mb"),
        ("nproc", 1, "at least 2"),
        ("variants", ["static_graph"], "default"),
        ("scale_world_sizes", [1], "scale_world_sizes"),
        ("scale_presets", ["no-such-model"], "scale_presets"),
        ("gpt_preset", "no-such-model", "gpt_preset"),
        ("scale_matmul_share_of_mamf", 1.5, "scale_matmul_share_of_mamf"),
        ("scale_device", "no-such-card", "scale_device"),
        ("scale_algorithm", "tree", "scale_algorithm"),
        ("modes", ["simulated"], "modes"),
    ):
        with pytest.raises(ParameterError, match=match):
            Params.from_dict({**params, name: value})
    with pytest.raises(ParameterError, match="nproc"):
        Params(nproc=2.5)
    with pytest.raises(ParameterError, match="nproc"):  # more CPU processes than this machine allows
        Params(nproc=10_000).prepared()


# ---------------------------------------------------------------------------- synthetic records
def _records(times: dict, *, layers=100, hidden=128, world=2, device="cpu", bandwidth=26e9, alpha=1.7e-4):
    """Records as bench.measure writes them, with the given per-round step times per
    (cap, variant) of the real mode."""
    rows = [
        {
            "mode": "real",
            "bucket_cap_mb": cap,
            "variant": variant,
            "buckets": 1,
            "step_times_s": list(t),
            "no_sync_times_s": [0.01] * len(t),
        }
        for (cap, variant), t in times.items()
    ]
    flags_ = {f"real:{c}:{v}": {"find_unused_parameters": 0, "unused_parameter_size": 0} for c, v in times}
    params = Params(stack_layers=layers, stack_hidden=hidden).to_dict()
    return {
        "params": params,
        "device": device,
        "bandwidth": {"plateau_bytes_per_s": bandwidth},
        "ddp": {
            "world_size": world,
            "rows": rows,
            "ddp_flags": flags_,
            "allreduce_fit": {"alpha_s": alpha, "link_bytes_per_s": 1.3e9},
        },
    }


def _comparison(lo, hi, ratio=None, drift=0.05):
    ratio = ratio or (lo * hi) ** 0.5
    return Comparison("a", "b", ratio, lo, hi, 0.95, "", run_to_run_drift=drift)


def test_merge_jobs_keeps_rounds_paired():
    job = {
        "rows": [
            {
                "mode": "real",
                "bucket_cap_mb": 1,
                "variant": "default",
                "step_times_s": [1, 2],
                "no_sync_times_s": [0, 0],
            },
            {
                "mode": "real",
                "bucket_cap_mb": 4,
                "variant": "default",
                "step_times_s": [3, 4],
                "no_sync_times_s": [0, 0],
            },
        ],
        "gradient_gate": {"1:default": 0.0},
    }
    other = {**job, "gradient_gate": {"1:default": 1e-7}}
    merged = bench.merge_jobs([job, other])
    assert merged["jobs"] == 2 and merged["rows"][1]["step_times_s"] == [3, 4, 3, 4]
    assert merged["gradient_gate"]["1:default"] == 1e-7  # the worst job's gate
    with pytest.raises(RuntimeError, match="different configurations"):
        bench.merge_jobs([job, {**job, "rows": job["rows"][:1]}])


def test_copy_bound_and_flag_table():
    # one copy (back to .grad; the copy in becomes an in-place division of the same bytes), 2 · bytes
    # (read + write), at the bandwidth shared by 2 ranks
    assert flags.copy_bound_s(1e6, 1e9, 2) == pytest.approx(4e-3)
    rng = np.random.default_rng(0)
    base = 0.020 * (1 + 0.01 * rng.standard_normal(24))
    times = {(25, "default"): base, (25, "bucket_view"): base * 0.5, (25, "static_graph"): base / 1.001}
    rec = _records(times)
    table = flags.flag_table(rec).set_index("flag")
    grad_bytes = 100 * (128 * 128 + 128) * 4
    copy_s = (2 * grad_bytes) * 2 / 26e9  # one copy, a read and a write, 2 ranks
    view = table.loc["gradient_as_bucket_view"]
    assert view.copy_avoided_bound_s == pytest.approx(copy_s)
    assert view.mechanism_bound == pytest.approx(0.020 / (0.020 - copy_s), rel=0.02)
    # a 2× "speed-up" is far more than the copy allows: never confirmed
    assert view.speedup > 1.8 and view.speed_verdict == "inconclusive on this machine"
    # no unused parameters: nothing to skip, outside the claim's mechanism
    assert table.loc["static_graph"].mechanism_bound == 1.0
    assert table.loc["static_graph"].speed_verdict == "not checkable"
    # with find_unused_parameters, static_graph has no bound from this model
    rec["ddp"]["ddp_flags"]["real:25:static_graph"]["find_unused_parameters"] = 1
    assert flags.flag_table(rec).set_index("flag").loc["static_graph"].mechanism_bound == float("inf")


def test_flag_verdict_rule():
    need = verdicts.confirmable_bound(0.05, B6_SEVERAL_PERCENT_RATIO)
    assert need == pytest.approx(1.03 * 1.05**2)
    # a bound below what any interval can confirm: inconclusive whatever the measurement
    for lo, hi in ((1.2, 1.4), (0.5, 0.9), (1.0, 1.05)):
        assert flags.flag_verdict(_comparison(lo, hi), bound=need * 0.99) == "inconclusive on this machine"
    # with a large bound: inside [claimed, bound] confirms, outside the mechanism's range is noise
    assert flags.flag_verdict(_comparison(1.05, 1.17), bound=1.2) == "confirmed"
    assert flags.flag_verdict(_comparison(1.25, 1.4), bound=1.2) == "inconclusive on this machine"
    assert flags.flag_verdict(_comparison(0.8, 0.95), bound=1.2) == "inconclusive on this machine"
    assert flags.flag_verdict(_comparison(0.93, 1.02), bound=1.2) == "refuted"
    assert flags.flag_verdict(_comparison(1.0, 1.12), bound=1.2) == "inconclusive on this machine"


def test_article_bound_is_small():
    a = b6_scale.article_bound()
    assert a["params"] == pytest.approx(6.74e9, rel=0.01)
    # one copy (back to .grad), a read and a write, of a TP-4 quarter of the fp32 gradients, at
    # the step model's memory rate: its memory_efficiency 0.85 × the A100 80G's 2.039 TB/s
    assert a["memory_efficiency"] == 0.85
    assert a["copy_s"] == pytest.approx(2 * (a["params"] / 4) * 4 / (0.85 * 2.039e12))
    assert b6_scale.article_bound(1.0)["copy_s"] == pytest.approx(a["copy_s"] * 0.85)
    assert a["share"] < 0.01  # far below "several percent" at the run's 32 micro-batches


def test_a6_regime_and_verdict():
    fast = 0.02 * np.ones(12)
    times = {(0.0001, "default"): fast * 4, (1, "default"): fast, (25, "default"): fast * 1.01}
    rec = _records(times)
    regime = analysis.a6_regime(rec)
    assert regime["tensors"] == 200 and regime["reached"]
    assert regime["latency_s"] == pytest.approx(2 * 1.7e-4)
    (row,) = analysis.a6_measured_claim(rec, analysis.a6_measured(rec))
    assert row.verdict == "shown" and "4.00×" in row.evidence  # a 2-rank toy: the mechanism, shown
    # the interval is widened by the ratio's own drift between fresh runs (params), not the default 5%
    rec["params"]["per_tensor_ratio_drift"] = 0.5
    m = analysis.a6_measured(rec)
    assert m["per_tensor"].run_to_run_drift == 0.5 and m["per_tensor"].ratio_lo == pytest.approx(4.0 / 1.5)
    rec["params"]["per_tensor_ratio_drift"] = 2.0  # 4× / 3 = 1.33×: no longer clear of the 1.5× line
    (wide,) = analysis.a6_measured_claim(rec, analysis.a6_measured(rec))
    assert wide.verdict != "shown" and "multiplied by 1 + 200%" in wide.evidence
    # a small stack is not the claim's regime: inconclusive whatever the ratio
    small_rec = _records(times, layers=4, hidden=64)
    (small,) = analysis.a6_measured_claim(small_rec, analysis.a6_measured(small_rec))
    assert small.verdict == "inconclusive on this machine" and "not the claim's regime" in small.evidence


def test_sharded_layout_and_accumulation():
    cfg = preset("llama2-7b")
    full = sum(n for _, n in simulator.model_layout(cfg))
    tp8 = sum(n for _, n in simulator.sharded_layout(cfg, tp=8))
    assert full / 8 < tp8 < full / 8 * 1.001  # only the norms stay whole
    stage = simulator.sharded_layout(cfg, pp=4)
    assert {int(n.split(".")[1]) for n, _ in stage} == set(range(8))  # 32 / 4 blocks, no embedding
    with pytest.raises(ParameterError):
        simulator.sharded_layout(cfg, pp=5)
    setting = dict(n=64, bucket_caps_mb=[25], **SCALE_CASE)
    (one,) = simulator.gpt_simulation(cfg, **setting)
    (acc,) = simulator.gpt_simulation(cfg, accumulation=4, **setting)
    assert acc["step_s"] > 3 * one["step_s"] and acc["mfu"] >= one["mfu"]  # comm hides behind more compute


def test_sensitivity_table():
    rec = _records({(25, "default"): [0.02, 0.02]})
    df = sensitivity.sensitivity_table(rec)
    assert (
        df.assumption.iloc[0] == "stated" and df.a6_conclusion_same.iloc[0] and df.b8_conclusion_same.iloc[0]
    )
    assert {
        "latency per step",
        "interconnect",
        "GEMM share of MAMF",
        "gradient sharding",
        "accumulation",
    } <= set(df.assumption)
    assert set(df.a6_20_40_mb) <= {"best", "tied", "outside", "none fits"}
    # only readings vote: the probe link and a scenario where no model's layout fits are reported
    probe = df[df.value.str.startswith("NVLink (A100, all ranks)")].iloc[0]
    assert not probe.reading and df.reading.iloc[0]
    assert ((df.a6_20_40_mb == "none fits") <= ~df.reading).all()
    deciding = sensitivity.deciding(df)
    assert deciding.reading.all() and len(deciding) < len(df)
    # within a scenario only the models whose layout fits answer
    assert (df.a6_models_that_fit.str.len() > 0).all()
    sharded = df[df.value.str.startswith("TP 8 × PP 4")].iloc[0]
    assert sharded.a6_layouts.split(" / ")[0] == f"TP 8 × DP {1024 // 32}"
    # the stated row runs each model at the articles' TP; pure data parallelism is a row of its own
    models = sensitivity.by_size(rec["params"]["scale_presets"])
    assert df.a6_layouts.iloc[0] == " / ".join(
        f"TP {sensitivity.stated_tp(m)} × DP {1024 // sensitivity.stated_tp(m)}" for m in models
    )
    pure = df[df.value.str.startswith("pure data parallelism")].iloc[0]
    assert set(pure.a6_layouts.split(" / ")) == {"TP 1 × DP 1024"}
    assert sensitivity.tied_best({1: 1.0, 25: 1.0005, 100: 1.01}) == [1, 25]
    assert sensitivity.caps_label([1, 25]) == "1–25" and sensitivity.caps_label([200]) == "200"


def test_scale_heatmap_order_and_title():
    rec = _records({(25, "default"): [0.02, 0.02]})
    rec["params"]["scale_presets"] = ["llama2-70b", "llama2-7b"]
    rec["params"]["scale_world_sizes"] = [16, 64]
    best = cluster_scale.best_caps(cluster_scale.scale_table(rec))
    fig = figures.plot_scale_heatmap(best)
    ax = fig.axes[0]
    # by size, each at the articles' TP; DP = cards ÷ TP
    assert [t.get_text() for t in ax.get_yticklabels()] == ["llama2-7b (TP 4)", "llama2-70b (TP 8)"]
    assert set(zip(best.preset, best.world_size, best.dp)) == {
        ("llama2-7b", 16, 4),
        ("llama2-7b", 64, 16),
        ("llama2-70b", 16, 2),
        ("llama2-70b", 64, 8),
    }
    assert ax.get_title() == figures.scale_title(best)
    # the best cap is a ranking inside the step model's error, said in the title
    margin = f"inside the step model's ±{figures.SWITCH_MARGIN:.0%}"
    assert "20–40 MB" in ax.get_title() and margin in ax.get_title()


def test_per_bucket_overhead_on_the_backward_and_the_channel():
    def step(alpha_s, **overhead):
        sizes, ready = [MIB] * 4, [0.01, 0.02, 0.03, 0.04]
        link = dict(n=2, alpha_s=alpha_s, link_bytes_per_s=1e12)
        return simulator.simulate(sizes, ready, backward_end_s=0.04, bucket_cap_mb=1, **link, **overhead)[
            "step_s"
        ]

    # compute-bound (a short α): each of the 4 buckets delays the backward by the overhead
    assert step(1e-4, per_bucket_overhead_s=1e-3) == pytest.approx(step(1e-4) + 4e-3)
    # communication-bound: on the backward's path it hides (only the first bucket starts later),
    # on the channel it adds up
    assert step(1e-2, per_bucket_overhead_s=1e-3) == pytest.approx(step(1e-2) + 1e-3)
    on_channel = step(1e-2, per_bucket_overhead_s=1e-3, overhead_on_channel=True)
    assert on_channel == pytest.approx(step(1e-2) + 5e-3)


def _sweep_records(step_of_cap, caps=(0.0001, 0.0625, 0.25, 1, 4, 25), backward_s=0.0135):
    """Records of a real sweep whose median step per cap is ``step_of_cap(cap)``."""
    rec = _records({(c, "default"): [0.0] * 3 for c in caps})
    for row in rec["ddp"]["rows"]:
        row["step_times_s"] = [step_of_cap(row) * f for f in (0.99, 1.0, 1.01)]
        row["no_sync_times_s"] = [backward_s] * 3
        row["buckets"] = len(
            simulator.form_buckets(
                model_error.stack_param_bytes(100, 128), bucket_cap_mb=row["bucket_cap_mb"]
            )
        )
    return rec


def test_model_error_fit_recovers_a_known_overhead():
    # steps made by the simulator itself with 300 µs per bucket and 5 ms per step: the fit finds them
    rec = _sweep_records(lambda row: 0.005)
    truth = {}
    for row in rec["ddp"]["rows"]:
        truth[row["bucket_cap_mb"]] = model_error.simulated_step_s(rec, row, 3e-4) + 0.005
        row["step_times_s"] = [truth[row["bucket_cap_mb"]] * f for f in (0.99, 1.0, 1.01)]
    fit = model_error.fit_mode(rec, "real")
    assert fit["per_bucket_overhead_s"] == pytest.approx(3e-4, rel=0.02)
    assert fit["per_step_overhead_s"] == pytest.approx(0.005, rel=0.05)
    assert fit["rms_error_fitted"] < 0.01 < fit["rms_error_alpha_beta"]
    # a model that holds predicts each cap from the others too (leave one cap out)
    assert fit["rms_error_held_out"] < 0.02
    # steps the model cannot shape: the fit absorbs them in sample, the held-out caps expose it
    noisy = _sweep_records(
        lambda row: truth[row["bucket_cap_mb"]] * (1.3 if row["bucket_cap_mb"] == 1 else 1.0)
    )
    noisy_fit = model_error.fit_mode(noisy, "real")
    assert noisy_fit["rms_error_held_out"] > noisy_fit["rms_error_fitted"]
    sweep = analysis.sweep_table(rec)
    assert (sweep.residual_fitted.abs() < 0.01).all() and (sweep.residual > 0.1).any()
    # the sensitivity table carries it to scale: two rows, A6's and B8's answers checked
    carried = model_error.carried_overhead(rec)
    assert carried["per_bucket_overhead_s"] == pytest.approx(3e-4, rel=0.02)
    sens = sensitivity.sensitivity_table(rec)
    rows = sens[sens.assumption == sensitivity.FITTED]
    assert len(rows) == 2 and all("300 µs per bucket" in v for v in rows.value)
    # on the channel too, the overhead makes small buckets dearer: 50–100 MiB gain more over 25
    assert rows.b8_gain_50_100_vs_25_points.iloc[1] > sens.b8_gain_50_100_vs_25_points.iloc[0]
    survives = "survives in both" if rows.a6_conclusion_same.all() else "changes"
    assert survives in sensitivity.fitted_text(sens, "a6")


def test_ties_are_named_not_a_best_cap():
    rng = np.random.default_rng(1)
    noise = 1 + 0.05 * rng.standard_normal(24)
    times = {
        (0.0001, "default"): 0.08 * noise,
        (1, "default"): 0.0251 * noise[::-1],
        (25, "default"): 0.025 * noise,
    }
    rec = _records(times)
    assert analysis.tied_fastest_caps(rec) == [1, 25]  # 1 MiB within the interval of 25 MiB
    assert analysis.caps_text([1, 25]) == "1 and 25 MiB" and analysis.caps_text([25]) == "25 MiB"
    (row,) = analysis.a6_measured_claim(rec, analysis.a6_measured(rec))
    assert "1 and 25 MiB tie" in row.measured


def test_static_graph_with_find_unused_is_bounded_by_the_search(monkeypatch):
    rng = np.random.default_rng(0)
    base = 0.020 * (1 + 0.01 * rng.standard_normal(24))
    times = {(25, "default"): base, (25, "find_unused"): base * 1.02, (25, "find_unused+static_graph"): base}
    rec = _records(times)
    rec["ddp"]["ddp_flags"]["real:25:find_unused+static_graph"]["find_unused_parameters"] = 1
    table = flags.flag_table(rec).set_index("flag")
    cost = flags.search_cost(rec)
    row = table.loc["find_unused_parameters+static_graph"]
    # the bound is the search's median cost, not the top of its noisy interval
    assert row.baseline == "find_unused_parameters=True" and row.mechanism_bound == pytest.approx(cost.ratio)
    assert cost.ratio_hi > cost.ratio
    assert table.loc["find_unused_parameters"].speed_verdict == ""  # the search's cost: no claim
    claims = flags.b6_claims(rec, flags.flag_table(rec))
    assert [c.claim for c in claims if "find_unused" in c.claim] and not any(
        "find_unused_parameters=True costs" in c.claim for c in claims
    )
    # at scale: a Python walk over the 7B's graph bounds DDP's C++ search; it joins the copies'
    assert graph_nodes.search_bound_at_scale(rec) is None  # records without the walk
    rec["graph_nodes"] = {"article": {"per_layer": 83, "rest": 17, "total": 2673, "walk_s": 0.004}}
    search = graph_nodes.search_bound_at_scale(rec)
    assert search["share"] == pytest.approx(0.004 / 9.0) and search["per_node_s"] == pytest.approx(
        0.004 / 2673
    )
    at_scale = next(c for c in flags.b6_claims(rec, flags.flag_table(rec)) if c.claim.endswith("at scale"))
    # "可以" over large-scale training is a possibility: every micro-batch count votes, each a
    # published batch at enough DP ranks (one per rank: 2M tokens at 488+ ranks); at the article's
    # call (no find_unused_parameters) the bound is the copy alone, under 3% at every count at the
    # step model's memory rate, but over it at one micro-batch where a copy reaches only 0.7 of the
    # datasheet bandwidth: the achieved share, an assumption, reverses it: analytic only
    a = b6_scale.article_bound()
    one = a["copy_s"] / (a["step_s"] / 32)  # one micro-batch: the step scaled down with its compute
    slow = b6_scale.article_bound(0.7)["copy_s"] / (a["step_s"] / 32)
    assert one < 0.03 <= slow and f"{one:.1%} at 1 (a published batch" in at_scale.evidence
    assert at_scale.verdict == "analytic only" and "every count votes" in at_scale.evidence
    assert f"{slow:.1%} at 0.7" in at_scale.evidence
    assert "at 1 (a published batch, ≥ 2M tokens, at 488+ DP ranks)" in at_scale.evidence
    # the search find_unused_parameters=True would add is context, not a vote
    assert "2,673 autograd nodes" in at_scale.evidence and "Context, not voted" in at_scale.evidence
    with_search = (a["copy_s"] + 0.004) / (a["step_s"] / 32)
    assert f"{with_search:.1%} at 1 micro-batches" in at_scale.evidence and with_search > one
    rec["graph_nodes"]["article"]["walk_s"] = 0.2  # a search large enough to pass 3%: still no vote
    heavy = next(c for c in flags.b6_claims(rec, flags.flag_table(rec)) if c.claim.endswith("at scale"))
    assert heavy.verdict == at_scale.verdict
    rec["graph_nodes"]["article"]["walk_s"] = 0.004
    # the step also holds the reduction left exposed after the last micro-batch: with 1.68 s of it
    # at every count one micro-batch's share falls under 3% at every achieved bandwidth share too,
    # and the row is refuted
    exposed = {"reading": "one port per GPU", "exposed_s": {32: 1.68, 4: 1.68, 1: 1.68}}
    at_scale = next(
        c for c in flags.b6_claims(rec, flags.flag_table(rec), exposed) if c.claim.endswith("at scale")
    )
    assert at_scale.verdict == "refuted (analysis)" and "1.68 s at 1" in at_scale.evidence
    assert "under the reading B8 keeps that leaves the least, one port per GPU" in at_scale.evidence
    first = flags.static_graph_first_iteration()  # the article's "first forward and backward"
    assert first.verdict == "refuted" and first.basis == "documented specification"
    assert "read as a saving in the first forward and backward: false" in first.evidence
    assert "leaves it at False" in first.evidence and "Both readings false" in first.evidence


def test_the_analytic_tensor_list_is_the_reference_models():
    """``flops.param_tensors`` (what DDP buckets in the step model and here) names and sizes
    every parameter of ``model.GPT`` built on the meta device, in its order."""
    import torch

    from mfulab.analytic import flops
    from mfulab.measure.gpt import GPT

    for name in ("tiny", "llama-tiny", "llama2-70b", "gpt2-124m"):
        cfg = preset(name)
        with torch.device("meta"):
            model = GPT(cfg)
        assert flops.param_tensors(cfg) == [(n, p.numel()) for n, p in model.named_parameters()]
        assert sum(k for _, k in flops.param_tensors(cfg)) == flops.param_count(cfg)


def test_the_step_models_ddp_term_issues_the_buckets_the_simulator_forms():
    """One model of DDP's calls: the step model's DP term (framework ddp) and the bucket
    simulator form the same buckets from the same tensors, so their call counts agree."""
    from mfulab.analytic import step as step_model

    cfg = preset("llama2-7b")
    for tp, pp in ((1, 1), (2, 4)):
        step = step_model.step_time(
            cfg,
            n_devices=64 * tp * pp,
            tp=tp,
            pp=pp,
            micro_batch=1,
            global_batch=64 * 8,
            device="a100",
            framework="ddp",
            zero_stage=0,
        )
        sizes = [2 * k for _, k in simulator.sharded_layout(cfg, tp=tp, pp=pp)]  # bf16 gradients
        buckets = simulator.form_buckets(sizes, bucket_cap_mb=25, default_cap=True)
        assert step["dp_calls"] == len(buckets)
        assert 1 < len(buckets) < len(sizes)  # whole tensors: fewer calls than tensors, more than one


def test_both_sides_of_the_trade_off_are_paired_against_the_fastest_cap():
    """A U-shaped sweep: the smallest cap (too many calls) and the largest (one late bucket) are
    both measured as slower than the fastest; a flat right side is not separated."""
    rng = np.random.default_rng(1)
    base = 0.02 * (1 + 0.01 * rng.standard_normal(16))
    u = {(0.0001, "default"): base * 3, (1, "default"): base, (25, "default"): base * 1.3}
    sides = analysis.both_sides(_records(u), "real")
    assert sides["best"] == 1 and sides["too_many_calls_measured"] and sides["late_start_measured"]
    assert sides["late_start"].ratio == pytest.approx(1.3, rel=0.02)
    flat = {**u, (25, "default"): base * 1.001}
    assert not analysis.both_sides(_records(flat), "real")["late_start_measured"]
    assert analysis.both_sides(_records({(1, "default"): base, (25, "default"): base}), "real") is None


def test_sync_cost_splits_the_synchronised_steps_extra_time_by_category():
    def step(wall, cats, ops):
        return {
            "wall_s": wall,
            "categories_s": cats,
            "ops_self_s": [{"category": c, "name": n, "self_s": v} for c, n, v in ops],
        }

    sync = [step(0.030, {"matmul": 0.012, "idle": 0.018}, [("matmul", "aten::mm", 0.012)])] * 3
    plain = [step(0.020, {"matmul": 0.010, "idle": 0.010}, [("matmul", "aten::mm", 0.010)])] * 3
    rec = {"ddp": {"sync_profile": {"real": {"sync": sync, "no_sync": plain}}}}
    t = model_error.sync_cost_table(rec).set_index("category")
    assert t.loc["idle", "extra_s"] == pytest.approx(0.008) and t.loc[
        "idle", "share_of_extra"
    ] == pytest.approx(0.8)
    assert t.loc["matmul", "top_ops"] == "aten::mm +2.00 ms"
    assert model_error.sync_cost_table({"ddp": {}}).empty


def test_graph_node_counts_do_not_depend_on_width():
    """DDP's unused-parameter search walks every autograd node: the 7B's graph is counted per
    layer on the course's GPT at a small width (the shape of the graph, not its size)."""
    from mfulab.studies.buckets import graph_nodes

    n = graph_nodes.gpt_nodes("llama2-7b")
    assert n["total"] == n["rest"] + 32 * n["per_layer"] and n["per_layer"] > 9  # > its 9 weights


def test_a6_points_decide_only_on_a_slow_cluster():
    """A spread of Δ MFU points at fixed FLOPs is a step ratio M / (M − Δ): it passes the margin m
    only where the best cap's MFU M ≤ Δ (1 + m) / m; at the article's 45% neither 5 nor 8 points does."""
    from mfulab.studies.buckets import model_error

    m = 0.378
    top = model_error.best_mfu_to_decide(8, m)
    assert top / (top - 0.08) - 1 == pytest.approx(m)
    assert model_error.best_mfu_to_decide(5, m) < top < 0.45
    text = model_error.spread_reach_text(0.45)
    assert "the row is analytic only" in text and "above 45%" in text
    # the ratio does not depend on article A's 18N-per-token convention: 45/40 = 15/(15 − 5/3)
    assert "its 45% is 15%" in text and "1.7–2.7 standard points" in text and "1.125–1.216" in text


def test_the_lesson_sizes_a_bucket_from_nccls_latency_model():
    """The bucket at which a call's latency is a tenth of its transfer, S = L·B ÷ (0.1·f), from
    the course's NCCL latency model: a ring's grows with the DP width, a tree's barely."""
    from mfulab.analytic import comm
    from mfulab.studies.buckets import lesson

    out = lesson.latency_bound_bytes(128, link_bytes_per_s=20e9)
    lat, nbytes = out["ring"]
    assert nbytes == pytest.approx(lat * 20e9 / (0.1 * comm.bus_factor("all_reduce", 128)))
    t = lesson.lesson_table()
    pure = t[t.tp == 1]
    ring = pure[pure.algorithm == "ring"].bucket_for_10pct_latency_mb.to_numpy()
    tree = pure[pure.algorithm == "tree"].bucket_for_10pct_latency_mb.to_numpy()
    assert (ring[1:] > ring[:-1]).all() and ring[-1] > 5 * tree[-1]
    # at TP 8 each node holds one DP rank: every ring step crosses nodes, at the scale case's 14 µs
    wide = t[(t.tp == 8) & (t.algorithm == "ring")].set_index("dp")
    lat = lesson.Assumptions().nccl_latencies()
    # NCCL's tuning (2.23+): 2(nNodes − 1) inter-node steps of the 2(n − 1), so all of them here
    inter = 2 * (1024 - 1) * lat["inter_step_s"]
    assert wide.latency_us[1024] == pytest.approx((lat["base_s"] + inter) * 1e6)
    assert (wide.bucket_for_10pct_latency_mb.to_numpy() > ring).all()
    text = lesson.lesson_text(t)
    assert "S ≳ L·B ÷ (0.1·f)" in text and "14 µs between nodes" in text and "at TP 8" in text
