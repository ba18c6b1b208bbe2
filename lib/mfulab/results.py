"""Results folders: atomic writes, metrics/measurements/tables, traces, stability reports, loading.

Layout of one study's results (docs/architecture.md)::

    results/<machine>/<study>/
        NN_<study>.ipynb      the executed notebook
        measurements.json     raw records from the study's ``measure(params)``
        metrics.json          headline numbers (units in the key names) and the claims table
        env.json              provenance (run/provenance.py): machine, git commit, parameters, times
        tables/*.csv          every table the notebook shows
        figures/*.png         every figure the notebook shows
        traces/*.json.gz      profiler traces (Chrome/Perfetto JSON, gzipped, size-capped)

``python -m mfulab measure`` writes ``measurements.json`` + ``env.json`` to any folder; a
notebook given that folder as ``from_dir`` analyses it instead of measuring, which is how a
cluster run is rendered on a machine with the notebook stack.

Every file is written to a temporary name and renamed into place, and a whole study is
rendered into a temporary sibling folder that replaces the old one only on success.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

MEASUREMENTS = "measurements.json"
METRICS = "metrics.json"
ENV = "env.json"
PHASES = "phases.json"  # the notebook's measurement times; the runner folds them into env.json


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def jsonable(obj):
    """Convert numpy scalars/arrays, paths and non-finite floats for JSON."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path, obj) -> Path:
    """Write ``obj`` as JSON atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(jsonable(obj), f, indent=2, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_json(path) -> dict:
    with open(path) as f:
        return json.load(f)


def save_table(out_dir, name: str, df) -> None:
    """Write ``tables/<name>.csv`` atomically. Returns nothing, so a notebook cell that ends
    with it prints no path."""
    path = Path(out_dir) / "tables" / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


def save_metrics(out_dir, metrics: dict) -> Path:
    """Merge ``metrics`` into ``metrics.json`` (a notebook adds its numbers section by section)."""
    path = Path(out_dir) / METRICS
    current = read_json(path) if path.exists() else {}
    current.update(jsonable(metrics))
    return write_json(path, current)


def save_trace(out_dir, trace: dict | None, *, from_dir: str = "") -> str | None:
    """Copy a trace file written by the measurement (``trace["file"]``, see ``opprofile``) into
    ``traces/`` atomically; a render of measurements taken elsewhere (``from_dir``) finds it in
    ``from_dir/traces/``. Returns the path relative to ``out_dir``, or None when there is none."""
    if not trace:
        return None
    name = Path(trace["file"]).name
    candidates = [Path(trace["file"])] + ([Path(from_dir) / "traces" / name] if from_dir else [])
    src = next((c for c in candidates if c.exists()), None)
    if src is None:
        return None
    path = Path(out_dir) / "traces" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)
    return str(path.relative_to(out_dir))


def save_measurements(out_dir, records: dict) -> Path:
    return write_json(Path(out_dir) / MEASUREMENTS, records)


def load_measurements(from_dir) -> dict:
    path = Path(from_dir) / MEASUREMENTS
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: from_dir must be a folder written by "
            "'python -m mfulab measure' or an earlier results folder"
        )
    return read_json(path)


def sha256_files(paths, *, read=None) -> str:
    """One digest of several files (names and contents, in sorted order): what results or a
    calibration were made from. ``read(path) -> bytes``: what of a file counts (default: all)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(path.name.encode())
        digest.update(read(path) if read else path.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_dir(final_dir):
    """Yield a fresh temporary sibling of ``final_dir``; on success it replaces ``final_dir``,
    on any failure (exception, Ctrl-C) it is removed and ``final_dir`` is left untouched."""
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final_dir.parent, prefix=f".tmp-{final_dir.name}-"))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        yield tmp
    except BaseException:
        discard_dir(tmp)
        raise
    old = None
    if final_dir.exists():
        old = final_dir.with_name(f".old-{final_dir.name}-{os.getpid()}")
        os.replace(final_dir, old)
    os.replace(tmp, final_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load_all(results_root, study: str) -> dict:
    """``{machine: metrics}`` for every ``results/<machine>/<study>/metrics.json``."""
    found = {}
    for path in sorted(Path(results_root).glob(f"*/{study}/{METRICS}")):
        found[path.parent.parent.name] = read_json(path)
    return found


def output_dir(out_dir: str, study: str) -> Path:
    """Where a notebook writes: the runner's ``out_dir``, or ``scratch/<study>`` when the
    notebook is opened by hand (``make clean`` removes scratch/)."""
    path = Path(out_dir) if out_dir else Path("scratch") / study
    path.mkdir(parents=True, exist_ok=True)
    return path


def discard_dir(path) -> None:
    """Remove a temporary results folder (read-only files included)."""
    shutil.rmtree(path, ignore_errors=True)


def run_identity(records: dict, *param_names: str) -> dict:
    """The fields every ``metrics.json`` starts with: the device that ran and the parameters
    that identify the run (``param_names``)."""
    return {
        "device": records["device"],
        "device_name": records["device_name"],
        **{name: records["params"][name] for name in param_names},
    }


STABILITY = "stability.json"


def load_stability(out_dir) -> dict | None:
    """A results folder's ``stability.json`` (``make stability``), or None where it has none."""
    path = Path(out_dir) / STABILITY
    return read_json(path) if path.exists() else None
