"""Study ``fusion`` (notebook 03): why small ops are memory-bound and what fusing them buys.

- ``params``: the parameters (defaults: the laptop profile);
- ``bytes_model``: the analytic bytes-moved model, the roofline and naive attention's memory;
- ``layer_share``: Amdahl's bound on a layer from the LN sub-block's share (A7, analytic);
- ``kernels``: the kernels timed (eager, Triton, SDPA), kernel counts, inductor's passes over
  memory, SDPA's dispatch per input case, the peak-memory worker;
- ``onepass``: a hand-written one-pass C kernel of the LN sub-block (CPU, fp32; OpenMP through
  ctypes), the fused kernel that tests A7's mechanism where inductor's makes more passes;
- ``sdpa_rules``: when PyTorch's CUDA flash kernel is not eligible (B3), with its source;
- ``norm_fusion_bench``: the A7 measurement (sub-block in DRAM, dropout apart, one layer's forward);
- ``bench``: the measurement (torch, headless: ``python -m mfulab measure fusion``);
- ``norm_fusion``: A7's tables and claim rows; ``published``: B5's size from a published
  measurement; ``analysis``: the rest of the rows;
  ``claims``: the claims table (A7, A8, B3, B4, B5) and ``outcome``;
- ``figures``: the charts; ``stated``: the articles' inputs and the named assumptions.
"""
