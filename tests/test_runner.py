"""The runner's guarantees, each with a real process: Ctrl-C and SIGTERM stop a study and
every worker it started, the headless path allocates like ``make``, core counts follow the
affinity mask, ``--if-changed`` skips unchanged work, ``site --out`` never deletes a folder
it did not write."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mfulab import paths
from mfulab.errors import ParameterError
from mfulab.measure import host, launch, procs
from mfulab.run import course, runner

from conftest import ROOT


def _descendant_cmdlines(pid):
    out = {}
    for child in procs.descendants(pid):
        try:
            out[child] = open(f"/proc/{child}/cmdline").read().replace("\0", " ")
        except OSError:
            pass
    return out


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_study_its_kernel_and_every_rank(tmp_path, sig, code):
    """A real multi-process run (overlap: kernel → torchrun → 2 gloo ranks) is signalled
    once its ranks run; within 5 s nothing it started is alive, earlier results are intact,
    no temporary folder is left, and the exit code is 128 + signal."""
    existing = tmp_path / "testbox" / "overlap"
    existing.mkdir(parents=True)
    (existing / "metrics.json").write_text('{"kept": true}')
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mfulab",
            "run",
            "overlap",
            "--profile",
            "smoke",
            "--results-root",
            str(tmp_path),
        ],
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "MACHINE": "testbox"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            seen.update(_descendant_cmdlines(proc.pid))
            if any("mfulab.measure.launch" in c for c in seen.values()):  # a rank is running
                break
            time.sleep(0.2)
        assert proc.poll() is None, (
            "the study ended before its ranks were seen:\n" + proc.stderr.read()[-3000:]
        )
        ranks = [p for p, c in seen.items() if "mfulab.measure.launch" in c]
        assert ranks and any("ipykernel" in c for c in seen.values())
        seen.update(_descendant_cmdlines(proc.pid))
        proc.send_signal(sig)
        signalled = time.monotonic()
        rc = proc.wait(timeout=10)
        gone_after_s = None
        while time.monotonic() - signalled < 5:
            if not any(procs.alive(p) for p in seen):
                gone_after_s = time.monotonic() - signalled
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == code, proc.stderr.read()[-3000:]
    assert gone_after_s is not None, [c for p, c in seen.items() if procs.alive(p)]
    assert json.loads((existing / "metrics.json").read_text()) == {"kept": True}
    assert sorted(p.name for p in existing.parent.iterdir()) == ["overlap"]
    assert "interrupted" in proc.stderr.read()


def test_kill_descendants_reaches_processes_in_their_own_session():
    """A grandchild in a new session (as torchrun's launcher makes) is still found and stopped."""
    code = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)'], start_new_session=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(procs.descendants()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = procs.descendants()
        assert len(found) >= 2
        assert procs.kill_descendants(grace_s=1.0) >= 2
        assert not any(procs.alive(p) for p in found)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_headless_measure_sets_the_allocator_environment(tmp_path):
    """``python -m mfulab measure`` started without the glibc variables re-executes itself
    with them, as ``make <study>`` runs the kernel."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "MFULAB_NO_REEXEC"}
    out = tmp_path / "m"
    proc = subprocess.run(
        [sys.executable, "-m", "mfulab", "measure", "mfu", "-f", "studies/mfu/smoke.yaml", "--out", str(out)],
        cwd=ROOT,
        env={**env, "MACHINE": "testbox"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = json.loads((out / "env.json").read_text())["fingerprint"]["malloc_env"]
    assert recorded == paths.MALLOC_ENV


def test_core_counts_follow_the_affinity_mask(monkeypatch):
    monkeypatch.delenv("MACHINE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    assert host.usable_cpus() == 3
    if not host.fingerprint()["cuda_available"]:
        assert host.machine_slug() == "cpu-3c"
    with pytest.raises(ParameterError, match="3 usable cores"):
        launch.check_world_size(13, "cpu")
    launch.check_world_size(12, "cpu")


def test_slug_of_a_pinned_process():
    if not os.path.exists("/usr/bin/taskset"):
        pytest.skip("taskset (util-linux) is not installed")
    proc = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            "from mfulab.measure import host; print(host.usable_cpus())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "1", proc.stderr


def test_site_out_refuses_a_folder_it_did_not_write(run_cli, tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    results_root = tmp_path / "results"
    (results_root / "testbox").mkdir(parents=True)
    proc = run_cli(
        "site", "--machine", "testbox", "--results-root", str(results_root), "--out", str(precious)
    )
    assert proc.returncode == 2 and "not a site" in proc.stderr
    assert (precious / "thesis.tex").read_text() == "years of work"
    # a machine folder without executed notebooks is refused too, before anything is written
    proc = run_cli(
        "site", "--machine", "testbox", "--results-root", str(results_root), "--out", str(tmp_path / "s")
    )
    assert proc.returncode == 2 and "no machine's executed study notebooks" in proc.stderr
    committed = ROOT / "results"
    machines = [d.name for d in committed.iterdir() if d.is_dir() and d.name != "comparison"]
    if not machines:
        pytest.skip("no committed results to build a site from")
    site = tmp_path / "site"
    for _ in range(2):  # a new folder, then the site it wrote, are fine
        proc = run_cli(
            "site",
            "--machine",
            machines[0],
            "--results-root",
            str(committed),
            "--out",
            str(site),
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert (site / "index.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "results", "site"]  # nothing left behind


def test_if_changed_skips_an_unchanged_study(tmp_path, monkeypatch):
    """A study is skipped when its env.json records the same inputs, and re-run otherwise."""
    from mfulab.studykit.registry import get

    monkeypatch.setenv("MACHINE", "testbox")
    study = get("mfu")
    params = study.params.from_dict(paths.read_profile(ROOT / "studies/mfu/smoke.yaml")).to_dict()
    expected = runner.inputs(study, params, profile="smoke", root=ROOT, results_root=tmp_path)
    final = tmp_path / "testbox" / "mfu"
    final.mkdir(parents=True)
    from mfulab import results

    results.write_json(final / "env.json", {"inputs": expected})
    calls = []
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: calls.append(a))
    runner.run("mfu", profile="smoke", results_root=tmp_path, if_changed=True)
    assert calls == []  # up to date: nothing executed
    with pytest.raises(FileNotFoundError):  # a changed parameter re-runs (the stub writes no notebook)
        runner.run("mfu", profile="smoke", overrides={"steps": 5}, results_root=tmp_path, if_changed=True)
    assert len(calls) == 1
    assert results.read_json(final / "env.json") == {"inputs": results.jsonable(expected)}
    # results made on another CPU model (same slug, cpu-2c) are not this machine's: re-run
    from mfulab.measure import host

    monkeypatch.setattr(host, "cpu_model", lambda: "another CPU")
    with pytest.raises(FileNotFoundError):
        runner.run("mfu", profile="smoke", results_root=tmp_path, if_changed=True)
    assert len(calls) == 2


def test_native_profiler_noise_is_held_back(capfd):
    """USDT lines that torch's C++ profiler writes to fd 2 stay out of the executed notebooks;
    other native output passes."""
    with procs.native_stderr_filtered():
        os.write(2, b"USDT: profiler_start\nreal warning\n")
    err = capfd.readouterr().err
    assert "USDT" not in err and "real warning" in err


def test_a_study_is_stale_only_when_what_it_imports_changes():
    """A study's library stamp is its package, what it and its notebook import (the closure, read
    from the source: function-level imports too), devices.yaml and its own study.yaml: another
    study's package, or a core module it never imports, does not make it stale."""
    lib = ROOT / "lib" / "mfulab"
    mfu, overlap = set(paths.library_files("mfu")), set(paths.library_files("overlap"))
    timing = lib / "measure" / "timing.py"
    assert timing in mfu and lib / "analytic" / "devices.yaml" in mfu and timing in overlap
    assert lib / "studies" / "mfu" / "analysis.py" in mfu
    assert lib / "studies" / "overlap" / "analysis.py" not in mfu
    assert lib / "studies" / "overlap" / "study.yaml" not in mfu  # a new study makes no other stale
    # the step model: only the studies that import it (mfu does, for B1's local-MFU row)
    assert lib / "analytic" / "step.py" not in set(paths.library_files("dataloader"))
    step_model = {
        lib / "analytic" / "step.py",
        lib / "analytic" / "step_terms.py",
        lib / "analytic" / "layouts.py",
    }
    assert step_model <= set(paths.library_files("parallelism"))
    assert lib / "studies" / "mfu" / "study.yaml" in set(paths.library_files("compare"))  # it reads them all
    assert set(paths.library_files()) >= mfu | overlap
    assert paths.library_sha256("mfu") != paths.library_sha256("overlap")


