"""Study ``dataloader`` (notebook 06): one synthetic corpus in five storage formats, read
through ``torch.utils.data.DataLoader`` under several settings, warm and cold, and fed to a
training loop to measure the data stall and the checkpoint spike.

- ``params``: the parameters (defaults: the full profile), the list of formats and the
  assumed per-file latency of a network file system with its sources;
- ``formats``: ``loader_for``, the core's loader (writers, readers, Datasets and collate are
  ``mfulab.measure.dataformats``) with this study's batch, sequence and prefetch;
- ``settings``: B11's loader-settings row (persistent workers, paired first-batch times);
- ``cache``: page-cache eviction and its check (no root), dropping directory entries and inodes
  (root only), counting the files an epoch opens; ``disk``: the block device and its cold
  sequential and 4 KiB random reads;
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure dataloader``) —
  interleaved warm sweep, interleaved cold rounds; ``stall``: the training-loop runs (data
  stall, checkpoint spike); ``contention``: cold reads beside a checkpoint writer (B12's
  mechanism), measured and judged; ``hiding``: prefetching workers against an injected per-file
  latency with an emulated step (the overlap model of B11's network row, checked here);
  ``prefetch``: a bursty and a uniformly slow loader at several prefetch_factor values (B11's
  prefetch rows);
- ``training_gain``: B11 on training throughput (the article's own case study; the bound a
  loader's wait sets here) and the case study's tokens/s per GPU against this machine's loaders;
  ``throughput``: the B11 (loader alone: format and workers) and B2 (data part) rows and the
  latency sensitivity; ``checkpoint``: B12's existence and size rows (with a sensitivity table);
  ``analysis``: the tables and the headline metrics; ``claims``: ``outcome`` (every row and the
  metrics, as the notebook publishes them);
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
