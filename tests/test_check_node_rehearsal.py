"""``make check-node`` rehearsed on this machine's CPU: every multi-rank study runs through the
launcher (and through an in-process torchrun where it has an nproc field) on 2 gloo ranks, and
every node check holds on what they measured. Apart from tests/test_check.py so that the
parallel test run (``make test``: pytest-xdist, one file per worker) can put this minutes-long
rehearsal beside the rest of the check tests.

The rehearsal's launcher runs are headless measurements at the smoke profile (``python -m
mfulab measure``), the seam a cluster run uses: the notebooks of overlap, buckets and
parallelism are rendered from them here (``run --from``), which is how their smoke notebooks are
tested, rather than measuring each study a second time. Anatomy's notebook measures in its own
kernel (tests/test_anatomy.py), so that path keeps a multi-rank test of its own."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from mfulab.run import check

from conftest import ROOT, run_check


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    proc, parts = run_check("node", tmp)
    return tmp / "node", proc, parts


def test_check_node_rehearses_every_node_check_on_cpu(rehearsal):
    _, proc, parts = rehearsal
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node = [p for p in parts if p["name"] != "environment report"]
    _, collective = check._studies()
    paths = {True: ("launcher", "in-process torchrun"), False: ("launcher",)}  # parallelism: its own jobs
    assert [p["name"] for p in node] == [
        f"{s.id}, 2 ranks, {path}" for s in collective for path in paths["nproc" in s.params.names()]
    ]
    assert "parallelism" in [s.id for s in collective]
    assert all(p["status"] == "ran" and "gloo rehearsal" in p["detail"] for p in node), node


def _render(rehearsal, study: str, results_root):
    """The study's smoke notebook analysing the rehearsal's launcher measurement; its folder."""
    node, proc, _ = rehearsal
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = subprocess.run(
        [sys.executable, "-m", "mfulab", "run", study, "--profile", "smoke", "--from", str(node / study)]
        + ["--results-root", str(results_root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (out,) = results_root.glob(f"*/{study}")  # the measuring machine's folder
    # rendering from a folder analyses those measurements, not new ones
    assert json.loads((out / "measurements.json").read_text()) == json.loads(
        (node / study / "measurements.json").read_text()
    )
    return out, json.loads((out / "metrics.json").read_text())


def test_overlap_notebook_from_a_headless_measurement(rehearsal, tmp_path):
    out, metrics = _render(rehearsal, "overlap", tmp_path)
    assert metrics["collective_wrong_elements"] == 0 and metrics["overlap_wrong_elements"] == 0
    assert {c["id"] for c in metrics["claims"]} == {"A2", "A3", "A4", "A5", "A18", "B9", "B16"}
    assert {"busbw.png", "timeline.png", "step_vs_k.png"} <= {p.name for p in (out / "figures").iterdir()}


def test_buckets_notebook_from_a_headless_measurement(rehearsal, tmp_path):
    _, metrics = _render(rehearsal, "buckets", tmp_path)
    assert metrics["layouts_match_simulator"] and metrics["gradient_gate_max_abs_diff"] < 1e-6
    assert metrics["best_bucket_cap_mb_real"] in (0.01, 1, 25)  # the smoke profile's caps
    assert {c["id"] for c in metrics["claims"]} >= {"A6", "B8", "B6"}


def test_parallelism_notebook_from_a_headless_measurement(rehearsal, tmp_path):
    out, metrics = _render(rehearsal, "parallelism", tmp_path)
    assert {c["id"] for c in metrics["claims"]} == {"A10", "A11", "A12", "A13", "A15", "B10"}
    # counted, not estimated: fully sharded moves 3Ψ per micro-batch to DDP's 2Ψ, holds half on 2 ranks
    assert metrics["zero3_traffic_over_ddp"] == 1.5 and metrics["sharded_state_bytes_share"] == 0.5
    # FSDP2, TP and SP compute what DDP / the block does
    assert metrics["parallel_gradient_gate_max_abs_diff"] < 1e-4
    pipeline = pd.read_csv(out / "tables" / "pipeline.csv")
    assert "real" in set(pipeline.compute)  # the real-compute pipeline ran; its gradients are gated
    assert (pipeline.p2p_messages == pipeline.p2p_messages_formula).all()
    sharding = pd.read_csv(out / "tables" / "sharding.csv")
    # counted collective buffers and bytes held equal their formulas exactly, every config and m
    assert (sharding.traffic_elements == sharding.traffic_formula_elements).all()
    assert (sharding.peak_bytes == sharding.peak_formula_bytes).all()
    assert set(sharding.config) == {"ddp", "fsdp_grad_op", "fsdp_full"}
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"bubble.png", "pipeline_timeline.png", "sharding.png"} <= figures
