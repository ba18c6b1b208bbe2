"""Checkpoint writes for training-loop studies: synchronous (the step waits for the disk) and
in the background (the step waits only for a copy of the state to host memory; a thread
writes and ``fsync``-s it while training goes on).

The background writer holds one write in flight: a new checkpoint first waits for the
previous one, so a slow disk shows up as a wait in the step instead of a growing queue."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_checkpoint(model, opt, path: Path) -> int:
    """A synchronous, resumable checkpoint: model and optimizer state, ``torch.save`` and
    ``fsync`` before returning (the step waits for the disk). Returns the bytes written."""
    import torch

    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return path.stat().st_size


def _to_host(obj):
    """A deep copy of a state dict with every tensor cloned to CPU memory (the snapshot)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


class BackgroundCheckpointer:
    """``save(model, opt, path)`` snapshots the state to host memory in the calling thread, then
    writes it (``torch.save`` + ``fsync``) in a background thread; ``wait()`` joins the write in
    flight and re-raises its error. Use as a context manager so the last write is joined."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.bytes_written = 0

    def _write(self, state, path: Path) -> None:
        import torch

        try:
            torch.save(state, path)
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            self.bytes_written = path.stat().st_size
        except BaseException as err:  # surfaced by wait()
            self._error = err

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def save(self, model, opt, path: Path) -> None:
        self.wait()
        state = {"model": _to_host(model.state_dict()), "optimizer": _to_host(opt.state_dict())}
        self._thread = threading.Thread(target=self._write, args=(state, Path(path)), daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.wait()
