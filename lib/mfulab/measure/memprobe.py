"""Memory probes: what a step keeps and how high memory peaks, measured exactly.

- :class:`SavedTensorAccountant` records every tensor autograd saves for backward during a
  forward pass (``torch.autograd.graph.saved_tensors_hooks``), with the module and the op
  that saved it, deduplicated by storage: the exact "activation memory" of a step.
- Peak memory on CPU is a fresh process's peak RSS (the peak of a process never goes down,
  so each point needs a process of its own): :func:`run_in_fresh_process` calls a worker in
  a new process with :data:`PEAK_MALLOC_ENV`, and the worker wraps its step in
  :func:`peak_rss_of`. On CUDA, :func:`cuda_peak_of` reads the caching allocator's peak.
  The new process is forked from a server that has imported torch (and the worker's module)
  and run nothing: no tensor, thread pool or heap of an earlier point is in it, and each
  point no longer pays the 2-4 s of importing torch.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback

# A small fixed mmap threshold makes glibc return freed large blocks at once, so RSS follows
# live tensors (the default threshold adapts upwards and keeps freed memory in the heap).
PEAK_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> str:
    """Reset this process's peak RSS (VmHWM), so that imports and set-up do not mask what
    follows: Linux resets it when "5" is written to /proc/self/clear_refs. Returns the method
    ``peak_rss_bytes`` must use."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "VmHWM after clear_refs"
    except OSError:
        return "ru_maxrss (peak RSS could not be reset)"


def peak_rss_bytes(method: str) -> int:
    if method == "VmHWM after clear_refs":
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("VmHWM missing from /proc/self/status")
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux; includes earlier peaks


# One server process per study run imports torch once and forks a child per point, so that a
# point costs its own work, not the 2-4 s of importing torch (module docstring).
_SERVER: dict = {}


def _fork_server() -> None:
    """The server: import torch, then for each request line (JSON: target, spec, environment,
    output path) import the target's module here (once), fork, and let the child call it and
    write ``{"result": ...}`` or ``{"error": traceback}`` to the output path; reply one line
    with the child's exit status. The child's stdout goes to stderr (stdout is the protocol)."""
    import torch  # noqa: F401 - the import every child shares

    for line in sys.stdin:
        request = json.loads(line)
        module_name, function = request["target"].split(":")
        try:
            module = importlib.import_module(module_name)
        except BaseException:  # noqa: BLE001 - reported to the caller through the output file
            module, failure = None, traceback.format_exc()
        pid = os.fork()
        if pid == 0:  # the child: the caller's environment (malloc settings aside), then the call
            os.dup2(2, 1)
            os.environ.update({k: v for k, v in request["environment"].items() if k not in PEAK_MALLOC_ENV})
            try:
                out = (
                    {"result": getattr(module, function)(request["spec"])}
                    if module is not None
                    else {"error": failure}
                )
            except BaseException:  # noqa: BLE001
                out = {"error": traceback.format_exc()}
            with open(request["out"], "w") as f:
                json.dump(out, f)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"status": status}) + "\n")
        sys.stdout.flush()


def _stop_server() -> None:
    server = _SERVER.pop("proc", None)
    if server is not None and server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGKILL)  # the server and a child still running
        except ProcessLookupError:
            pass
        server.wait()


