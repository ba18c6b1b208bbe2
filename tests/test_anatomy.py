"""The step-anatomy study: the smoke profile end to end through papermill on 2 ranks, each knob
moving the category it should, bad input refused before any work, a hanging rank killed."""

import json
import os
import time

import pytest
import yaml

from mfulab import results
from mfulab.errors import ParameterError
from mfulab.measure.launch import LaunchError
from mfulab.studies.anatomy import analysis, bench, claims, credit, stated
from mfulab.studies.anatomy.params import Params
from mfulab.studies.anatomy.worker import LADDER, STRAGGLER
from mfulab.studykit import verdicts

from conftest import ROOT


def smoke_params(**changes):
    params = yaml.safe_load((ROOT / "studies" / "anatomy" / "smoke.yaml").read_text())
    params.update(changes)
    return Params.from_dict(params)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``python -m mfulab run anatomy --profile smoke`` (2 ranks on gloo, papermill)."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("results")
    proc = subprocess.run(
        [sys.executable, "-m", "mfulab", "run", "anatomy", "--profile", "smoke", "--results-root", str(root)],
        cwd=ROOT,
        env={**os.environ, "MACHINE": "testbox"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = root / "testbox" / "anatomy"
    return out, json.loads((out / "measurements.json").read_text())


def test_smoke_runs_end_to_end_with_two_ranks(smoke):
    out, records = smoke
    assert records["job"]["world_size"] == 2 and len(records["job"]["ranks"]) == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert {c["id"] for c in metrics["claims"]} == {"B2", "B15", "B13"}  # B13: the run, the clocks, the lock
    assert metrics["ladder_speedup"] > 0 and metrics["naive_step_s"] > 0
    assert {"ladder.png", "rank_split.png", "straggler.png", "steps.png"} <= {
        p.name for p in (out / "figures").iterdir()
    }
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "anatomy_naive_rank0.json.gz",
        "anatomy_naive_rank1.json.gz",
    ]
    assert (out / "tables" / "b15_ladder.csv").exists() and (out / "07_step_anatomy.ipynb").exists()
    # every rung trains the same model on the same batches: the same first loss on a rank
    first = {r["rung"]: r["loss"] for r in reversed(records["job"]["ranks"][0]["rows"])}
    assert max(first.values()) - min(first.values()) < 1e-3 * max(first.values())


def test_each_step_splits_into_useful_compute_and_the_four_losses(smoke):
    _, records = smoke
    rank_flops, rank_ceiling = analysis.rank_flops_and_ceiling(records)
    useful_s = rank_flops / rank_ceiling
    assert useful_s > 0
    for rank in records["job"]["ranks"]:
        for row in rank["rows"]:
            split = analysis.step_categories(row, rank_flops, rank_ceiling)
            assert list(split) == list(analysis.SPLIT)
            assert sum(split.values()) == pytest.approx(row["step_s"])
            assert min(split.values()) >= -1e-9
            assert split["useful compute"] <= useful_s + 1e-12
        for step in rank["profile"]["steps"]:
            assert sum(step["categories_s"].values()) == pytest.approx(step["wall_s"], rel=1e-4)
    agree = analysis.profiler_vs_timestamps(records)
    # the profiler times kernels: compute as one category there, beside the other three losses
    assert set(agree.category) == {analysis.COMPUTE, *analysis.CATEGORIES[1:]} and len(agree) == 2 * 2 * 4


def test_knobs_move_their_categories(smoke):
    _, records = smoke
    rows = [r for rank in records["job"]["ranks"] for r in rank["rows"]]
    by = {name: [r for r in rows if r["rung"] == name] for name, _ in LADDER}
    # 0 workers: the batch is read inside the step, so every naive step waits for data
    assert all(r["data_s"] > 0 for r in by["naive"])
    # the article's caps (25 → 50 MiB) scaled to this model's MLP matrix: the buckets knob doubles
    # the cap past a matrix, so it makes fewer all-reduces (after DDP's first step, which rebuilds
    # its buckets), and every rung has several buckets to start while backward goes on
    caps = records["bucket_caps_mib"]
    assert caps["buckets"] == pytest.approx(2 * caps["naive"]) and caps["scaled_from_article"] == [True, True]
    naive_calls = [r["hook_calls"] for r in by["naive"] if r["record"] != "warmup"]
    assert min(naive_calls) > max(r["hook_calls"] for r in by["buckets"]) > 1
    # a checkpoint costs time only on its steps
    assert all((r["checkpoint_s"] > 0) == r["checkpoint"] or not r["checkpoint"] for r in by["naive"])
    assert any(r["checkpoint"] for r in by["naive"])
    # the profiler sees the naive rung's data wait, communication and checkpoint
    cats = records["job"]["ranks"][0]["profile"]["steps"]
    assert all(s["categories_s"]["data / host-to-device"] > 0 for s in cats)
    assert all(s["categories_s"]["communication"] > 0 for s in cats)
    # on CPU each rank owns a core (as a GPU is its rank's own)
    pinned = [rank["pinned_core"] for rank in records["job"]["ranks"]]
    assert len(set(pinned)) == min(2, len(os.sched_getaffinity(0)))
    # the straggler's delay lands on the slowest rank only, on every second step of its blocks
    strag = [r for r in rows if r["record"] == STRAGGLER]
    slow = records["job"]["straggler"]["rank"]
    assert all(r["straggler_s"] == 0 for r in strag if r["rank"] != slow)
    on = {r["step"]: r["straggler_s"] > 0 for r in strag if r["rank"] == slow}
    assert [on[k] for k in sorted(on)] == [i % 2 == 1 for i in range(len(on))]
    assert all(r["straggler_on"] == on[r["step"]] for r in strag)  # every rank knows which steps


def test_claims_and_ladder_from_the_records(smoke):
    _, records = smoke
    table = analysis.ladder_table(records)
    assert list(table.rung) == [*records["ladder"], "recompute"]
    assert table.speedup.iloc[1:-1].notna().all()
    ids = [c.id for c in claims.claims(records)]
    assert ids == ["B2", "B15", "B13", "B13", "B13", "B13"]
    (b15,) = [c for c in claims.claims(records) if c.id == "B15"]
    assert b15.verdict == "inconclusive on this machine" and "out of reach" in b15.evidence
    # beside it, the article's own attribution of its ladder in MFU points: 42% or 60% by the reading
    assert "42% (NCCL tuning apart; 30%–54%" in b15.evidence
    assert "60% (NCCL tuning counted as overlap" in b15.evidence
    assert "of the MFU points it gained, by the reading: not checkable" in b15.evidence
    # the leave-one-out attribution: the last rung without each knob, timed in the same rounds
    loo = analysis.leave_one_out_table(records)
    assert list(loo.knob) == records["ladder"][1:] and (loo.step_all_s == table.step_s.iloc[-2]).all()
    assert (loo.loo_gain_s == loo.step_without_s - loo.step_all_s).all()
    assert "leave-one-out, the last rung without each knob" in b15.evidence
    # the last knob's leave-one-out run is the rung before it again: a measured replicate
    before, last = records["ladder"][-2], records["ladder"][-1]
    assert f"the same configuration timed twice, the '{before}' rung and 'all but {last}'" in b15.evidence
    # on a CPU the loader worker and the background writer share their rank's pinned core: said
    pinned = all(r.get("pinned_core") is not None for r in records["job"]["ranks"])
    assert ("take compute from their own rank" in b15.evidence) == (records["device"] == "cpu" and pinned)
    # 3 rounds: C(5, 3) = 10 distinct resamples, said, so no one reads the intervals as 95%
    assert "with 3 rounds the bootstrap over whole rounds has 10 distinct resamples" in b15.measured
    assert credit._few_rounds_note(credit.FEW_ROUNDS) == ""
    g = analysis.b15_gain_shares(records)
    assert g["loo_comm_data_share"] is not None
    # B2 is a taxonomy whose last kind takes the rest: shown by construction whatever the split,
    # the article's own case study beside it
    (b2,) = [c for c in claims.claims(records) if c.id == "B2"]
    assert b2.verdict == "shown" and b2.basis == verdicts.CONSTRUCTION
    assert "各种调度与冗余操作" in b2.measured
    assert "slow operators +0.8 s, communication wait +0.7 s, data wait +0.3 s, scheduling waste -0.1 s" in (
        b2.evidence
    )
    # the floor still decides which losses the descriptive split counts as present
    high_p = smoke_params(b2_present_share=0.99)
    high = claims.b2_claim(records, high_p, claims.tables(records, high_p))
    assert high.verdict == "shown" and "0 of 4 losses take ≥ 99%" in high.evidence
    assert "with the checkpoint at one write per 500 steps (Hugging Face Trainer's default)" in b2.evidence


def test_too_many_ranks_are_refused_before_any_work():
    with pytest.raises(ParameterError, match="nproc"):
        smoke_params(nproc=10_000).prepared()
    with pytest.raises(ParameterError, match="nproc"):
        smoke_params(nproc=1)
    with pytest.raises(ParameterError, match="naive_format"):
        smoke_params(naive_format="floppy")


def test_node_profile_is_refused_on_a_machine_without_its_gpus(run_cli):
    import torch

    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine can run the node profile")
    proc = run_cli("run", "anatomy", "--profile", "node", "--results-root", "unused", timeout=120)
    assert proc.returncode == 2 and ("GPU" in proc.stderr or "cuda" in proc.stderr.lower())


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] != "Z":
                    alive.append(pid)
        except FileNotFoundError:
            pass
    return alive


