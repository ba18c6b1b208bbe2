"""Stopping a study cleanly: every process it started goes when it is interrupted.

A study run is a tree of processes — the runner, its Jupyter kernel, torchrun and its
ranks, fresh-process memory probes — and some of them start sessions of their own, so
neither Ctrl-C (which reaches only the terminal's foreground group) nor killing one
process group is enough. :func:`stop_on_signals` makes the runner a *child subreaper*
(orphaned descendants are re-parented to it instead of to init, so the tree cannot escape)
and, on SIGINT or SIGTERM, terminates every descendant, runs the caller's clean-up and
exits with 128 + the signal number (130 for Ctrl-C) within a few seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to this process (False elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid) -> tuple[int, str] | None:
    """(parent pid, state) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), fields[0]


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, state) of every process."""
    table = {int(e): _stat(e) for e in os.listdir("/proc") if e.isdigit()}
    return {pid: st for pid, st in table.items() if st is not None}


def descendants(pid: int | None = None) -> list[int]:
    """Live (non-zombie) descendants of ``pid`` (default: this process)."""
    root = os.getpid() if pid is None else pid
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop()
        if table.get(p, (0, "Z"))[1] != "Z":
            found.append(p)
        todo.extend(children.get(p, []))
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    st = _stat(pid)
    return st is not None and st[1] != "Z"


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def kill_descendants(grace_s: float = 2.0) -> int:
    """SIGTERM every descendant, SIGKILL what is left after ``grace_s``; repeat for
    processes re-parented to us meanwhile. Returns how many were signalled."""
    signalled: set[int] = set()
    for _round in range(3):
        pids = descendants()
        if not pids:
            break
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            signalled.update(pids)
            deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 1.0)
            while time.monotonic() < deadline:
                _reap()
                pids = [p for p in pids if alive(p)]
                if not pids:
                    break
                time.sleep(0.05)
            if not pids:
                break
    _reap()
    return len(signalled)


@contextlib.contextmanager
def native_stderr_filtered(drop=("USDT",)):
    """Hold back lines that native code (torch's C++ profiler: "USDT: ... profiler_start")
    writes to file descriptor 2 while the block runs; every other line is passed on."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines():
                if not line.startswith(tuple(drop)):
                    print(line, file=sys.stderr)


@contextlib.contextmanager
def stop_on_signals(cleanup=None, *, what: str = "the run"):
    """Within this block, SIGINT/SIGTERM stop every descendant, call ``cleanup()`` and exit
    128 + signum (module docstring). Handlers are restored afterwards."""
    become_subreaper()

    def handler(signum, _frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        n = kill_descendants()
        if cleanup is not None:
            with contextlib.suppress(Exception):
                cleanup()
        print(
            f"\ninterrupted ({signal.Signals(signum).name}): stopped {what} and {n} process(es) it had "
            "started; earlier results were left untouched",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
