"""Time training steps of every objective against RAMEN's masked-LM, at equal batch settings.

Every objective of an encoder source. A BERT of the demo's shape (6 layers, hidden 384, 12 heads,
random weights; ``--smoke``: 2 layers, hidden 64, small vocabularies), an English
and a foreign vocabulary of 30,522 and 10,000 with synthetic memory-mapped-like streams
of random ids, ``--batch`` sequences per language of ``--seq-len`` tokens. Each
objective runs ``--steps`` updates through ramen.training.trainer.train (batches made in the
background, as in training); the median seconds per update is reported, separately
for monolingual and translation-pair updates of the objectives that alternate, with
the ratio to ``mlm``; ``trtd+grpb`` is ``trtd`` with the gated relative position bias.
The objectives run in turn, so background load hits them alike.
Goal: every objective within 2x the masked-LM update (the demo keeps 150 updates each).

    .venv/bin/python benchmarks/bench_objectives.py [--steps 12] [--batch 16] [--seq-len 32] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertForMaskedLM

from ramen.vocab.encode import TokenStream
from ramen.modeling.bilingual import BilingualMaskedLM
from ramen.objectives import OBJECTIVES, get_objective, uses_pairs
from ramen.objectives.base import BatchShape, Objective, ObjectiveSettings, PairedStreams, with_gated_relative_position
from ramen.training.batches import SpecialIds
from ramen.training.trainer import TrainSettings, train

VOCAB = {"en": 30522, "fr": 10000}


def synthetic_stream(seed: int, sentences: int, vocab: int) -> TokenStream:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 20, size=sentences)
    ids = rng.integers(5, vocab, size=int(lengths.sum())).astype(np.uint16)
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab)


def seconds_per_step(label: str, args) -> dict[str, float]:
    name, _, option = label.partition("+")
    torch.manual_seed(0)
    hidden = args.hidden
    config = BertConfig(vocab_size=VOCAB["en"], hidden_size=hidden, num_hidden_layers=args.layers,
                        num_attention_heads=hidden // 32, intermediate_size=4 * hidden)
    model = BilingualMaskedLM(BertForMaskedLM(config), "en",
                              {"fr": (torch.randn(VOCAB["fr"], hidden) * 0.02, torch.zeros(VOCAB["fr"]))})
    specials = {lang: SpecialIds(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4], vocab_size=size)
                for lang, size in VOCAB.items()}
    streams = {"en": synthetic_stream(1, 5000, VOCAB["en"]), "fr": synthetic_stream(2, 5000, VOCAB["fr"])}
    pairs = PairedStreams(synthetic_stream(3, 5000, VOCAB["en"]), synthetic_stream(3, 5000, VOCAB["fr"]))
    settings = TrainSettings(steps=args.steps, batch_size=args.batch, seq_len=args.seq_len, warmup_steps=0,
                             log_every=1, threads=args.threads)
    shape = BatchShape(args.batch, args.seq_len, settings.mask_prob, settings.seed)
    objective_settings = ObjectiveSettings.from_config({"rtd": {"generator_layers": 2},
                                                        "relative_position": {"gated": option == "grpb"}})
    if objective_settings.relative_position.gated:
        model = with_gated_relative_position(model, objective_settings.relative_position)
    objective = get_objective(name)(model, streams, specials, shape, objective_settings, pairs)
    with tempfile.TemporaryDirectory() as tmp:
        train(objective, settings, Path(tmp) / "ckpt", Path(tmp) / "metrics.csv", progress=False)
        rows = list(csv.DictReader(open(Path(tmp) / "metrics.csv")))
    times = [(int(row["step"]), float(row["step_s"])) for row in rows[1:]]  # the first step warms up
    result = {"monolingual": statistics.median(t for step, t in times if not (uses_pairs(name) and step % 2 == 0))}
    if uses_pairs(name):
        result["pairs"] = statistics.median(t for step, t in times if step % 2 == 0)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes: checks that the script runs")
    args = parser.parse_args()
    if args.smoke:  # three updates: the first is left out, a pair objective's second is a translation-pair update
        args.steps, args.batch, args.seq_len, args.hidden, args.layers = 3, 2, 16, 64, 2
        VOCAB.update(en=2_000, fr=1_000)
    # The objectives of an encoder source (masked-LM family); a decoder's is timed by bench_decoder_step.py.
    names = [name for name in OBJECTIVES if issubclass(get_objective(name), Objective)]
    results = {label: seconds_per_step(label, args) for label in [*names, "trtd+grpb"]}
    base = results["mlm"]["monolingual"]
    print(f"{'objective':10} {'update':12} {'s/update':>9} {'vs mlm':>7}")
    for name, kinds in results.items():
        for kind, seconds in kinds.items():
            print(f"{name:10} {kind:12} {seconds:9.3f} {seconds / base:7.2f}")
        mean = statistics.mean(kinds.values())
        print(f"{name:10} {'average':12} {mean:9.3f} {mean / base:7.2f}")


if __name__ == "__main__":
    main()
