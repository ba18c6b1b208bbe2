"""Study ``fusion`` (notebook 03): why small ops are memory-bound and what fusing them buys.

- ``params``: the parameters (defaults: the laptop profile);
- ``bytes_model``: the analytic bytes-moved model, the roofline and naive attention's memory;
- ``kernels``: the kernels timed (eager, Triton, SDPA), kernel counts, the peak-memory worker;
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure fusion``);
- ``analysis``: tables, A8 at the article's scale, the claims table (A7, A8, B3, B4, B5);
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
