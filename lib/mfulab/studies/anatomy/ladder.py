"""The B15 ladder's configurations: each rung turns on one knob over the rung before it
(``LADDER``, the first rung the naive configuration), and for each knob the last rung with that
knob alone turned off (``leave_one_out``). A knob's gain up the ladder depends on the knobs
already on (a faster loader matters less once the step waits on something else); its
leave-one-out gain, the last rung against the last rung without it, is the attribution that does
not depend on the ladder's order."""

from __future__ import annotations

# each rung: the rung before it with one knob turned on (the first is the naive configuration)
LADDER = (
    ("naive", {}),
    ("format + workers", {"format": "good", "workers": True}),
    ("buckets", {"buckets": True}),
    ("overlap", {"overlap": True}),
    ("fused attention", {"attention": "fused"}),  # config.ATTENTION_KERNELS
    ("background checkpoint", {"background": True}),
)
LEAVE_ONE_OUT_PREFIX = "all but "


def rungs() -> list[tuple[str, dict]]:
    """Each rung's cumulative knob settings."""
    out, knobs = [], {}
    for name, change in LADDER:
        knobs = {**knobs, **change}
        out.append((name, dict(knobs)))
    return out


def leave_one_out() -> list[tuple[str, dict]]:
    """For each knob of the ladder, the last rung's settings without it (its keys left at the
    naive default): ``("all but <rung>", knobs)``."""
    everything = rungs()[-1][1]
    return [
        (LEAVE_ONE_OUT_PREFIX + name, {k: v for k, v in everything.items() if k not in change})
        for name, change in LADDER[1:]
    ]
