"""Analytic memory: activations per layer (with TP/SP/recompute), model states (ZeRO), and
a per-device total that the recompute planner uses.

Sources:
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv:2205.05198), Sec. 4 and Table 2: activation bytes per layer with 16-bit activations
  and 1-byte dropout masks::

      no parallelism                 s·b·h·(34 + 5·a·s/h)
      tensor parallel (t)            s·b·h·(10 + 24/t + 5·a·s/(h·t))
      tensor + sequence parallel     s·b·h·(34/t + 5·a·s/(h·t))
      tensor parallel + selective    s·b·h·(10 + 24/t)
      tensor + sequence + selective  s·b·h·(34/t)
      full recompute                 2·s·b·h   (the layer input only; /t with sequence parallel)

  The 34 is 11 (attention) + 19 (MLP) + 4 (two LayerNorms) and the 5·a·s/h is the softmax
  output (2), its dropout mask (1) and the dropout output (2), all per s·b·h. With element
  size e and optional dropout this generalises to s·b·h·(16e + 2·[dropout]) +
  a·s²·b·(e + (e + 1)·[dropout]); e = 2 with dropout gives Table 2 exactly.
- Rajbhandari et al. 2020, "ZeRO" (arXiv:1910.02054), Sec. 3.1 and Fig. 1: mixed-precision
  Adam keeps 2Ψ (16-bit weights) + 2Ψ (16-bit gradients) + KΨ (fp32 master weights, momentum,
  variance: K = 12) bytes; stage 1 shards the K·Ψ, stage 2 also the gradients, stage 3 also
  the weights, over the N data-parallel devices. Sec. 7: stages 1–2 move 2Ψ per step like
  plain all-reduce data parallelism; stage 3 moves 3Ψ (a parameter all-gather in forward and
  in backward plus the gradient reduce-scatter), per micro-batch under gradient accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import (
    RECOMPUTE_PARTIAL,
    RECOMPUTE_PLANS,
    RECOMPUTE_TABLE2,
    TransformerConfig,
    check_attention,
    check_recompute,
)
from mfulab.errors import ParameterError

LSE_BYTES_PER_ROW = 4  # a flash kernel's fp32 log-sum-exp per query row and head (FlashAttention's L)


def _check_positive(**values):
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
            raise ParameterError(f"{name} must be positive, got {value!r}")


def activation_bytes_per_layer(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    bytes_per_elem: float = 2,
    dropout: bool = True,
    seq_len: int | None = None,
    attention: str = "naive",
) -> float:
    """Bytes of activations one transformer layer keeps for backward (Korthikanti Table 2).

    ``recompute``: ``none``; ``selective`` (the attention core — scores, softmax, dropout,
    A·V — is recomputed, so the a·s² terms vanish); ``mlp`` (the second norm and the MLP are
    recomputed from the MLP branch's input, the source article's A14 policy: the MLP input,
    GeLU input, fc2 input and MLP dropout mask, 9e + 1 per s·b·h, are not kept — our
    extension of the Table 2 derivation); ``full`` (only the layer's input is kept).
    ``dropout=False`` drops the 1-byte masks and the separate dropout outputs (the reference
    model has no dropout). With ``bytes_per_elem=2`` and dropout this is Table 2 exactly.

    ``attention="fused"`` (a flash kernel, Dao et al. 2022 §3.1): the a·s²·b scores, softmax and
    dropout are never stored; the kernel keeps one fp32 log-sum-exp per row and head instead,
    :data:`LSE_BYTES_PER_ROW` · a·s·b/t bytes, which recomputing the attention core
    (``selective``) or the layer (``full``) frees.
    """
    cfg.check_classic("activation memory (Korthikanti et al. 2022, Table 2)")
    check_recompute(recompute, RECOMPUTE_TABLE2)
    check_attention(attention)
    s = cfg.seq_len if seq_len is None else seq_len
    b, h, a, t, e = micro_batch, cfg.d_model, cfg.n_heads, tp, bytes_per_elem
    _check_positive(micro_batch=b, tp=t, bytes_per_elem=e, seq_len=s)
    sbh = s * b * h
    mask = 1 if dropout else 0
    if recompute == "full":
        return e * sbh / (t if sequence_parallel else 1)
    # per s·b·h: attention 5e + mask (QKV input, Q, K, V, projection input, dropout mask),
    # MLP 9e + mask (input, GeLU input 4h, second linear input 4h, dropout mask), norms 2e.
    # Tensor parallelism splits Q, K, V, the projection input, the GeLU input and the fc2
    # input (4e + 8e = 24 at e = 2); sequence parallelism splits the rest (4e + 2 masks = 10).
    # The same count for other shapes: K and V of n_kv_heads (grouped-query attention), and an
    # MLP of d_ff whose SwiGLU keeps the gate, the up projection and their product for backward
    # (3·d_ff/h per s·b·h instead of GeLU's 2·d_ff/h); at MHA with a 4h GeLU MLP, Table 2.
    qkv_proj = (cfg.n_heads * cfg.head_dim / h) * (2 + 2 * cfg.n_kv_heads / cfg.n_heads)  # Q, proj; K, V
    mlp_kept = (3 if cfg.mlp == "swiglu" else 2) * cfg.d_ff / h
    split_by_tp = e * qkv_proj + (0 if recompute == "mlp" else e * mlp_kept)
    split_by_sp = (3 * e + mask) if recompute == "mlp" else (4 * e + 2 * mask)
    per_sbh = split_by_sp / (t if sequence_parallel else 1) + split_by_tp / t
    # softmax output (e), dropout mask (1) and dropout output (e), per a·s²·b, split by heads over t
    if attention == "fused":
        lse_bytes = 0.0 if recompute == "selective" else LSE_BYTES_PER_ROW * a * s * b / t
        return sbh * per_sbh + lse_bytes
    per_as2b = 0.0 if recompute == "selective" else (e + (e + 1) * mask) / t
    return sbh * per_sbh + a * s * s * b * per_as2b


# ---------------------------------------------------------------------------- recompute plans
CHECKPOINT_METHODS = ("block", "uniform")  # Megatron's --recompute-method


@dataclass(frozen=True)
class RecomputePlan:
    """A recompute policy as a plan over a pipeline stage's layers: a Table 2 form for every
    layer (``none``, ``selective``, ``mlp``), or whole layers checkpointed as Megatron's
    ``--recompute-method`` does it: ``block:<k>`` checkpoints each of the first k layers of a
    stage; ``uniform:<k>`` checkpoints the stage's layers in chunks of k (every layer is
    recomputed); ``full`` is ``uniform:1``."""

    name: str
    table2: str  # the per-layer Table 2 form of the layers it recomputes
    method: str | None = None  # block | uniform | None (a Table 2 form on every layer)
    k: int | None = None

    def segments(self, layers: int) -> list[tuple[int, bool]]:
        """The stage's layers as (size, checkpointed) segments, first layer first."""
        if self.method is None:
            return [(1, False)] * layers
        if self.method == "block":
            k = min(self.k, layers)
            return [(1, True)] * k + [(1, False)] * (layers - k)
        sizes = [min(self.k, layers - start) for start in range(0, layers, self.k)]
        return [(size, True) for size in sizes]

    def recomputed_layers(self, layers: float) -> float:
        """Layers of a stage of ``layers`` whose whole forward runs again (checkpointed);
        a Table 2 form recomputes part of every layer and counts none here."""
        if self.method is None:
            return 0
        return min(self.k, layers) if self.method == "block" else layers

    def form_share(self, layers: float) -> float:
        """Share of a stage's layers that recompute their :attr:`table2` form: every layer for a
        Table 2 policy, the checkpointed ones for ``block``/``uniform``."""
        if self.method is None:
            return 1.0 if self.table2 != "none" else 0.0
        return self.recomputed_layers(layers) / layers if layers else 0.0


