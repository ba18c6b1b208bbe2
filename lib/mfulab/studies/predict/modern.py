"""The step model on MoE, context-parallel and FP8 steps (``analytic/step_modern``): the rows of
the fourth holdout, priced as their notes say, term by term; the FP8 and context-parallel rows of
the earlier splits that the model refused before it priced them; the ratios a planner would rank
by (FP8 over BF16 twins, layouts of one MoE model on one cluster); and how the three named
assumptions it adds (``fp8_matmul_relative_efficiency``, ``ep_a2a_exposed``,
``moe_load_imbalance``) move the errors. The defaults were fixed before any of these rows was
priced (``holdout-4_frozen_at``); everything here is read after, and changes no default."""

from __future__ import annotations

import json
import re

import numpy as np

from mfulab.analytic import step as step_model
from mfulab.studies.predict import scores, uncertainty, validate

SPLIT = "holdout-4"
# the named assumptions step_modern adds, and the values the sensitivity table moves them to
# a row whose file note declares its all-to-alls hidden (Megatron-Core's moe_a2a_overlap, the
# model zoo's A2A_OVERLAP, DeepSeek-V3's DualPipe); the model prices them exposed
A2A_OVERLAP = re.compile(r"all-to-all overlap|DualPipe", re.IGNORECASE)
# tokens of a row id that name its precision or scaling recipe; an FP8 row and its BF16 twin whose
# ids differ in any other token differ in something else too (torch.compile, a publication)
PRECISION_TOKENS = {"fp8", "bf16", "float8", "none", "fp8cs", "tensorwise", "rowwise", "mxfp8"}
SENSITIVITY = {
    "fp8_matmul_relative_efficiency": (1.0, 0.75, 0.5),
    "ep_a2a_exposed": (1.0, 0.5, 0.0),
    "moe_load_imbalance": (1.0, 1.25),
}


def _kind(row: dict) -> str:
    layout, model = row["layout"], row["model"]
    parts = ["MoE"] if model.get("moe") else []
    parts += ["MLA"] if model.get("mla") else []
    parts += [f"CP {layout['context_parallel']}"] if layout.get("context_parallel", 1) > 1 else []
    return " · ".join([*parts, layout.get("dtype", "bf16").upper()])


def _model_name(row: dict) -> str:
    """A short name of a row's model shape (layers × width, experts), enough to tell models apart."""
    m = row["model"]
    moe = m.get("moe") or {}
    return f"{m['n_layers']}L·{m['d_model']}" + (f"·{moe['n_experts']}e/top{moe['top_k']}" if moe else "")


def is_new_kind(row: dict) -> bool:
    """A row the model refused before it priced MoE, context parallelism and FP8."""
    layout = row["layout"]
    return bool(
        row["model"].get("moe")
        or layout.get("context_parallel", 1) > 1
        or layout.get("dtype", "bf16") in step_model.FP8_DTYPES
    )


def rows_table(runs, df, fitted: float):
    """Every row of the fourth holdout (priced as noted: every one names a feature the model
    lacks) and every FP8 / context-parallel row of the earlier splits: its error, the null
    model's and the unfitted 40%-MFU rule's, each term's share of the predicted step, and the
    reason of a refused row."""
    import pandas as pd

    by_id = df.set_index("id")
    out = []
    for row in runs:
        if not is_new_kind(row):
            continue
        noted = row.get("split") == SPLIT
        r = validate.predict_row(row, price_not_modelled=noted, **{validate.FIT_PARAMETER: fitted})
        null = by_id.null_error_as_noted if noted else by_id.null_error
        entry = {
            "id": row["id"],
            "source": row["source"],
            "split": row.get("split"),
            "kind": _kind(row),
            "model": _model_name(row),
            "device": row["device"],
            "tokens_per_gpu": row["layout"]["global_batch"]
            * row["model"]["seq_len"]
            / row["layout"]["n_devices"],
            "publication": " ".join(row["citation"].split()[:2]),  # repository and file, or the authors
            "scaling": _scaling(row) if row["layout"].get("dtype", "bf16") in step_model.FP8_DTYPES else "",
            "cp": row["layout"].get("context_parallel", 1),
            "a2a_overlap_declared": bool(row["model"].get("moe"))
            and bool(A2A_OVERLAP.search(row.get("not_modelled") or "")),
            "published_step_s": r["published_step_s"],
            "predicted_step_s": r["predicted_step_s"],
            "error": r["error"],
            "null_error": float(null.get(row["id"], np.nan)),
            "model_flops_per_step": r["model_flops_per_step"],
            "peak_flops_total": r["peak_flops_total"],
            "refused": r["refused"],
        }
        for term in step_model.TERMS:
            entry[f"{term.removesuffix('_s')}_share"] = (
                r[term] / r["predicted_step_s"] if not r["refused"] else np.nan
            )
        out.append(entry)
    table = pd.DataFrame(out)
    table.insert(list(table.columns).index("model_flops_per_step"), "mfu40_error", scores.prior_errors(table))
    return table


