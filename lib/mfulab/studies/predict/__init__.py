"""Study ``predict``: the step-time and MFU predictor (:mod:`mfulab.analytic.step`) validated against
published large-scale runs (``studies/predict/published_runs.yaml``) and, calibrated here,
against a training step measured on this machine operator class by operator class; applied
to the source articles' 64 × A100 ladder (B15) and 13B on 8 × 910B example (A17/A19).

- ``params``: the parameters; ``bench``: the measurement (the calibrated step here, its
  operator profile, the published runs read);
- ``validate``: every published row through the step model, the split, the fitted GEMM share
  and the null model; ``scores``: the errors and the goals per split; ``history``: the test
  errors of every post-freeze revision (``validation_history.yaml``); ``uncertainty``: the
  held-out scores with source-clustered intervals, the error of a modelled ratio, and a refit
  on the seen rows scored on the holdouts;
- ``calibrated``: the step measured here against the step model fed by this machine's
  calibration, operator class by operator class;
- ``worked_examples``: the articles' cases (B15's ladder, A19) through the step model;
- ``analysis``: the tables and the text of the chapter; ``claims``: ``outcome``;
  ``figures``: the charts.
"""
