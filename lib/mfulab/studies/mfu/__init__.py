"""Study ``mfu`` (notebook 01): what MFU means under each FLOPs convention and denominator,
and where a measured step's time goes.

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure mfu``);
- ``analysis``: tables, the time split and the claims table (A19, B1, B2, B15, A1);
- ``arithmetic``: the articles' own arithmetic (A19, B1, B15) recomputed;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