def test_a_hanging_rank_is_killed_and_earlier_results_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "WORKER", "workers:hang_on_last_rank")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    final = tmp_path / "results" / "anatomy"
    final.mkdir(parents=True)
    (final / "metrics.json").write_text('{"earlier": true}')
    p = smoke_params(timeout_s=30, scratch_dir=str(tmp_path / "corpus"))
    with pytest.raises(LaunchError, match="timeout_s"):
        with results.atomic_dir(final):
            bench.measure(p)
    pids = [int(f.stem) for f in (tmp_path / "corpus").glob("*.pid")]
    assert len(pids) == 2
    time.sleep(0.5)
    assert _alive(pids) == []
    assert json.loads((final / "metrics.json").read_text()) == {"earlier": True}


@pytest.mark.parametrize("visible,device_ids", [(1, [0]), (8, [3])])
def test_ddp_device_ids_follow_the_gpus_this_rank_sees(monkeypatch, visible, device_ids):
    """A scheduler that shows each rank one GPU (accepted by check_world_size): LOCAL_RANK=3 is
    then an invalid device ordinal; the rank's only GPU is 0."""
    import torch

    from mfulab.studies.anatomy.worker import ddp_device_ids

    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    assert ddp_device_ids("cuda") == device_ids
    assert ddp_device_ids("cpu") is None