def _groups(table) -> dict:
    priced = table[table.refused == ""]
    held = priced.split == SPLIT
    moe = priced.kind.str.contains("MoE")
    hidden = priced.a2a_overlap_declared
    return {
        "holdout-4 (MoE, CP, FP8; as noted)": priced[held],
        "holdout-4: MoE rows": priced[held & moe],
        "holdout-4: MoE, all-to-all overlap declared (priced exposed)": priced[held & moe & hidden],
        "holdout-4: MoE, no overlap declared": priced[held & moe & ~hidden],
        "holdout-4: dense CP rows": priced[held & ~moe],
        "earlier splits: FP8 rows": priced[~held & priced.kind.str.contains("FP8")],
        "CP rows of every split, cp = 2": priced[priced.cp == 2],
        "CP rows of every split, cp ≥ 4": priced[priced.cp >= 4],
    }


def summary(table, df=None):
    """Per group: rows priced, median |error| and signed error, the null model's and the
    40%-MFU rule's median |error| on the same rows, the share of rows where the predictor is
    closer than the null, and the share within 25%. With the validation table ``df``, the test
    rows the model priced before this revision beside them (the test split's old make-up)."""
    import pandas as pd

    groups = _groups(table)
    if df is not None:
        before = df[(df.split == "test") & (df.refused == "") & ~df.id.isin(table.id)].copy()
        before["mfu40_error"] = scores.prior_errors(before)
        groups["test rows priced before this revision (dense BF16)"] = before
    rows = []
    for name, g in groups.items():
        if not len(g):
            continue
        rows.append(
            {
                "rows": name,
                "priced": len(g),
                "sources": g.source.nunique(),
                "median_abs_error": float(g.error.abs().median()),
                "median_signed_error": float(g.error.median()),
                "largest_abs_error": float(g.error.abs().max()),
                "null_median_abs_error": float(g.null_error.abs().median()),
                "mfu40_median_abs_error": float(g.mfu40_error.abs().median()),
                "closer_than_null": float((g.error.abs() < g.null_error.abs()).mean()),
                "within_25pct": float((g.error.abs() <= 0.25).mean()),
            }
        )
    return pd.DataFrame(rows)


def bootstrap(table):
    """The fourth holdout's medians with source-clustered 95% intervals
    (``uncertainty.clustered_bootstrap``): with five sources, whether the predictor can be told
    from the null model and the 40%-MFU rule at all."""
    g = table[(table.split == SPLIT) & (table.refused == "")]
    return uncertainty.clustered_bootstrap(g, groups={"holdout-4 as noted": (SPLIT,)})


def _layout_key(row: dict, ignore=("dtype", "fp8_recipe")) -> str:
    """What two rows of a pair share: source, publication, device, model and the layout but the
    ``ignore``d keys (the switch the pair differs in)."""
    layout = {k: v for k, v in row["layout"].items() if k not in ignore}
    publication = " ".join(row["citation"].split()[:2])  # repository and file, or a paper's authors
    return json.dumps(
        [row["source"], publication, row["device"], row["model"], layout], sort_keys=True, default=str
    )


def _scaling(row: dict) -> str:
    if "rowwise" in row["id"]:
        return "rowwise (priced as per-tensor)"
    return row["layout"].get("fp8_recipe") or "per-tensor (the stated rule)"


def fp8_pairs(runs, table, fitted: float):
    """Every priced FP8 row beside a BF16 row of the same source, publication (citation),
    device, model and layout: the published and predicted FP8 speedup, and the predictor's error
    on it (predicted ÷ published − 1), with the FP8 row's scaling and what else the two ids say
    differs (``also_differs``: a confounded pair). The speedup is the quantity an FP8 claim
    states; a bias the two rows share (a framework's overhead the model lacks) cancels in it.
    Fourth-holdout rows are priced as noted, like their FP8 twins."""
    import pandas as pd

    priced = table[table.refused == ""].set_index("id")
    by_id = {r["id"]: r for r in runs}
    bf16 = {}
    for row in runs:
        if row["layout"].get("dtype", "bf16") == "bf16":
            bf16.setdefault(_layout_key(row), []).append(row["id"])
    out = []
    for row in runs:
        if row["id"] not in priced.index or row["layout"].get("dtype", "bf16") not in step_model.FP8_DTYPES:
            continue
        f = priced.loc[row["id"]]
        for twin in bf16.get(_layout_key(row), []):
            noted = by_id[twin].get("split") == SPLIT
            b = validate.predict_row(
                by_id[twin], price_not_modelled=noted, **{validate.FIT_PARAMETER: fitted}
            )
            if b["refused"]:
                continue
            published = b["published_step_s"] / f.published_step_s
            predicted = b["predicted_step_s"] / f.predicted_step_s
            differs = set(row["id"].split("-")) ^ set(twin.split("-"))
            out.append(
                {
                    "fp8_row": row["id"],
                    "bf16_row": twin,
                    "split": row.get("split"),
                    "scaling": _scaling(row),
                    "also_differs": " ".join(sorted(differs - PRECISION_TOKENS)),
                    "published_speedup": published,
                    "predicted_speedup": predicted,
                    "speedup_error": predicted / published - 1,
                }
            )
    return pd.DataFrame(out)