def _server() -> subprocess.Popen:
    """The fork server of this process, started on first use with :data:`PEAK_MALLOC_ENV`
    (glibc reads it when a process starts; forked children keep the setting)."""
    server, path = _SERVER.get("proc"), os.environ.get("PYTHONPATH", "")
    if server is not None and server.poll() is None and _SERVER.get("pythonpath") != path:
        _stop_server()  # where modules are found changed: a server that imports from there
        server = None
    if server is None or server.poll() is not None:
        _SERVER["pythonpath"] = path
        server = subprocess.Popen(
            [sys.executable, "-c", "from mfulab.measure.memprobe import _fork_server; _fork_server()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **PEAK_MALLOC_ENV},
            start_new_session=True,  # Ctrl-C reaches the caller, which stops the whole group
        )
        _SERVER["proc"] = server
        atexit.register(_stop_server)
    return server


def run_in_fresh_process(target: str, spec: dict, *, timeout_s: float = 300) -> dict:
    """Call ``module:function(spec)`` in a new process with :data:`PEAK_MALLOC_ENV` (forked
    from a server that has imported torch and nothing else: module docstring) and return the
    dict it returns. Peak memory is measured this way on CPU: the peak of a process never goes
    down, so each point needs a process of its own."""
    server = _server()
    with tempfile.TemporaryDirectory(prefix="mfulab-fresh-") as tmp:
        out = os.path.join(tmp, "out.json")
        request = {"target": target, "spec": spec, "environment": dict(os.environ), "out": out}
        try:
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            ready, _, _ = select.select([server.stdout], [], [], timeout_s)
            if not ready:
                raise RuntimeError(f"{target} ran past timeout_s={timeout_s} in its own process")
            reply = server.stdout.readline()
        except BaseException:  # a timeout, Ctrl-C, a dead server: stop it (a new one serves next)
            _stop_server()
            raise
        if not reply:
            _stop_server()
            raise RuntimeError(f"{target}: the fork server exited (code {server.poll()}) without a result")
        if not os.path.exists(out):
            raise RuntimeError(f"{target} died in its own process ({json.loads(reply)}) without a result")
        with open(out) as f:
            answer = json.load(f)
    if "error" in answer:
        raise RuntimeError(f"{target} failed in its own process:\n{answer['error'][-2000:]}")
    return answer["result"]


def peak_rss_of(step) -> dict:
    """Call ``step()`` (in a fresh process, after any warm-up) and return the RSS just before
    it, the peak during it, and their difference: what the step added."""
    gc.collect()
    method = reset_peak_rss()
    before = current_rss_bytes()
    step()
    peak = peak_rss_bytes(method)
    return {
        "before_bytes": before,
        "peak_bytes": peak,
        "step_added_bytes": peak - before,
        "method": f"fresh process, {method}",
    }


def cuda_peak_of(step) -> dict:
    """Call ``step()`` on CUDA and return the allocator's memory before it, its peak during it
    and their difference. Free the previous step's tensors (gradients too) before calling.
    A step that runs out of memory is a point that does not fit (``does_not_fit``, peaks
    ``None``), recorded as such, not a crash of the study."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    try:
        step()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as e:
        reason = str(e).splitlines()[0][:200]
        gc.collect()
        torch.cuda.empty_cache()
        return {
            "before_bytes": before,
            "peak_bytes": None,
            "step_added_bytes": None,
            "does_not_fit": True,
            "error": reason,
            "method": "torch.cuda.max_memory_allocated",
        }
    peak = torch.cuda.max_memory_allocated()
    return {
        "before_bytes": before,
        "peak_bytes": peak,
        "step_added_bytes": peak - before,
        "method": "torch.cuda.max_memory_allocated",
    }


# ---------------------------------------------------------------------------- saved tensors
# ops whose backward uses their own output: a tensor saved right after one of these ran is
# its output; any other saved tensor is an input of the op that dispatches next
OUTPUT_SAVING_OPS = {
    "_softmax",
    "_log_softmax",
    "native_layer_norm",
    "tanh",
    "sigmoid",
    "exp",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
}


class SavedTensorAccountant:
    """Records every tensor autograd saves for backward during a forward pass."""

    def __init__(self, model):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        self.model = model
        self.records = []
        self._stack = ["(top)"]
        # Autograd packs an op's saved *inputs* before the op dispatches and its saved
        # *outputs* after: inputs wait for the next op's name, outputs take the last one's.
        self._last_op = "?"
        self._last_outputs: set = set()
        self._pending: list = []
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._torch = torch
        accountant = self

        class _OpNamer(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                for record in accountant._pending:
                    record["op"] = name
                accountant._pending = []
                out = func(*args, **(kwargs or {}))
                accountant._last_op = name
                outs = out if isinstance(out, (tuple, list)) else (out,)
                accountant._last_outputs = {
                    o.untyped_storage().data_ptr() for o in outs if isinstance(o, accountant._torch.Tensor)
                }
                return out

        self._mode = _OpNamer()

    def _record(self, tensor, op):
        if not isinstance(tensor, self._torch.Tensor):
            return None
        storage = tensor.untyped_storage()
        record = {
            "module": self._stack[-1],
            "op": op,
            "shape": tuple(tensor.shape),
            "dtype": str(tensor.dtype).replace("torch.", ""),
            "storage": storage.data_ptr(),
            "bytes": storage.nbytes(),
            "parameter": storage.data_ptr() in self._param_ptrs,
        }
        self.records.append(record)
        return record

    def __enter__(self):
        from mfulab.measure import gpt as model_mod

        def enter(name):
            def hook(module, args):
                self._stack.append(name or "(top)")

            return hook

        def leave(module, args, output):
            self._stack.pop()

        self._handles = []
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(enter(name)))
            self._handles.append(module.register_forward_hook(leave))
        self._observer = lambda args: [self._record(t, "checkpoint input") for t in args]
        model_mod.CHECKPOINT_OBSERVERS.append(self._observer)
        self._hooks = self._torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        self._mode.__enter__()
        return self

    def _pack(self, tensor):
        is_output = (
            tensor.untyped_storage().data_ptr() in self._last_outputs and self._last_op in OUTPUT_SAVING_OPS
        )
        record = self._record(tensor, self._last_op if is_output else "?")
        if record is not None and not is_output:
            self._pending.append(record)
        return tensor

    def __exit__(self, *exc):
        from mfulab.measure import gpt as model_mod

        self._mode.__exit__(*exc)
        self._hooks.__exit__(*exc)
        model_mod.CHECKPOINT_OBSERVERS.remove(self._observer)
        for h in self._handles:
            h.remove()
        return False

    def unique(self) -> list[dict]:
        """One record per storage (the first that saved it), parameters excluded."""
        seen, out = set(), []
        for r in self.records:
            if r["parameter"] or r["storage"] in seen:
                continue
            seen.add(r["storage"])
            layer = r["module"].split(".")
            out.append({**r, "layer": int(layer[1]) if layer[0] == "blocks" and len(layer) > 1 else None})
        return out
