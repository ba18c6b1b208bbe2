"""What the source articles state for the ``recompute`` claims, and the planner cases built
from them (article ids as in ``docs/claims.md``). These are inputs under test, not results."""

from pathlib import Path

import yaml

# The planner's cases (the ``planner_cases`` default), with their sources, in planner_cases.yaml.
PLANNER_CASES = tuple(yaml.safe_load(Path(__file__).with_name("planner_cases.yaml").read_text()))

# B7 — article B §2.3 (and §6.3): full recompute took MFU from 50% to 40% (an anecdote).
B7_MFU_PERCENT = (50, 40)

# A14 — article A §5.1: recompute the MLP and keep the attention activations. The analytic
# side of the check takes one layer of the article's 13B shape (bf16, dropout, s = 4096).
A14_PRESET = "article-13b"

# A17 — article A §6.1: the first planner case (planner_cases.yaml says what is stated and how
# the planner reads it).
A17_CASE = PLANNER_CASES[0]
A17_POLICY = "every_k:12"  # the stated setting
A17_MICRO_BATCH = 1

# A12 — article A §4.2 (also article B §6.3): ZeRO-3 over ZeRO-2 for the 13B model at TP = 8
# on 64 GB cards, at several data-parallel widths.
A12_ZERO = {"preset_name": "article-13b", "tp": 8, "dp_values": [4, 16, 64], "device_memory_gib": 64}