def layout_ranking(table):
    """Rows of one source and publication, model, device, precision and scaling, and tokens per
    GPU (the layouts a planner
    would rank for one job; context-parallel degrees rank together): per group, the published
    and predicted ratio of each row's step to the group's fastest published one, and Spearman's ρ
    between predicted and published step times where a group has three rows or more, the null
    model's beside it (a ρ the null matches says nothing of the layouts)."""
    import pandas as pd

    priced = table[table.refused == ""].copy()
    priced["family"] = priced.kind.str.replace(r"CP \d+ · ", "", regex=True)  # CP degrees rank together
    priced["null_step_s"] = priced.published_step_s * (1 + priced.null_error)
    keys = ["source", "publication", "model", "family", "scaling", "device", "tokens_per_gpu"]
    out = []
    for (source, _, model, family, scaling, device, tokens), g in priced.groupby(keys, sort=False):
        if len(g) < 2:
            continue
        fastest = g.loc[g.published_step_s.idxmin()]
        rank = g.published_step_s.rank()
        rho = rank.corr(g.predicted_step_s.rank()) if len(g) >= 3 else np.nan
        null = g.null_step_s.round(3)  # the null's steps that agree to 1 ms tie (it knows no layout)
        null_rho = rank.corr(null.rank()) if len(g) >= 3 and null.nunique() > 1 else np.nan
        for _, r in g.iterrows():
            if r.id == fastest.id:
                continue
            published = r.published_step_s / fastest.published_step_s
            predicted = r.predicted_step_s / fastest.predicted_step_s
            out.append(
                {
                    "group": f"{source} · {model} · {family}{' ' + scaling if scaling else ''} · {device} · "
                    f"{tokens:,.0f} tokens/GPU",
                    "row": r.id,
                    "over_fastest_published": fastest.id,
                    "published_ratio": published,
                    "predicted_ratio": predicted,
                    "ratio_error": predicted / published - 1,
                    "group_spearman_rho": rho,
                    "null_spearman_rho": null_rho,
                }
            )
    return pd.DataFrame(out)


def sensitivity(runs, fitted: float):
    """Median |error| per group of :func:`summary` with each named assumption of ``SENSITIVITY``
    moved, the others at their defaults: how much of a group's miss one assumption could hold
    (read after the first evaluation; no default is changed by it)."""
    import pandas as pd

    out = []
    for name, values in SENSITIVITY.items():
        for value in values:
            kw = {validate.FIT_PARAMETER: fitted, name: value}
            errors = {}
            for row in runs:
                if not is_new_kind(row):
                    continue
                held = row.get("split") == SPLIT
                r = validate.predict_row(row, price_not_modelled=held, **kw)
                if not r["refused"]:
                    moe = bool(row["model"].get("moe"))
                    fp8 = row["layout"].get("dtype", "bf16") in step_model.FP8_DTYPES
                    group = "holdout-4 MoE" if held and moe else "holdout-4 dense CP" if held else None
                    group = group or ("earlier FP8" if fp8 else None)
                    if group:
                        errors.setdefault(group, []).append(r["error"])
            entry = {"assumption": name, "value": value}
            for group, errs in errors.items():
                entry[f"{group} median |error|"] = float(np.median(np.abs(errs)))
                entry[f"{group} median signed"] = float(np.median(errs))
            out.append(entry)
    return pd.DataFrame(out)


def moe_compensation_text(sens) -> str:
    """What moving ``ep_a2a_exposed`` does to the MoE rows of the fourth holdout: where hiding
    every all-to-all leaves them far too fast, the compute side is too fast and the exposed
    all-to-all too slow, and their agreement at the default is compensation, not a pass."""
    col = "holdout-4 MoE median signed"
    if col not in sens:
        return ""
    rows = sens[sens.assumption == "ep_a2a_exposed"].set_index("value")
    if 0.0 not in rows.index or 1.0 not in rows.index:
        return ""
    hidden, exposed = rows.loc[0.0, col], rows.loc[1.0, col]
    return (
        f"**The MoE rows' term split.** With every all-to-all hidden (`ep_a2a_exposed` 0) the MoE rows "
        f"of the fourth holdout come out {hidden:+.1%} (median signed), with all of them exposed "
        f"{exposed:+.1%}: "
        + (
            "the compute the model prices for a MoE layer (grouped GEMMs at the dense rate, no router or "
            "dispatch kernels beyond their memory traffic) is too fast, and the all-to-all it prices "
            "(exposed, not de-duplicated per node) too slow, so where the two agree with a published step "
            "they do so by compensation. Read no MoE breakdown of this model as where the time goes; "
            "`predict` prints a warning for a MoE model, and the planner refuses one."
            if hidden < -0.25
            else "neither side alone explains the miss."
        )
    )


