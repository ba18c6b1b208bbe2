"""Study ``dataloader`` (notebook 06): one synthetic corpus in five storage formats, read
through ``torch.utils.data.DataLoader`` under several settings, cold and warm, and fed to a
training loop to measure the data stall.

- ``params``: the parameters (defaults: the laptop profile) and the list of formats;
- ``corpus``: the synthetic corpus, byte-level tokens, checksums, the scratch-space check;
- ``formats``: a writer and a reader per format, the torch Datasets, collate, ``make_loader``;
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure dataloader``) —
  loader sweep, page-cache eviction, stall runs;
- ``analysis``: tables, the claims table (B11, B2 data part, B12) and the headline metrics;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
