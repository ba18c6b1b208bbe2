"""Study ``overlap`` (notebook 02): what a collective costs, and how much of it chunked
overlap hides.

- ``params``: the parameters (defaults: the laptop profile, 2 ranks on gloo);
- ``bench``: the measurement under torchrun (torch, headless: ``python -m mfulab measure overlap``):
  the collectives benchmark and the chunked-overlap sweep, real and emulated compute, every
  (variant, k) interleaved over rounds;
- ``analysis``: the measured tables, the α–β check, the paired comparisons (A3, A5);
- ``alpha_beta``: the α–β models — chunked overlap, A5 at the articles' scale and its sensitivity
  table, B9's arithmetic; ``step_at_scale``: A4, the article's 13B step on the one step model
  (its TP activation all-reduces and DP buckets), with its sensitivity table;
- ``nccl_reference``: published nccl-tests all-reduce figures on GPUs, beside this machine's;
- ``tp_layout``: A2, the collectives of a TP MLP under PyTorch's own tensor parallelism, counted;
- ``exposed_share``: A18, the exposed share against the compute ÷ communication ratio;
- ``node_checks``: what a correct node run must show (``make check-node``);
- ``claims``: the claims table (A2, A3, A4, A5, A18, B9), the headline metrics and ``outcome``;
- ``figures``: the charts; ``stated``: the articles' inputs with their citations.
"""
