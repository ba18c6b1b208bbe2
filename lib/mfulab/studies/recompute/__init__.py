"""Study ``recompute`` (notebook 04): what activation recomputation saves and costs, measured
exactly on the reference model and planned analytically at the articles' scale.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure recompute``): saved
  tensors, peak memory, hardware FLOPs, gradients and step time per recompute policy;
- ``planner``: the analytic planner at 13B/7B/70B scale (A17: both readings of Megatron's
  ``--recompute-method``; non-fused or fused attention) and ZeRO-2 vs ZeRO-3 per optimizer
  step (A12);
- ``sensitivity``: how the planner's decisions, A17's fit and A12's traffic move with the
  assumed inputs (the step model's GEMM share and latency, fragmentation margin, accumulation steps);
- ``analysis``: Table 2 vs the exact count, the policy summary, the budget table and the
  same-batch comparison (B7), the headline metrics;
- ``freed_per_flop``: bytes freed per recomputed FLOP (A14), attention core vs MLP vs attention block,
  with fused and non-fused attention, at the claim's scale and measured here;
- ``claims``: the claims table (B7, A14, A17, A12) with each verdict's rule, and ``outcome``;
- ``figures``: the charts; ``stated``: the articles' inputs, the planner cases and the
  sensitivity grids, cited.
"""
