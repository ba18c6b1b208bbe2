"""Study ``recompute`` (notebook 04): what activation recomputation saves and costs, measured
exactly on the reference model and planned analytically at the articles' scale.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure recompute``): saved
  tensors, peak memory, hardware FLOPs, gradients and step time per recompute policy;
- ``planner``: the analytic planner at 13B/7B/70B scale (A17) and ZeRO-2 vs ZeRO-3 (A12);
- ``analysis``: Table 2 vs the exact count, the policy summary, the budget table (B7), bytes
  per recomputed FLOP (A14), the claims table and the headline metrics;
- ``figures``: the charts; ``stated``: the articles' inputs and the planner cases, cited.
"""
