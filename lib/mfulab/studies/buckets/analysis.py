"""Analysis of the ``buckets`` study: DDP's layouts against the formation rules, the real
sweep against the simulator calibrated on this machine, the simulator at cluster scale, and
the claims table (A6, B8, B6).

Every function reads the plain records of ``bench.measure`` (here or from another machine);
claim verdicts are computed from the numbers.
"""

from __future__ import annotations

import numpy as np

from ... import verdicts
from ...config import preset
from ...results import run_identity
from ...timing import compare_timings, summarize
from ...verdicts import Claim
from .simulator import DEFAULT_BUCKET_CAP_MB, form_buckets, gpt_simulation, simulate
from .stated import A6_DISASTER_RATIO, B8_STATED, STATED_INTERCONNECT


def stack_param_bytes(layers: int, hidden: int) -> list[int]:
    """fp32 gradient bytes of the stack's parameters in gradient-ready order (last layer's
    bias, its weight, ..., first layer's weight)."""
    out = []
    for _ in range(layers):
        out += [hidden * 4, hidden * hidden * 4]
    return out


def sweep_table(records):
    """Real sweep: step, no_sync and communication cost per mode, cap and variant, with the
    simulator's prediction for the same configuration (calibrated on this machine)."""
    import pandas as pd

    p = records["params"]
    d = records["ddp"]
    fit = d["allreduce_fit"]
    pb = stack_param_bytes(p["stack_layers"], p["stack_hidden"])
    rows = []
    for r in d["rows"]:
        backward_s = r["no_sync_s"]  # forward + backward without communication, measured
        ready = (np.cumsum(pb) / sum(pb) * backward_s).tolist()
        link = {"alpha_s": fit["alpha_s"], "link_bytes_per_s": fit["link_bytes_per_s"]}
        sim = simulate(
            pb, ready, backward_end_s=backward_s, bucket_cap_mb=r["bucket_cap_mb"], n=d["world_size"], **link
        )
        rows.append(
            {
                "compute": "emulated compute" if r["mode"] == "emulated" else "real compute",
                **{k: v for k, v in r.items() if not k.endswith("times_s")},
                "comm_cost_s": r["step_s"] - r["no_sync_s"],
                "simulated_step_s": sim["step_s"],
                "simulated_buckets": sim["buckets"],
                "residual": r["step_s"] / sim["step_s"] - 1,
            }
        )
    return pd.DataFrame(rows)


def layout_check(records) -> dict:
    """DDP's actual bucket sizes vs the simulator's formation rules for the same stack."""
    p = records["params"]
    pb = stack_param_bytes(p["stack_layers"], p["stack_hidden"])
    out = {}
    for key, actual in records["ddp"]["layouts"].items():
        cap = float(key.split(":")[1])
        predicted = [sum(pb[i] for i in b) for b in form_buckets(pb, bucket_cap_mb=cap)]
        out[key] = {"actual": actual, "predicted": predicted, "equal": actual == predicted}
    return out


def gpt_layout_table(records):
    """For the reference GPT: DDP's layout vs the formation rules applied to the order DDP
    recorded; whether that order is the reverse of registration; the first bucket's size."""
    import pandas as pd

    g = records["ddp"].get("gpt")
    if not g:
        return pd.DataFrame()
    rows = []
    for r in g["runs"]:
        order = [i for b in r["param_order"] for i in b]
        sizes = [r["param_bytes"][i] for i in order]
        default = r["bucket_cap_mb"] is None
        cap = DEFAULT_BUCKET_CAP_MB if default else r["bucket_cap_mb"]
        predicted = [
            sum(sizes[i] for i in b) for b in form_buckets(sizes, bucket_cap_mb=cap, default_cap=default)
        ]
        n_params = len(r["param_bytes"])
        rows.append(
            {
                "bucket_cap_mb": "default (25, first bucket 1 MiB)" if default else r["bucket_cap_mb"],
                "buckets": len(r["layout"]),
                "first_bucket_bytes": r["layout"][0] if r["layout"] else None,
                "matches_rules": predicted == r["layout"],
                "order_is_reverse_registration": order == list(range(n_params - 1, -1, -1)),
                "largest_tensor_bytes": max(r["param_bytes"]),
                "gradient_gate": r["gradient_gate"],
                "step_s": r["step_s"],
                "no_sync_s": r["no_sync_s"],
                "comm_cost_s": r["step_s"] - r["no_sync_s"],
            }
        )
    return pd.DataFrame(rows)


