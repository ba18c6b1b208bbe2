"""The case study's text job: what each data-parallel rank's loader must deliver
(``required_tokens_per_s_per_rank``), against what one loader process here reads and, with
:func:`tokenizer_probe`, also tokenizes (``required_vs_available``).

What tokenizing costs a text loader: a byte-level BPE (Hugging Face ``tokenizers``, the Rust
library behind most open LLM tokenizers; GPT-2's byte-level scheme, Radford et al. 2019 §2.2)
trained here on the study's own corpus and timed encoding it one document at a time on one
thread, as a loader worker would.

The corpus is synthetic (words drawn from a random vocabulary), so its bytes per token are not
English's; the quantity kept is the CPU time per byte of text, which a BPE spends merge by
merge over each pre-tokenized word. It sets the headroom of ``required_vs_available`` (bytes
read against a rank's need) beside the same need tokenized on the fly.
"""

from __future__ import annotations

import random
import time

from mfulab.analytic.articles import b15_gain
from mfulab.studies.dataloader.stated import B11_STATED, BYTES_PER_TOKEN, CASE_STUDY_JOB


def tokenizer_probe(texts: list[str], *, vocab_size: int, rounds: int, seed: int = 0) -> dict | None:
    """Train a byte-level BPE of ``vocab_size`` on ``texts``, then time ``rounds`` passes of
    ``encode`` over every text (one thread, a shuffled order per round). Correctness gate: every
    round decodes a seeded sample of the encodings back to their text. None where ``tokenizers``
    is not installed (a bare GPU image)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        return None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    t0 = time.perf_counter()
    tok.train_from_iterator(texts, trainer=trainer)
    train_s = time.perf_counter() - t0
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    rng = random.Random(seed)
    order = list(range(len(texts)))
    seconds, tokens, roundtrip = [], 0, True
    for _ in range(rounds):
        rng.shuffle(order)
        t0 = time.perf_counter()
        encodings = [tok.encode(texts[i]) for i in order]
        seconds.append(time.perf_counter() - t0)
        tokens = sum(len(e.ids) for e in encodings)
        for j in rng.sample(range(len(order)), min(20, len(order))):
            roundtrip &= tok.decode(encodings[j].ids) == texts[order[j]]
    return {
        "vocab_size": tok.get_vocab_size(),
        "documents": len(texts),
        "text_bytes": text_bytes,
        "tokens": tokens,
        "train_s": train_s,
        "encode_s": seconds,
        "roundtrip": roundtrip,
    }


def tokenize_rate(rec: dict | None) -> dict | None:
    """Median bytes of text and tokens per second one thread encodes (None without a probe or
    where the round trip failed)."""
    if not rec or not rec["roundtrip"]:
        return None
    import statistics

    encode_s = statistics.median(rec["encode_s"])
    return {
        "text_bytes_per_s": rec["text_bytes"] / encode_s,
        "tokens_per_s": rec["tokens"] / encode_s,
        "bytes_per_token": rec["text_bytes"] / rec["tokens"],
        "spread": (min(rec["encode_s"]) / encode_s, max(rec["encode_s"]) / encode_s),
    }


def required_tokens_per_s_per_rank() -> float:
    """The case study's job after its loader change: tokens each data-parallel rank's loader
    must deliver per second (the TP group shares one batch), global batch × sequence length /
    step / (GPUs / TP)."""
    job = CASE_STUDY_JOB
    step_s = b15_gain("webdataset")[1]
    tokens_per_step = job["global_batch"] * job["seq_len"]
    data_parallel_ranks = job["gpus"] // job["tp"]
    return tokens_per_step / step_s / data_parallel_ranks


def required_vs_available(records, cold_table, bytes_per_token: float = BYTES_PER_TOKEN):
    """Per format (its cold rounds, ``num_workers=0``): bytes of text per second one loader
    process reads here, the case study's per data-parallel rank (its tokens/s × the assumed
    bytes per token), and the headroom (read / required) for one process and for the case
    study's 12 workers (if each had a core)."""
    import pandas as pd

    required_tokens = required_tokens_per_s_per_rank()
    required_bytes = required_tokens * bytes_per_token
    bytes_per_sample = records["corpus"]["bytes_of_text"] / records["corpus"]["count"]
    workers = B11_STATED["workers_per_gpu"]
    tokenize = tokenize_rate(records.get("tokenizer"))
    rows = []
    for r in cold_table.itertuples():
        read_bytes_per_s = r.samples_per_s * bytes_per_sample
        row = {
            "format": r.format,
            "read_text_bytes_per_s": read_bytes_per_s,
            "required_tokens_per_s_per_rank": required_tokens,
            "required_text_bytes_per_s_per_rank": required_bytes,
            "headroom_one_process": read_bytes_per_s / required_bytes,
            f"headroom_{workers}_workers": workers * read_bytes_per_s / required_bytes,
        }
        if tokenize:  # one process reads, then tokenizes (memmap holds tokens already)
            tokenize_s_per_byte = 0.0 if r.format == "memmap" else 1 / tokenize["text_bytes_per_s"]
            row["read_and_tokenize_text_bytes_per_s"] = 1 / (1 / read_bytes_per_s + tokenize_s_per_byte)
            row["headroom_one_process_tokenizing"] = (
                row["read_and_tokenize_text_bytes_per_s"] / required_bytes
            )
        rows.append(row)
    return pd.DataFrame(rows)