def test_a_time_budget_is_not_an_input_of_the_stamp(tmp_path):
    """Changing a study's ``budget_s`` re-runs nothing (a budget says how long a run may take);
    any other key of its declaration is an input."""
    declared = (ROOT / "lib" / "mfulab" / "studies" / "mfu" / "study.yaml").read_text()
    path = tmp_path / "study.yaml"
    path.write_text(declared)
    before = paths._stamped_bytes(path)
    path.write_text(declared.replace("budget_s: {cpu: ", "budget_s: {gpu: 300, cpu: 1"))
    assert paths._stamped_bytes(path) == before
    path.write_text(declared.replace("number: 1", "number: 12"))
    assert paths._stamped_bytes(path) != before


def test_auto_profile_on_one_gpu_takes_cpu_where_the_gpu_profile_needs_two_or_is_absent(
    monkeypatch, caplog, tmp_path
):
    """make all on a one-GPU machine stopped at parallelism: its gpu profile asks for 2 NCCL
    ranks and was refused, so predict and compare never ran."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    with caplog.at_level("WARNING", logger="mfulab"):
        assert runner.resolve_profile("parallelism", "auto") == "cpu"
    assert "needs 2 GPUs" in caplog.text
    assert runner.resolve_profile("mfu", "auto") == "gpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert runner.resolve_profile("parallelism", "auto") == "gpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    from mfulab.studykit.registry import REGISTRY

    # a study without a gpu profile (a new one may have cpu and smoke only) runs its cpu profile
    bare = tmp_path / "studies" / "mfu"
    bare.mkdir(parents=True)
    for name in ("cpu.yaml", "smoke.yaml"):
        shutil.copy(ROOT / "studies" / "mfu" / name, bare / name)
    assert runner.resolve_profile("mfu", "auto", tmp_path) == "cpu"
    gpu = paths.read_profile(ROOT / "studies" / "parallelism" / "gpu.yaml")
    with pytest.raises(ParameterError, match="2 GPUs"):  # asked for by name: refused, as before
        REGISTRY["parallelism"].params.from_dict(gpu).prepared()


def _stamps(root: Path) -> dict[str, str]:
    """Every study's library stamp, computed by a fresh interpreter on the copy in ``root``."""
    code = "import json; from mfulab import paths; from mfulab.studykit.registry import REGISTRY; "
    code += "print(json.dumps({s: paths.library_sha256(s) for s in REGISTRY}))"
    env = {**os.environ, "PYTHONPATH": str(root / "lib"), "MFULAB_ROOT": str(root)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_one_line_change_to_the_step_model_restamps_only_its_importers(tmp_path):
    """The example of docs/architecture.md: a one-line change to ``analytic/step.py`` makes
    stale exactly the studies whose code or notebook imports it (directly or through another
    module); a change to the runner makes none stale; a new study makes no other study stale."""
    shutil.copytree(
        ROOT / "lib" / "mfulab", tmp_path / "lib" / "mfulab", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "studies", tmp_path / "studies")
    before = _stamps(tmp_path)
    step = tmp_path / "lib" / "mfulab" / "analytic" / "step.py"
    step.write_text(step.read_text() + "\n# one line\n")
    after = _stamps(tmp_path)
    changed = {s for s in before if before[s] != after[s]}
    # fusion imports it for A8's step time (attention_memory.step_table), mfu for B1's local 80%
    # at the case study's layout (article_arithmetic.b1_local_mfu_readings)
    assert changed == {"mfu", "overlap", "fusion", "recompute", "buckets", "parallelism", "predict"}
    for runner_file in ("runner.py", "stability.py", "cli.py"):  # the runner re-runs no study
        path = tmp_path / "lib" / "mfulab" / "run" / runner_file
        path.write_text(path.read_text() + "\n# one line\n")
    assert _stamps(tmp_path) == after
    studies = tmp_path / "lib" / "mfulab" / "studies"
    shutil.copytree(studies / "mfu", studies / "newstudy", ignore=shutil.ignore_patterns("__pycache__"))
    declaration = (studies / "newstudy" / "study.yaml").read_text()
    (studies / "newstudy" / "study.yaml").write_text(
        declaration.replace("id: mfu\n", "id: newstudy\n").replace("number: 1\n", "number: 99\n")
    )
    with_new = _stamps(tmp_path)
    assert "newstudy" in with_new
    # the comparison reads every study's declaration: only it takes the new study in
    assert {s: with_new[s] for s in after if s != "compare"} == {s: after[s] for s in after if s != "compare"}


def test_time_split_adds_up_and_the_summary_names_what_went_over():
    """``make all``'s summary: each study's set-up, measurement, analysis and rendering add up to
    its total; a study over its declared budget is a line, not a failure; an up-to-date study
    shows its recorded times in brackets and does not count towards this run."""
    split = course.time_split(
        started=100.0,
        notebook_ended=190.0,
        phases={"measure_started": 110.0, "measure_ended": 170.0, "from_dir": False},
        finished=192.0,
    )
    assert split == {
        "setup": 10.0,
        "measurement": 60.0,
        "analysis": 20.0,
        "rendering": 2.0,
        "total": 92.0,
        "measured_elsewhere": False,
    }
    assert course.time_split(started=0.0, notebook_ended=5.0, phases=None, finished=6.0)["setup"] == 5.0
    rows = [
        {"study": "mfu", "ran": True, "profile": "cpu", "time_split_s": split, "budget_s": 60},
        {"study": "fusion", "ran": False, "profile": "cpu", "time_split_s": split, "budget_s": 50},
        {"study": "predict", "ran": True, "profile": "cpu", "time_split_s": split, "budget_s": 100},
    ]
    table = course.course_time_table(rows)
    assert "this run: 184 s (3.1 min) for 2 studies" in table
    assert "over budget: mfu: 92 s, budget 60 s (cpu)" in table and "fusion: 92" not in table
    assert "(92)" in table and "up to date" in table


def test_the_calibration_is_a_row_of_the_summary(tmp_path, monkeypatch):
    """``make all`` measures the cpu course's calibration before its studies, timed, and the
    summary shows it as a row with its declared budget; a second call finds every part up to
    date and the row says so (its time not counted in this run)."""
    from mfulab.measure import calibration

    calls = []

    def fake_get(setting, *, device, parts, refresh=False, root=None, **_):
        calls.append((setting, tuple(parts), root))
        measured = list(parts) if len(calls) == 1 else []
        return {**{p: {} for p in parts}, "_meta": {"measured_now": measured}}

    monkeypatch.setattr(calibration, "get", fake_get)
    monkeypatch.setenv("MFULAB_RESULTS_ROOT", str(tmp_path))
    first = course.calibrate_course("cpu", results_root=tmp_path)
    assert calls[0] == ("cpu", course.COURSE_CALIBRATION["cpu"]["parts"], tmp_path)
    assert first["study"] == "calibration" and first["ran"] and first["budget_s"] > 0
    again = course.calibrate_course("cpu", results_root=tmp_path)
    assert not again["ran"]
    assert course.calibrate_course("gpu", results_root=tmp_path) is None  # the studies measure it
    split = {"setup": 1.0, "measurement": 10.0, "analysis": 2.0, "rendering": 1.0, "total": 14.0}
    study = {"study": "mfu", "ran": True, "profile": "cpu", "time_split_s": split, "budget_s": 40}
    table = course.course_time_table([{**first, "time_split_s": split}, study])
    assert table.splitlines()[2].startswith("calibration")
    assert "for 1 studies and the calibration" in table and "this run: 28 s" in table
    table = course.course_time_table([{**again, "time_split_s": split}, study])
    assert "this run: 14 s" in table and "and the calibration" not in table


def test_every_chapter_declares_a_cpu_budget_within_ten_minutes_together():
    from mfulab.studykit.registry import REGISTRY

    budgets = {s.id: s.budget_s.get("default" if s.reads_results else "cpu") for s in REGISTRY.values()}
    budgets["calibration"] = course.COURSE_CALIBRATION["cpu"]["budget_s"]
    assert all(budgets.values()), budgets
    assert sum(budgets.values()) <= 600, budgets


def test_a_study_that_reads_another_studys_data_has_it_among_its_inputs():
    """Fusion's B5 row reads predict's published runs: a change to that file re-runs fusion."""
    from mfulab.studies.fusion.stated import B5_PUBLISHED_FILE
    from mfulab.studykit.registry import REGISTRY

    fusion = REGISTRY["fusion"]
    declared = {(ROOT / "studies" / "fusion" / f).resolve() for f in fusion.data_files}
    assert (ROOT / B5_PUBLISHED_FILE).resolve() in declared
    assert "data_sha256" in runner.inputs(fusion, {}, profile="cpu", root=ROOT, results_root=ROOT / "results")
