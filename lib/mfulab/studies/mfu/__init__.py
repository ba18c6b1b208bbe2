"""Study ``mfu`` (notebook 01): what MFU means under each FLOPs convention and denominator,
and where a measured step's time goes.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure mfu``);
- ``analysis``: the conventions and counting tables, MFU per convention, headline metrics;
- ``time_split``: the measured run's time split (B2's four categories), global vs steady MFU,
  the waterfall's losses (in the headline convention or the mask-aware exact count);
- ``run_checks``: the run checked against itself: the ceiling timed in the training process,
  the waits demo;
- ``operator_split``: the operator profile (``mfulab.measure.opprofile``) taken apart: categories per step,
  the waterfall from measured categories, the 6N check, published MFU figures beside ours;
- ``claims``: the claims table (A19, B1, B2, B15 with its §5 heading, B9's MFU text, A1) and ``outcome``;
- ``b2_rows``: article B §1's rows on reading a job's losses and on MFU's definition;
- ``article_arithmetic``: the articles' arithmetic (A19, B1, B15, B9's text, Korthikanti Table 5);
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