class _DeviceTimeline:
    """A simulated GPU: the host enqueues work instantly and runs ahead; an event records the
    device time at which the stream reaches it (what ``torch.cuda.Event`` reports)."""

    def __init__(self):
        self.device_ms = 0.0

    class _Event:
        def __init__(self, timeline, enable_timing=True):
            self.timeline, self.t_ms = timeline, None

        def record(self):
            self.t_ms = self.timeline.device_ms

        def elapsed_time(self, other):
            return other.t_ms - self.t_ms

    def Event(self, enable_timing=True):  # noqa: N802 (torch.cuda's spelling)
        return self._Event(self, enable_timing)


def test_comm_wait_on_a_gpu_is_read_on_the_device_timeline_not_the_host_clock():
    """Audit D20. Overlapped rung, three buckets whose gradients are ready at 10, 20 and 30 ms of
    device time, the last bucket's all-reduce done at 38 ms: the exposed wait is 8 ms. The host
    ran every hook within its first millisecond, so host timestamps (the old reading) charged the
    whole 37 ms of queued backward to communication."""
    from mfulab.studies.anatomy.worker import CudaEventClock, HookTimer, step_clock

    assert isinstance(step_clock("cuda"), CudaEventClock)
    gpu = _DeviceTimeline()
    hook = HookTimer(blocking=False, device="cuda", clock=CudaEventClock(gpu))
    for ready_ms in (10.0, 20.0, 30.0):  # the stream position of each hook's mark
        gpu.device_ms = ready_ms
        hook.last_return = hook.clock.mark()
    gpu.device_ms = 38.0
    backward_end = hook.clock.mark()
    assert hook.comm_wait_s(backward_end, backward_s=0.040) == pytest.approx(0.008)

    # blocking rung: each bucket's span from gradients ready to the stream's wait returning
    blocking = HookTimer(blocking=True, device="cuda", clock=CudaEventClock(gpu))
    for ready_ms, done_ms in ((10.0, 13.0), (23.0, 26.0), (36.0, 39.0)):
        gpu.device_ms = ready_ms
        began = blocking.clock.mark()
        gpu.device_ms = done_ms
        blocking.last_return = blocking.clock.mark()
        blocking.spans.append((began, blocking.last_return))
    assert blocking.comm_wait_s(blocking.clock.mark(), backward_s=0.040) == pytest.approx(0.009)
    assert blocking.comm_wait_s(blocking.clock.mark(), backward_s=0.005) == pytest.approx(0.005)  # capped


