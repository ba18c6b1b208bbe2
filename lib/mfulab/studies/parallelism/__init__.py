"""Study ``parallelism`` (notebook 08): parallel layouts — pipeline schedules, ZeRO/FSDP
sharding, tensor and sequence parallelism, mixture-of-experts all-to-all — each measured on
this machine's ranks with PyTorch's own implementation and set against its formula
(``mfulab.analytic.parallel``), then sized at the articles' scale with the layout planner
(``mfulab.analytic.layouts``).

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (four torchrun jobs: ``python -m mfulab measure parallelism``);
- ``pipeline``, ``sharding``, ``tensor``, ``moe``: the torchrun workers of each layout;
- ``measured``: the workers' records as tables (per rank, per layout);
- ``analysis``: measured against the formulas, the at-scale rows; ``planner_at_scale``: the
  layout planner at the articles' scale (A10, A12, A13) and its sensitivity; ``claims``: the
  claims table and ``outcome``, the one function that produces it;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
