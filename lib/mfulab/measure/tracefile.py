"""The profiler's trace as a file: gzipped Chrome-trace JSON (opens in ui.perfetto.dev and
chrome://tracing), written atomically and trimmed to a size cap (``write_trace``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TIME_EPS_US = 0.5  # trace timestamps are rounded: a child may end this far past its parent


def complete_events(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def nest(events: list[dict]) -> list[dict]:
    """Parent links and depth for complete events of one thread (they nest); returns them sorted."""
    events = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    stack: list[dict] = []
    for e in events:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-9:
            stack.pop()
        while stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + TIME_EPS_US:
            stack.pop()  # not nested after all: treat as a sibling of the enclosing op
        e["_parent"] = stack[-1] if stack else None
        e["_depth"] = len(stack)
        e["_children_us"] = 0.0
        if stack:
            stack[-1]["_children_us"] += e["dur"]
        stack.append(e)
    return events


def _gz(trace: dict) -> bytes:
    return gzip.compress(json.dumps(trace, separators=(",", ":")).encode(), compresslevel=6, mtime=0)


def write_trace(trace: dict, path, *, max_bytes: int) -> dict:
    """Write ``trace`` gzipped to ``path`` (``.json.gz``, opens in ui.perfetto.dev and
    chrome://tracing) atomically, at most ``max_bytes``: past the cap, the deepest CPU ops are
    dropped first (kernels, steps and top-level ops stay), then the later steps; the trace and
    the returned record say what was dropped."""
    import os

    path = Path(path)
    events = trace.get("traceEvents", [])
    data = _gz(trace)
    note = {"trimmed": False, "events_total": len(events), "events_kept": len(events), "dropped": ""}
    if len(data) > max_bytes:
        by_tid: dict = {}
        for e in complete_events(trace):
            by_tid.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        depth = {}
        for evs in by_tid.values():
            for e in nest([dict(x, _id=id(x)) for x in evs]):
                depth[e["_id"]] = e["_depth"]
        max_depth = max(depth.values(), default=0)
        # one serialisation sizes every depth limit (the gzip ratio of the whole trace applied
        # to the kept events' JSON): gzip only at the limit the estimate picks, and below it
        # only if the estimate was short (D10: one gzip per level was quadratic in practice)
        raw = [len(json.dumps(e, separators=(",", ":"))) for e in events]
        ratio = len(data) / max(1, sum(raw))
        raw_by_depth: dict = {}
        for e, n_bytes in zip(events, raw):
            d = depth.get(id(e), 0)
            raw_by_depth[d] = raw_by_depth.get(d, 0) + n_bytes
        kept = events
        for limit in range(max_depth, -1, -1):
            estimate = ratio * sum(n for d, n in raw_by_depth.items() if d <= limit)
            if estimate > max_bytes and limit > 0:
                continue
            kept = [e for e in events if depth.get(id(e), 0) <= limit]
            note.update(dropped=f"CPU ops nested deeper than {limit} levels", events_kept=len(kept))
            data = _gz({**trace, "traceEvents": kept})
            if len(data) <= max_bytes:
                deeper = [e for e in events if depth.get(id(e), 0) <= limit + 1]
                if limit < max_depth and len(data) < max_bytes / 2:  # the estimate was cautious
                    more = _gz({**trace, "traceEvents": deeper})
                    if len(more) <= max_bytes:
                        kept, data = deeper, more
                        note.update(
                            dropped=f"CPU ops nested deeper than {limit + 1} levels", events_kept=len(kept)
                        )
                break
        while len(data) > max_bytes and len(kept) > 1:
            kept = kept[: len(kept) // 2]
            note.update(dropped=note["dropped"] + "; the later part of the run", events_kept=len(kept))
            data = _gz({**trace, "traceEvents": kept})
        note["trimmed"] = True
        data = _gz({**trace, "traceEvents": kept, "mfulabTrimmed": note})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return {**note, "file": str(path), "bytes": len(data), "max_bytes": max_bytes}
