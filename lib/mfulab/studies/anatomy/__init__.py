"""Study ``anatomy`` (notebook 07): one real DDP training job with every loss of a step present
and measured — compute, communication wait, data wait, checkpoint — per rank, from explicit
timestamps and from the profiler; the B15 ladder measured one knob at a time; a straggler (B13).

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (calibration, corpus, the torchrun job);
- ``worker``: the job on every rank (the ladder's rungs, the comm-hook timer, the rounds);
- ``analysis``: the per-step split, the profiler beside the timestamps, the ladder table, the
  straggler and headline metrics; ``claims``: B2, B15 (measured), B13, and ``outcome``;
- ``figures``: the charts; ``stated``: the article's inputs with their citations.
"""
