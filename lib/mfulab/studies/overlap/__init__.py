"""Study ``overlap`` (notebook 02): what a collective costs, and how much of it chunked
overlap hides.

- ``params``: the parameters (defaults: the laptop profile, 2 ranks on gloo);
- ``bench``: the measurement under torchrun (torch, headless: ``python -m mfulab measure overlap``):
  the collectives benchmark and the chunked-overlap sweep, real and emulated compute;
- ``analysis``: the chunked-overlap model, tables, the α–β fit, the articles' scale and the
  claims table (A3, A4, A5, A18, B9);
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
