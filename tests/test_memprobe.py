"""The fresh process a CPU peak is measured in (memprobe.run_in_fresh_process): forked from a
server that imported torch, one process per call, the caller's environment, failures and
timeouts reported rather than hung on."""

import os

import pytest

from mfulab.measure import memprobe


@pytest.fixture
def fresh(tests_on_path):
    yield memprobe.run_in_fresh_process
    memprobe._stop_server()


def test_each_call_is_a_new_process_that_sees_the_callers_environment(fresh, monkeypatch):
    monkeypatch.setenv("MFULAB_FRESH_PROBE", "first")
    one = fresh("workers:fresh_env", {"name": "MFULAB_FRESH_PROBE"})
    monkeypatch.setenv("MFULAB_FRESH_PROBE", "second")
    two = fresh("workers:fresh_env", {"name": "MFULAB_FRESH_PROBE"})
    assert (one["value"], two["value"]) == ("first", "second")
    assert len({one["pid"], two["pid"], os.getpid()}) == 3


def test_the_peak_of_a_step_is_its_own_and_not_an_earlier_points(fresh):
    """A 256 MiB step then a 16 MiB one: the second process does not inherit the first's peak."""
    big = fresh("workers:fresh_peak", {"bytes": 256 * 2**20})
    small = fresh("workers:fresh_peak", {"bytes": 16 * 2**20})
    assert 240 * 2**20 < big["step_added_bytes"] < 400 * 2**20
    assert 8 * 2**20 < small["step_added_bytes"] < 64 * 2**20


def test_a_failure_comes_back_with_its_traceback_and_the_server_serves_on(fresh):
    with pytest.raises(RuntimeError, match="fails on purpose"):
        fresh("workers:fresh_fail", {})
    with pytest.raises(RuntimeError, match="without a result"):
        fresh("workers:fresh_exit", {})
    with pytest.raises(RuntimeError, match="No module named"):
        fresh("no_such_module_here:f", {})
    assert fresh("workers:fresh_env", {"name": "HOME"})["value"] == os.environ.get("HOME")


def test_a_call_past_its_timeout_is_stopped_and_a_new_server_serves_the_next(fresh):
    with pytest.raises(RuntimeError, match="timeout_s"):
        fresh("workers:fresh_sleep", {"seconds": 60}, timeout_s=2)
    assert "proc" not in memprobe._SERVER  # the server and its child were killed
    assert fresh("workers:fresh_sleep", {"seconds": 0}) == {}
