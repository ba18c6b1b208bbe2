"""Study ``predict``: the step-time and MFU predictor (:mod:`mfulab.analytic.step`) validated against
published large-scale runs (``studies/predict/published_runs.yaml``) and, calibrated here,
against a training step measured on this machine operator class by operator class; applied
to the source articles' 64 × A100 ladder (B15) and 13B on 8 × 910B example (A17/A19)."""