def recompute_plan(policy: str, n_layers: int) -> RecomputePlan:
    """A recompute policy string → :class:`RecomputePlan` (k between 1 and ``n_layers``)."""
    method, _, k = policy.partition(":")
    if method in CHECKPOINT_METHODS and k:
        if not k.isdigit() or not 1 <= int(k) <= n_layers:
            raise ParameterError(f"{policy}: k must be a whole number between 1 and n_layers={n_layers}")
        return RecomputePlan(policy, "full", method, int(k))
    if policy == "full":
        return RecomputePlan(policy, "full", "uniform", 1)
    if policy not in RECOMPUTE_PARTIAL:
        raise ParameterError(f"recompute policy must be one of {', '.join(RECOMPUTE_PLANS)}; got {policy!r}")
    return RecomputePlan(policy, policy)


def stage_activation_bytes(
    cfg: TransformerConfig,
    plan: RecomputePlan,
    *,
    layers: int,
    in_flight: int,
    micro_batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    attention: str = "naive",
    dropout: bool = True,
    bytes_per_elem: float = 2,
) -> dict:
    """Activation bytes of one pipeline stage of ``layers`` layers with ``in_flight``
    micro-batches in flight (1F1B: p − i on stage i, Korthikanti Sec. 4.2.3): kept at the end
    of the forward pass (``stored_bytes``, Table 2 per layer, :func:`activation_bytes_per_layer`)
    and at the peak of the backward pass (``peak_bytes``).

    One micro-batch runs its backward, segment by segment from the last: while segment j does,
    the segments before it keep what they stored, and j itself holds what its backward needs, a
    whole layer's activations for each of its layers (a checkpointed segment recomputes them;
    a selective or mlp layer recomputes its part). ``uniform:12`` on 40 layers thus peaks at
    two chunk inputs plus 12 full layers; ``block:k`` peaks at the end of the forward pass;
    ``full`` at every layer's input plus one whole layer."""
    kw = dict(
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sequence_parallel,
        attention=attention,
        dropout=dropout,
        bytes_per_elem=bytes_per_elem,
    )
    full_layer = activation_bytes_per_layer(cfg, recompute="none", **kw)
    checkpoint = activation_bytes_per_layer(cfg, recompute="full", **kw)  # a segment's input
    # a layer outside every checkpoint keeps its own Table 2 form (all of it under block/uniform)
    own_form = activation_bytes_per_layer(cfg, recompute=plan.table2 if plan.method is None else "none", **kw)
    segments = plan.segments(layers)
    stored = [checkpoint if ckpt else size * own_form for size, ckpt in segments]
    stored_one = sum(stored)
    backward = [sum(stored[:j]) + max(stored[j], size * full_layer) for j, (size, _) in enumerate(segments)]
    peak_one = max([stored_one, *backward])
    return {
        "stored_bytes": in_flight * stored_one,
        "peak_bytes": (in_flight - 1) * stored_one + peak_one,
        "stored_one_bytes": stored_one,
        "peak_one_bytes": peak_one,
        "recomputed_layers": plan.recomputed_layers(layers),
    }