def text(summary_table, pairs, ranking, table) -> str:
    """What the rows show, computed from the tables, each group held to the goals every held-out
    split is held to (``scores.MEDIAN_GOAL``, ``scores.MAX_GOAL``). A median below the null
    model's is only that: whether the sources tell them apart is the bootstrap's to say."""
    median_goal, max_goal = scores.MEDIAN_GOAL, scores.MAX_GOAL
    if not len(summary_table):
        return "No MoE, context-parallel or FP8 row is priced."
    parts = []
    for name, r in summary_table.set_index("rows").iterrows():
        below = "below" if r.median_abs_error < r.null_median_abs_error else "not below"
        goals = (
            "meets the goals"
            if r.median_abs_error <= median_goal and r.largest_abs_error <= max_goal
            else f"fails the goals (median ≤ {median_goal:.0%}, largest ≤ {max_goal:.0%})"
        )
        parts.append(
            f"**{name}**: {int(r.priced)} rows from {int(r.sources)} sources, median |error| "
            f"{r.median_abs_error:.1%} ({r.median_signed_error:+.1%} signed, largest "
            f"{r.largest_abs_error:.0%}, {r.within_25pct:.0%} within 25%), {below} the null model's "
            f"{r.null_median_abs_error:.1%} (the predictor closer on {r.closer_than_null:.0%} of the rows), "
            f"the 40%-MFU rule's {r.mfu40_median_abs_error:.1%}; it {goals}"
        )
    out = ". ".join(parts) + (
        ". The null model and the 40%-MFU rule price an FP8 row at the BF16 peak, as the chapter's MFU "
        "does: they give an FP8 row and its BF16 twin the same step."
    )
    priced = table[table.refused == ""]
    cp_rows = priced[priced.kind.str.contains("CP ")]
    if len(cp_rows):
        out += (
            f" The context-parallel ring's exposed share is at most {cp_rows.cp_comm_share.max():.2%} of the "
            f"step in the {len(cp_rows)} CP rows priced: those rows test the split of tokens and attention "
            "over cp ranks, not the ring term, and what the cp ≥ 4 line misses is cost the model does not "
            "price (the ring's chunked kernels and merge passes are the candidates)."
        )
    if len(pairs):
        clean = pairs[pairs.also_differs == ""]
        per_tensor = clean[~clean.scaling.str.startswith("rowwise")]
        rowwise = clean[clean.scaling.str.startswith("rowwise")]
        out += (
            f" On the FP8 speedup itself ({len(pairs)} pairs of an FP8 row and its BF16 twin in one "
            f"publication; {len(pairs) - len(clean)} of them also differ in something the ids name, and are "
            "left out here): "
            + (
                f"per-tensor scaling, {len(per_tensor)} pairs, median |speedup error| "
                f"{per_tensor.speedup_error.abs().median():.1%} "
                f"(largest {per_tensor.speedup_error.abs().max():.0%})"
                if len(per_tensor)
                else "no per-tensor pair"
            )
            + (
                f"; rowwise scaling, priced as per-tensor by the stated rule, {len(rowwise)} pairs, median "
                f"{rowwise.speedup_error.median():+.1%}"
                if len(rowwise)
                else ""
            )
            + "."
        )
    if len(ranking):
        worst = ranking.loc[ranking.ratio_error.abs().idxmax()]
        rhos = ranking.dropna(subset=["group_spearman_rho"]).drop_duplicates("group")
        out += (
            f" On ratios within one job's layouts ({len(ranking)} rows over their group's fastest), the "
            f"median ratio error is {ranking.ratio_error.abs().median():.1%}; the largest is {worst.row} "
            f"({worst.ratio_error:+.0%}: published {worst.published_ratio:.2f}×, predicted "
            f"{worst.predicted_ratio:.2f}×)"
            + "".join(
                f"; {r.group}: Spearman ρ {r.group_spearman_rho:+.2f} ("
                + (
                    f"the null model's {r.null_spearman_rho:+.2f})"
                    if not np.isnan(r.null_spearman_rho)
                    else "the null model ties every row)"
                )
                for r in rhos.itertuples()
            )
            + "."
        )
    refused = table[table.refused != ""]
    if len(refused):
        out += f" {len(refused)} rows are refused, with the reason in the last column of the row table below."
    return out