def scale_table(records):
    """The simulator on every ``scale_presets`` model, world size and cap (stated interconnect)."""
    import pandas as pd

    p = records["params"]
    rows = []
    setting = {k: p[f"scale_{k}"] for k in STATED_INTERCONNECT}  # same names as the stated interconnect
    for name in p["scale_presets"]:
        cfg = preset(name)
        for n in p["scale_world_sizes"]:
            rows += gpt_simulation(cfg, n=n, bucket_caps_mb=p["scale_bucket_caps_mb"], **setting)
    return pd.DataFrame(rows)


def best_caps(scale_df):
    """Per (model, ranks): the fastest cap, and the MFU spread between the best and worst cap."""
    best = scale_df.loc[scale_df.groupby(["preset", "world_size"]).step_s.idxmin()]
    spread = (
        scale_df.groupby(["preset", "world_size"]).mfu.agg(lambda s: s.max() - s.min()).rename("mfu_spread")
    )
    return best.set_index(["preset", "world_size"]).join(spread).reset_index()


def best_real_cap(records):
    """The cap with the fastest median step in the real sweep, real compute, default flags."""
    rows = [r for r in records["ddp"]["rows"] if r["mode"] == "real" and r["variant"] == "default"]
    return min(rows, key=lambda r: r["step_s"])["bucket_cap_mb"] if rows else None


def _variant_comparison(records, variant):
    """``variant`` vs the default flags at the swept cap nearest DDP's default (25 MiB)."""
    rows = {(r["variant"], r["bucket_cap_mb"]): r for r in records["ddp"]["rows"] if r["mode"] == "real"}
    caps = [c for (v, c) in rows if v == variant and ("default", c) in rows]
    if not caps:
        return None, None
    cap = min(caps, key=lambda c: abs(np.log(c / DEFAULT_BUCKET_CAP_MB)))
    return cap, compare_timings(
        summarize(rows[("default", cap)]["step_times_s"], label="default"),
        summarize(rows[(variant, cap)]["step_times_s"], label=variant),
    )


def _a6_claims(records, st, best) -> list[Claim]:
    real = st[(st.compute == "real compute") & (st.variant == "default")].set_index("bucket_cap_mb")
    if len(real) < 2:
        return []
    rows = {
        r["bucket_cap_mb"]: r
        for r in records["ddp"]["rows"]
        if r["mode"] == "real" and r["variant"] == "default"
    }
    smallest, best_cap = min(rows), min(rows, key=lambda c: rows[c]["step_s"])
    c = compare_timings(
        summarize(rows[smallest]["step_times_s"], label="smallest"),
        summarize(rows[best_cap]["step_times_s"], label="best"),
    )
    big = best[best.world_size == max(best.world_size)]
    return [
        Claim(
            "A6",
            "per-tensor all-reduce is a disaster",
            f"real sweep, real compute: {int(real.loc[smallest, 'buckets'])} buckets at {smallest:g} MiB "
            f"vs the best cap ({best_cap:g} MiB), {records['ddp']['world_size']} ranks",
            verdicts.verdict_from_interval(c.ratio_lo, c.ratio_hi, threshold=A6_DISASTER_RATIO),
            f"one bucket per tensor is {c.ratio:.2f}× slower [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] than "
            f"the best cap (a 'disaster' taken as ≥ {A6_DISASTER_RATIO:g}×); per-call latency grows "
            "with the number of ranks, so this box understates it",
        ),
        Claim(
            "A6",
            "20–40 MB buckets are the sweet spot; the bucket size moves MFU by 5–8 points at ~1000 cards",
            f"simulator at {max(best.world_size)} ranks with the stated interconnect, caps "
            f"{records['params']['scale_bucket_caps_mb']} MiB",
            "analytic only",
            "best cap and MFU spread between the best and worst cap: "
            + ", ".join(
                f"{r.preset} {r.bucket_cap_mb:g} MiB ({r.mfu_spread * 100:.1f} points)"
                for r in big.itertuples()
            )
            + "; Llama weight matrices hold tens to hundreds of MiB of bf16 gradient, so every cap below "
            "one matrix gives one bucket per tensor",
        ),
    ]


