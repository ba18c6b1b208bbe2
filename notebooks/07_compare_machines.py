# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python (mfulab)
#     language: python
#     name: mfulab
# ---

# %% [markdown]
# # 07 · Comparing machines
#
# Every study writes its headline numbers to `results/<machine>/<study>/metrics.json`. This
# notebook puts the machines side by side — the laptop next to the GPU next to the cluster —
# with the schema documented in `lib/mfulab/compare.py`. A machine that lacks a study shows
# *missing*, never disappears.

# %% tags=["parameters"]
results_root = "results"  # folder holding results/<machine>/
from_dir = ""  # unused: the comparison reads results_root
out_dir = ""  # set by the runner; empty: scratch/compare

# %%
import pandas as pd
from IPython.display import display

from mfulab import compare, plots, results

plots.set_theme()
out, records = results.study_records(compare, globals())
print("machines:", ", ".join(records["machines"]))

# %%
table = compare.comparison_table(results_root)
results.save_table(out, "comparison", table)
results.save_metrics(out, {"machines": records["machines"], "metrics": table.to_dict(orient="records")})
with pd.option_context("display.max_colwidth", None):
    display(table)

# %%
fig = compare.plot_ceilings(table)
plots.save_figure(fig, out, "ceilings");

# %% [markdown]
# ## What this comparison shows
#
# The measured ceilings and the MFU of the same reference step, the collectives' bus
# bandwidth and latency, the effect of fusion, recompute, bucket size and data format, per
# machine. To add a machine, run the studies there (`make all`, or `python -m mfulab measure`
# on a cluster and `make <study> FROM=DIR` anywhere) and re-run `make compare`.
