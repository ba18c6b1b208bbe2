"""Study ``anatomy`` (notebook 07): one real DDP training job whose step is split into B2's four
losses — compute, communication wait, data wait, other (the checkpoint) — per rank, from explicit
timestamps and from the profiler (a loss below the presence floor is reported absent); the B15
ladder measured one knob at a time; a straggler (B13).

- ``params``: the parameters (defaults: the laptop profile);
- ``bench``: the measurement (calibration, corpus, the torchrun job);
- ``worker``: the job on every rank (the ladder's rungs, the comm-hook timer, the rounds);
- ``analysis``: the per-step split, the profiler beside the timestamps, the ladder table, the
  straggler and headline metrics; ``claims``: B2, B15 (measured), B13, and ``outcome``;
- ``figures``: the charts; ``stated``: the article's inputs with their citations.
"""
