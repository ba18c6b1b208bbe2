"""Study ``buckets`` (notebook 05): DDP gradient bucketing — DDP's real bucket layout against
its formation rules, a real ``bucket_cap_mb`` sweep timed interleaved, and a simulator
calibrated on this machine, then run at cluster scale.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, every rank under torchrun:
  ``python -m mfulab measure buckets``);
- ``simulator``: DDP's bucket formation rules and the step-time model (pure Python);
- ``analysis``: layouts vs the rules, the sweep vs the simulator and A6 measured here;
  ``claims``: the tables, the claims table and ``outcome``, the one function that produces them;
- ``cluster_scale``: the simulator at cluster scale (each model at the articles' TP) and the
  at-scale claims rows (A6, B8);
- ``model_error``: the simulator's error on the measured sweep and the per-bucket overhead
  fitted to it (carried into the sensitivity table);
- ``flags``: B6, each DDP flag against its baseline flags and its mechanism's bound;
- ``grad_memory``: the gradient memory ``gradient_as_bucket_view`` saves, counted and analytic;
- ``sensitivity``: the simulator's answers under varied assumptions;
- ``report``: the notebook's sentences that carry numbers;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations;
- ``node_checks``: what a correct multi-rank measurement must show (``make check-node``).
"""