def _b8_claims(scale) -> list[Claim]:
    s7 = scale[scale.preset.str.contains("7b")]
    if not len(s7):
        return []
    n7 = B8_STATED["ranks"] if B8_STATED["ranks"] in set(s7.world_size) else int(s7.world_size.max())
    d = s7[s7.world_size == n7].set_index("bucket_cap_mb")
    base = B8_STATED["default_cap_mb"]
    caps = [c for c in (base, *B8_STATED["better_caps_mb"]) if c in d.index]
    if base not in caps or len(caps) < 2:
        return []
    gain = max(d.loc[c, "mfu"] for c in caps if c != base) - d.loc[base, "mfu"]
    return [
        Claim(
            "B8",
            "for a 7B model, bucket_cap_mb 25 → 50–100 MB helped: fewer calls, still early enough",
            f"simulator, 7B on {n7} ranks with the stated interconnect",
            "analytic only",
            "MFU at 25 / 50 / 100 MiB: "
            + " / ".join(f"{d.loc[c, 'mfu']:.1%}" for c in caps)
            + f"; best 50–100 MiB vs 25: {gain * 100:+.2f} points",
        )
    ]


def _b6_claims(records) -> list[Claim]:
    out = []
    for variant in ("bucket_view", "static_graph", "bucket_view+static_graph"):
        cap, c = _variant_comparison(records, variant)
        if c is not None:
            out.append(
                Claim(
                    "B6",
                    f"{variant.replace('bucket_view', 'gradient_as_bucket_view')} saves a copy / repeated "
                    "graph analysis",
                    f"real sweep at bucket_cap_mb={cap:g}: step time vs the default flags",
                    verdicts.verdict_from_comparison(c, claimed="faster"),
                    f"speed-up {c.ratio:.3f}× [{c.ratio_lo:.3f}, {c.ratio_hi:.3f}] ({c.verdict})",
                )
            )
    return out


def claims(records) -> list[Claim]:
    """A6 (real sweep and simulator at scale), B8 (simulator, 7B), B6 (flags, real sweep)."""
    scale = scale_table(records)
    return (
        _a6_claims(records, sweep_table(records), best_caps(scale)) + _b8_claims(scale) + _b6_claims(records)
    )


def headline_metrics(records) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    st = sweep_table(records)
    gpt = gpt_layout_table(records)
    return {
        **run_identity(records),
        "world_size": records["ddp"]["world_size"],
        "sweep": st.to_dict(orient="records"),
        "best_bucket_cap_mb_real": best_real_cap(records),
        "layouts_match_simulator": all(v["equal"] for v in layout_check(records).values())
        and (gpt.empty or bool(gpt.matches_rules.all())),
        "gpt_layouts": gpt.to_dict(orient="records"),
        "gradient_gate_max_abs_diff": max(records["ddp"]["gradient_gate"].values()),
        "allreduce_fit": {
            k: v
            for k, v in records["ddp"]["allreduce_fit"].items()
            if k not in ("relative_residuals", "rows")
        },
        "best_caps_at_scale": best_caps(scale_table(records)).to_dict(orient="records"),
        "claims": verdicts.records(claims(records)),
    }


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    return claims(records), headline_metrics(records)