def model_state_bytes_per_device(n_params: float, *, n_devices: int, zero_stage: int, k: float = 12) -> float:
    """Weights + gradients + optimizer states per device under ZeRO stage 0–3 (Rajbhandari
    et al. 2020, Fig. 1): (2 + 2 + K)Ψ with the sharded parts divided by ``n_devices``."""
    if zero_stage not in (0, 1, 2, 3):
        raise ParameterError(f"zero_stage must be 0, 1, 2 or 3; got {zero_stage!r}")
    _check_positive(n_params=n_params, n_devices=n_devices, k=k)
    psi, n = n_params, n_devices
    weights_bytes = 2 * psi / (n if zero_stage >= 3 else 1)
    grads_bytes = 2 * psi / (n if zero_stage >= 2 else 1)
    optimizer_bytes = k * psi / (n if zero_stage >= 1 else 1)
    return weights_bytes + grads_bytes + optimizer_bytes


def zero_traffic_bytes_per_step(
    n_params: float, *, zero_stage: int, accumulation_steps: int = 1, bytes_per_elem: float = 2
) -> float:
    """Data-parallel bytes each device sends per *optimizer* step with ``accumulation_steps``
    micro-batches per step (Rajbhandari et al. 2020, Sec. 7, per micro-batch; the ring's
    (n−1)/n is taken as 1, as the paper does):

    - stages 0-1: the full gradients accumulate locally and are reduced once (reduce-scatter +
      all-gather, as a ring all-reduce): 2Ψ per step;
    - stage 2: each device keeps only its gradient shard, so every micro-batch's backward
      reduce-scatters (Ψ); the updated parameters are all-gathered once: (m + 1)Ψ;
    - stage 3: every micro-batch all-gathers the parameters in forward and again in backward
      and reduce-scatters the gradients: 3Ψ per micro-batch, 3mΨ per step.

    At m = 1 this is the paper's 2Ψ and 3Ψ. DeepSpeed reduces after every backward at stages 2
    and 3 for that reason (deepspeedai/DeepSpeed issue #2252) and uses an all-reduce at stages
    1-2, which doubles their per-reduction bytes."""
    if zero_stage not in (0, 1, 2, 3):
        raise ParameterError(f"zero_stage must be 0, 1, 2 or 3; got {zero_stage!r}")
    if not (isinstance(accumulation_steps, int) and accumulation_steps >= 1):
        raise ParameterError(f"accumulation_steps must be a whole number ≥ 1, got {accumulation_steps!r}")
    m, psi_bytes = accumulation_steps, n_params * bytes_per_elem
    return {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[zero_stage] * psi_bytes


def memory_per_device(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    zero_stage: int = 0,
    sequence_parallel: bool = False,
    recompute: str = "none",
    recompute_layers: int | None = None,
    n_params: float | None = None,
    bytes_per_elem: float = 2,
    dropout: bool = True,
    attention: str = "naive",
) -> dict:
    """Estimated bytes per device: model states + activations + output logits.

    - model states: ZeRO over ``dp`` of the parameters this device holds, N / (tp·pp);
    - activations: with 1F1B pipelining the first stage keeps ``pp`` micro-batches of its
      L/pp layers in flight, i.e. L layers' worth (Korthikanti Sec. 4.2.3);
      ``recompute_layers`` of them use ``recompute`` (``full`` by default, like Megatron's
      ``--recompute-num-layers``), the rest keep everything; ``attention`` as in
      :func:`activation_bytes_per_layer`;
    - logits: 4·s·b·V/t bytes for fp32 logits of the last stage (our approximation).
    """
    from mfulab.analytic.flops import param_count

    _check_positive(tp=tp, pp=pp, dp=dp)
    L = cfg.n_layers
    if recompute_layers is not None and not 0 <= recompute_layers <= L:
        raise ParameterError(f"recompute_layers must be between 0 and n_layers={L}; got {recompute_layers}")
    n = param_count(cfg) if n_params is None else n_params
    states = model_state_bytes_per_device(n / (tp * pp), n_devices=dp, zero_stage=zero_stage)
    kw = dict(
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sequence_parallel,
        bytes_per_elem=bytes_per_elem,
        dropout=dropout,
        attention=attention,
    )
    n_recomputed = L if recompute_layers is None and recompute != "none" else (recompute_layers or 0)
    policy = recompute if recompute != "none" else "full"
    act = (L - n_recomputed) * activation_bytes_per_layer(
        cfg, recompute="none", **kw
    ) + n_recomputed * activation_bytes_per_layer(cfg, recompute=policy, **kw)
    logits = 4 * cfg.seq_len * micro_batch * cfg.vocab_size / tp
    return {
        "model_states_bytes": states,
        "activations_bytes": act,
        "logits_bytes": logits,
        "total_bytes": states + act + logits,
        "recomputed_layers": n_recomputed,
    }


def step_peak_bytes(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    activation_bytes_per_elem: float,
    attention: str,
    optimizer: bool,
    gradient_copies: int = 0,
) -> dict:
    """Upper estimate of one single-device fp32-master training step's peak, for sizing a
    profile to a card before it runs (``make check-gpu``'s memory guard), not a measurement:

    - weights and gradients in fp32, 4 + 4 bytes per parameter, and AdamW's two fp32 moments,
      8 more, with ``optimizer`` (Rajbhandari et al. 2020, Sec. 3.1, with K = 8 for the
      moments of fp32 weights);
    - activations of every layer kept for backward, Korthikanti et al. 2022 Table 2 without
      dropout at ``activation_bytes_per_elem``; with ``attention="fused"`` (SDPA's flash or
      memory-efficient kernels) the a·s² scores are not kept (the ``selective`` count);
    - the fp32 logits, the log-softmax cross-entropy saves for its backward, and the logits'
      gradient: 3 · 4·s·b·V;
    - ``gradient_copies`` more fp32 copies of the gradients a measurement keeps to compare them.
    """
    from mfulab.analytic.flops import param_count

    n_params = param_count(cfg)
    weights_and_grads_bytes = (8 + 4 * gradient_copies) * n_params
    optimizer_bytes = 8 * n_params if optimizer else 0
    per_layer_bytes = activation_bytes_per_layer(
        cfg,
        micro_batch=micro_batch,
        recompute="selective" if attention == "fused" else "none",
        bytes_per_elem=activation_bytes_per_elem,
        dropout=False,
    )
    activations_bytes = cfg.n_layers * per_layer_bytes
    logits_bytes = 3 * 4 * cfg.seq_len * micro_batch * cfg.vocab_size
    total = weights_and_grads_bytes + optimizer_bytes + activations_bytes + logits_bytes
    return {
        "weights_and_grads_bytes": weights_and_grads_bytes,
        "optimizer_bytes": optimizer_bytes,
        "activations_bytes": activations_bytes,
        "logits_bytes": logits_bytes,
        "total_bytes": total,
    }
