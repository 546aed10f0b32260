"""Learn time of a vocabulary extension (continued BPE over the source's segmentation), and what it buys.

The source is a byte-level BPE learned on the demo's English captions (``--source-vocab``
entries, as tests/tiny_decoder.py builds one); the extension learns ``--merges`` new tokens on
the demo's French captions (Multi30k train). Prints the learn time (word counting included, and
also timed alone), the time of a full pair recount per merge (the naive learner, timed on its
first merges and extrapolated) and their ratio, then French and English bytes per token on the
validation captions before and after, with their ratios (goal: French well above 1, English
close to 1), also for the extension kept off the English training words.

    .venv/bin/python benchmarks/bench_vocab_extend.py [--merges 8000] [--source-vocab 8000] [--smoke]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

DATA = REPO / "resources" / "demo" / "parallel"


def naive_seconds_per_merge(spec: dict, lines: list[str], merges: int) -> float:
    """Seconds per merge of a learner that recounts every pair over every word type for each merge."""
    from tokenizers import Tokenizer

    from ramen.vocab.extend import word_counts

    backend = Tokenizer.from_str(json.dumps(spec))
    words = word_counts(lines, backend, [])
    segments = [([token.value for token in backend.model.tokenize(word)], freq) for word, freq in words.items()]
    start = time.perf_counter()
    for _ in range(merges):
        counts: collections.Counter = collections.Counter()
        for tokens, freq in segments:
            for pair in zip(tokens, tokens[1:]):
                counts[pair] += freq
        if not counts:
            break
        (left, right), _ = counts.most_common(1)[0]
        merged = []
        for tokens, freq in segments:
            out, position = [], 0
            while position < len(tokens):
                if position + 1 < len(tokens) and tokens[position] == left and tokens[position + 1] == right:
                    out.append(left + right)
                    position += 2
                else:
                    out.append(tokens[position])
                    position += 1
            merged.append((out, freq))
        segments = merged
    return (time.perf_counter() - start) / merges


def bytes_per_token(tokenizer, lines: list[str]) -> float:
    ids = tokenizer(lines, add_special_tokens=False, verbose=False)["input_ids"]
    return sum(len(line.encode("utf-8")) for line in lines) / sum(len(row) for row in ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--merges", type=int, default=8000, help="new tokens to learn")
    parser.add_argument("--source-vocab", type=int, default=8000, help="entries of the English source BPE")
    parser.add_argument("--lines", type=int, default=0, help="French training lines (0: all)")
    parser.add_argument("--naive-merges", type=int, default=20, help="merges the naive learner is timed on")
    parser.add_argument("--smoke", action="store_true", help="smallest size: 500 lines, 100 new tokens")
    args = parser.parse_args()
    if args.smoke:
        args.merges, args.source_vocab, args.lines, args.naive_merges = 100, 500, 500, 3

    from tiny_decoder import build_byte_tokenizer_dir

    from ramen.io import read_lines
    from ramen.vocab.extend import extend_tokenizer, word_counts
    from ramen.vocab.tokenizer import load_tokenizer

    def read(name: str) -> list[str]:
        lines = [line for line in read_lines(DATA / name) if line.strip()]
        return lines[:args.lines] if args.lines else lines

    english, french = read("multi30k.train.en.gz"), read("multi30k.train.fr.gz")
    held_en, held_fr = read("multi30k.val.en.gz"), read("multi30k.val.fr.gz")
    with tempfile.TemporaryDirectory() as workdir:
        source_dir = build_byte_tokenizer_dir(Path(workdir) / "source", lines=english,
                                              vocab_size=args.source_vocab)
        source = load_tokenizer(source_dir)
        start = time.perf_counter()
        record = extend_tokenizer(source, french, Path(workdir) / "extended", new_tokens=args.merges)
        learn = time.perf_counter() - start
        extended = load_tokenizer(Path(workdir) / "extended")
        # The same extension kept off every word of the English text (bpe.extension_keep_source_lines).
        start = time.perf_counter()
        kept_record = extend_tokenizer(source, french, Path(workdir) / "kept", new_tokens=args.merges, keep=english)
        kept_learn = time.perf_counter() - start
        kept = load_tokenizer(Path(workdir) / "kept")
        spec = json.loads(source.backend_tokenizer.to_str())
        naive = naive_seconds_per_merge(spec, french, args.naive_merges)
        start = time.perf_counter()
        word_counts(french, source.backend_tokenizer, [])
        counting = time.perf_counter() - start

    mb = sum(len(line.encode("utf-8")) for line in french) / 1e6
    print(f"corpus: {len(french)} French lines, {mb:.2f} MB, {record['word_types']} word types; "
          f"source: {len(source)} entries")
    print(f"learn: {learn:.2f} s for {record['new_tokens']} new tokens ({record['appended_merges']} merges, "
          f"{record['merges_to_existing_tokens']} to existing tokens), {learn / max(record['appended_merges'], 1) * 1e3:.2f} "
          "ms/merge")
    print(f"of which word counting (normalise, pre-tokenize, count word types): {counting:.2f} s, "
          f"{mb / counting:.1f} MB/s")
    naive_total = naive * record["appended_merges"]
    print(f"naive recount: {naive * 1e3:.1f} ms/merge, ~{naive_total:.1f} s for as many merges; "
          f"ratio naive/ours {naive_total / learn:.1f}x")
    print(f"corpus tokens: {record['corpus_tokens_before']} -> {record['corpus_tokens_after']} "
          f"({record['corpus_tokens_before'] / record['corpus_tokens_after']:.2f}x fewer)")
    for name, lines in (("French", held_fr), ("English", held_en)):
        before, after = bytes_per_token(source, lines), bytes_per_token(extended, lines)
        print(f"{name} held-out bytes/token: {before:.3f} -> {after:.3f} (ratio {after / before:.3f})")
    print(f"keeping the English training words: learn {kept_learn:.2f} s, {kept_record['blocked_pairs']} pairs "
          f"blocked over {kept_record['kept_word_types']} word types, corpus tokens "
          f"{kept_record['corpus_tokens_before']} -> {kept_record['corpus_tokens_after']}")
    for name, lines in (("French", held_fr), ("English", held_en)):
        before, after = bytes_per_token(source, lines), bytes_per_token(kept, lines)
        print(f"{name} held-out bytes/token, English kept: {before:.3f} -> {after:.3f} (ratio {after / before:.3f})")


if __name__ == "__main__":
    main()
