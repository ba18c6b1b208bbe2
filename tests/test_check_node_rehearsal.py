"""``make check-node`` rehearsed on this machine's CPU: every multi-rank study runs through the
launcher (and through an in-process torchrun where it has an nproc field) on 2 gloo ranks, and
every node check holds on what they measured. Apart from tests/test_check.py so that the
parallel test run (``make test``: pytest-xdist, one file per worker) can put this minutes-long
rehearsal beside the rest of the check tests."""

from mfulab.run import check

from conftest import run_check


def test_check_node_rehearses_every_node_check_on_cpu(tmp_path):
    proc, parts = run_check("node", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node = [p for p in parts if p["name"] != "environment report"]
    _, collective = check._studies()
    paths = {True: ("launcher", "in-process torchrun"), False: ("launcher",)}  # parallelism: its own jobs
    assert [p["name"] for p in node] == [
        f"{s.id}, 2 ranks, {path}" for s in collective for path in paths["nproc" in s.params.names()]
    ]
    assert "parallelism" in [s.id for s in collective]
    assert all(p["status"] == "ran" and "gloo rehearsal" in p["detail"] for p in node), node
