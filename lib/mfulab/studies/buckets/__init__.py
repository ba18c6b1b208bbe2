"""Study ``buckets`` (notebook 05): DDP gradient bucketing — DDP's real bucket layout against
its formation rules, a real ``bucket_cap_mb`` sweep timed interleaved, and a simulator
calibrated on this machine, then run at cluster scale.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, every rank under torchrun:
  ``python -m mfulab measure buckets``);
- ``simulator``: DDP's bucket formation rules and the step-time model (pure Python);
- ``analysis``: layouts vs the rules, the sweep vs the simulator, the simulator at scale and
  the claims rows (A6, B8); ``claims``: the claims table and ``outcome``, the one function that
  produces it;
- ``model_error``: the simulator's error on the measured sweep and the per-bucket overhead
  fitted to it (carried into the sensitivity table);
- ``flags``: B6, each DDP flag against its baseline flags and its mechanism's bound;
- ``grad_memory``: the gradient memory ``gradient_as_bucket_view`` saves, counted and analytic;
- ``sensitivity``: the simulator's answers under varied assumptions;
- ``report``: the notebook's sentences that carry numbers;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