def test_leave_one_out_configurations_turn_off_one_knob_of_the_last_rung():
    from mfulab.studies.anatomy import ladder

    last = ladder.rungs()[-1][1]
    configs = dict(ladder.leave_one_out())
    assert list(configs) == [f"all but {name}" for name, _ in ladder.LADDER[1:]]
    assert configs["all but buckets"] == {k: v for k, v in last.items() if k != "buckets"}
    # the two-knob step (format + workers) is left out whole
    assert "format" not in configs["all but format + workers"]
    assert "workers" not in configs["all but format + workers"]


def test_gain_shares_read_no_share_from_gains_of_both_signs():
    """The ladder and the leave-one-out credit share one rule: a share of a sum of gains is read
    only when every gain is positive."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "knob": ["buckets", "format + workers", "fused attention", "background checkpoint"],
            "targets": ["communication wait", "data wait", "slow operators", "scheduling waste"],
            "gain_s": [0.3, 0.1, 0.4, 0.6],
        }
    )
    by_target, share = analysis.gain_shares(frame, "gain_s")
    assert by_target["data wait"] == pytest.approx(0.1) and share == pytest.approx(0.5)
    # §5.3's background checkpoint came after the article's ladder: credited, not in the share
    assert by_target["scheduling waste"] == pytest.approx(0.6)
    ladder_frame = frame.rename(columns={"knob": "rung"}).set_index("rung")  # the ladder table's form
    assert analysis.gain_shares(ladder_frame, "gain_s")[1] == pytest.approx(0.5)
    frame.loc[2, "gain_s"] = -0.1  # a knob that made the step slower
    _, mixed = analysis.gain_shares(frame, "gain_s")
    assert mixed != mixed  # NaN


def test_the_ladder_follows_the_articles_order_with_its_bucket_count():
    from mfulab.studies.anatomy import ladder

    # article B §5.2: SDPA (step 1), DDP buckets (2), the loader (4); §5.3's background checkpoint last
    assert [name for name, _ in ladder.LADDER] == [
        "naive",
        "fused attention",
        "buckets",
        "format + workers",
        "background checkpoint",
    ]
    assert set(analysis.KNOB_TARGETS) == {name for name, _ in ladder.LADDER[1:]}
    # Llama 2 7B's MLP matrix at TP 4 in fp32 is 45.1 MB: 25 MiB below it, 50 MiB above
    matrix = 11008 / 4 * 4096 * 4
    assert 25 * 2**20 < matrix < 50 * 2**20
    before, after = ladder.article_bucket_caps_mib(matrix)
    assert (before, after) == (pytest.approx(25.0), pytest.approx(50.0))
    here = 1024 * 256 * 4  # this course's cpu-small MLP matrix: 1 MiB
    before, after = ladder.article_bucket_caps_mib(here)
    assert before * 2**20 < here < after * 2**20  # the same side of the matrix as the article's caps


def test_b2_splits_compute_at_the_ceiling():
    split = verdicts.b2_compute_split(0.1, 6e7, 1e9)  # 60 ms of model FLOPs at the ceiling
    assert split == {"useful compute": pytest.approx(0.06), "slow operators": pytest.approx(0.04)}
    # compute faster than the ceiling allows (a stale ceiling): all useful, no negative loss
    assert verdicts.b2_compute_split(0.05, 6e7, 1e9)["slow operators"] == 0.0
    with pytest.raises(ValueError):
        verdicts.b2_compute_split(0.1, 6e7, 0.0)


def test_b2_names_the_checkpoint_period_its_scheduling_waste_rests_on():
    import pandas as pd

    from mfulab.studies.anatomy import claims

    # one rank, blocks of 3 steps of 0.2 s, a 0.1 s write on the block's middle step
    rows = [
        {
            "record": "naive",
            "rank": 0,
            "checkpoint": i % 3 == 1,
            "checkpoint_s": 0.1 if i % 3 == 1 else 0.0,
            "step_s": 0.3 if i % 3 == 1 else 0.2,
        }
        for i in range(9)
    ]
    records = {"job": {"ranks": [{"rows": rows}]}, "params": {"block_steps": 3, "checkpoint_every_blocks": 1}}
    split = pd.DataFrame(
        {
            "category": [
                "useful compute",
                "slow operators",
                "communication wait",
                "data wait",
                "scheduling waste",
            ],
            "share_of_step": [0.5, 0.3, 0.05, 0.005, 0.3 / 2.1],
        }
    )
    c = claims.b2_checkpoint_period(records, split, 0.01)
    assert c["write_s"] == pytest.approx(0.1) and c["plain_step_s"] == pytest.approx(0.2)
    assert c["period_steps"] == 3 and c["step_s"] == pytest.approx(0.7 / 3)
    # the share re-derives from the printed means: write / (period · mean step)
    assert c["checkpoint_share"] == pytest.approx(0.3 / 2.1) == pytest.approx(0.1 / (3 * 0.7 / 3))
    # 0.1 · 0.99 / (0.01 · 0.2) = 49.5: whole steps, never rounded up; the write counts in the period
    assert c["longest_period_at_floor"] == 49
    assert 0.1 / (49 * 0.2 + 0.1) >= 0.01 > 0.1 / (50 * 0.2 + 0.1)
    period = claims.CHECKPOINT_PERIOD_STEPS  # Hugging Face Trainer's default save_steps
    assert period == 500 and c["share_at_period"] == pytest.approx(0.1 / (period * 0.2 + 0.1))
    # the checkpoint was all of the scheduling waste: at 500 steps two losses remain
    assert c["present_at_period"] == ["slow operators", "communication wait"]


def test_b13_does_not_decide_where_the_ranks_share_a_core(smoke):
    """A spinning straggler on a core another rank also runs on slows that rank too: not one slow
    card among healthy ones, so B13 stays open there, whatever the figures say."""
    import copy

    _, records = smoke
    if claims.shared_cores(records):
        pytest.skip("this machine's smoke run already shares a core")
    shared = copy.deepcopy(records)
    for rank in shared["job"]["ranks"]:
        rank["pinned_core"] = 0
    assert claims.shared_cores(shared) == 1
    own = claims.b13_claim(records, None)  # DDP's all-reduce waits for every rank: by construction
    assert own.basis == verdicts.CONSTRUCTION and own.verdict in ("shown", "inconclusive on this machine")
    b13 = claims.b13_claim(shared, None)
    assert b13.verdict == "inconclusive on this machine" and "ran on 1 core(s)" in b13.evidence
    for rank in shared["job"]["ranks"]:
        rank["pinned_core"] = None  # a platform without an affinity call pins nothing
    assert claims.shared_cores(shared) == 0


def test_b13_straggler_is_the_slowest_rank_and_the_others_wait_for_it(smoke):
    """The delay goes on the rank with the most compute in its warm-up steps; beside the share of
    it reaching the job, the other rank's communication wait with the straggler on and off, read
    from the per-rank table of the same blocks."""
    _, records = smoke
    s = records["job"]["straggler"]
    computes = s["warmup_compute_s"]
    assert len(computes) == 2 and s["rank"] == max(range(2), key=computes.__getitem__)
    e = analysis.b13_effect(records)
    t = analysis.straggler_table(records).set_index(["straggler", "rank"])["communication wait"]
    other = 1 - s["rank"]
    assert e["others_wait_off_s"] == pytest.approx(t[("off", other)])
    assert e["others_wait_share"] == pytest.approx((t[("on", other)] - t[("off", other)]) / s["delay_s"])
    assert "of the delay" in claims.b13_claim(records, None).evidence
    # the decider: the healthy rank's wait paired step by step, its interval around its median
    assert e["others_wait_reached_lo"] <= e["others_wait_reached"] <= e["others_wait_reached_hi"]
    row = claims.b13_claim(records, None)
    if not claims.shared_cores(records):
        assert (row.verdict == "confirmed") == (e["others_wait_reached_lo"] >= stated.B13_REACHED)
    assert f"the healthy rank waited {e['others_wait_reached']:.0%}" in row.evidence


def test_knob_power_sets_each_target_beside_what_the_ladder_resolves(smoke):
    """Each rung's whole target (the loss it can remove, attention's own kernels for fused
    attention) as a share of the naive step, beside its interval's half-width: resolvable only
    where the target is the larger."""
    _, records = smoke
    t = claims.tables(records)
    power = t["b15_power"]
    ladder = t["b15_ladder"].dropna(subset=["speedup"]).set_index("rung")
    assert list(power.rung) == list(ladder.index)
    for r in power.itertuples():
        assert r.interval_half_width == pytest.approx(
            (ladder.speedup_hi[r.rung] - ladder.speedup_lo[r.rung]) / 2
        )
        assert r.resolvable_here == (r.target_share_of_step > r.interval_half_width)
    attention = power.set_index("rung").loc["fused attention"]
    assert attention.targets == "attention kernels (profiler)" and attention.target_share_of_step < 0.5
    # the useful / slow split is also given at the ceiling re-timed after the job
    split = t["b2_split"].set_index("category")
    assert split.share_at_ceiling_now.notna().all()
    assert split.share_at_ceiling_now.sum() == pytest.approx(split.share_of_step.sum(), rel=1e-6)


def test_b13_article_rows_check_the_clock_figures_and_the_lock_advice(monkeypatch):
    """The article's 8% against its clocks: 1410 / 1200 = 1.175, so a step wholly bound to the SM
    clock would be 17.5% slower; 8% fits (46% of the step followed the clock), which the clocks
    cannot confirm (not checkable); a stated slowdown past the bound would refute it. The lock
    advice is NVML's documented behaviour (confirmed, documented specification); the stable speed it
    promises shows no spread (not checkable)."""
    from mfulab.studies.anatomy import b13_article

    row = b13_article.b13_clock_claim()
    assert (
        row.verdict == "not checkable"
        and "17.5% slower" in row.evidence
        and "46% of the step" in row.evidence
    )
    monkeypatch.setattr(b13_article, "B13_STATED", {**b13_article.B13_STATED, "card_slowdown": 0.2})
    assert b13_article.b13_clock_claim().verdict == "refuted"
    lock = b13_article.b13_lock_claim()
    assert lock.verdict == "confirmed" and lock.basis == verdicts.DOCUMENTED
    stable = b13_article.b13_stable_claim()
    assert stable.verdict == "not checkable" and "8.4 → 8.5 s (+1.2%)" in stable.evidence


def test_checkpoint_spike_reads_each_blocks_slowest_job_step_over_its_median():
    """§5.3's quantity, the spike: per block of three steps, the slowest rank's step at each step,
    the block's slowest over its median; a background write's cost, landing a step later, counts."""
    from mfulab.studies.anatomy import credit

    def rows(label, steps):
        return [
            {"record": label, "step": i, "step_s": t + 0.001 * rank, "rank": rank, "checkpoint": i % 3 == 0}
            for i, t in enumerate(steps)
            for rank in (0, 1)
        ]

    sync = [0.40, 0.10, 0.10] * 4  # the write in each block's first step: +0.3 s
    background = [0.10, 0.13, 0.10] * 4  # its cost a step later: +0.03 s
    records = {
        "params": {"block_steps": 3},
        "job": {
            "ranks": [{"rows": rows("format + workers", sync) + rows("background checkpoint", background)}]
        },
    }
    spike = credit.checkpoint_spike(records)
    assert spike["synchronous"]["spike_s"] == pytest.approx(0.30) and spike["synchronous"]["blocks"] == 4
    assert spike["background"]["spike_s"] == pytest.approx(0.03)
    text = credit.spike_text(spike)
    assert "300.0 ms" in text and "30.0 ms" in text and "(÷10.0)" in text and "3 → 0.3 s" in text
    assert credit.checkpoint_spike({**records, "job": {"ranks": [{"rows": rows("naive", sync)}]}}) is None
