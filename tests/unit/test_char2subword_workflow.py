"""char2subword stages on tiny models: approximation, pre-training, precision, modes, the initialiser."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ramen.char2subword.approximate import ApproximationSettings, approximate, new_module
from ramen.char2subword.evaluate import evaluation_rows, neighbour_precision
from ramen.char2subword.module import load_module
from ramen.data.nli_data import NliExample

SIZES = {"dim": 16, "layers": 1, "heads": 2, "max_chars": 12}
WORDS = ["maison", "maisons", "chat", "chats", "chien", "chiens", "porte", "portes", "table", "tables",
         "jardin", "jardins", "livre", "livres", "ville", "villes", "monde", "mondes", "pays", "rue"]


def _toy_table(dim=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(len(WORDS), dim, generator=generator)


def test_neighbour_precision_of_exact_and_of_wrong_predictions():
    table = torch.nn.functional.normalize(_toy_table(), dim=-1)  # equal norms: the own row scores highest
    rows = torch.arange(len(WORDS))
    exact = neighbour_precision(table, table, rows, max_k=5)
    assert exact["acc"] == 1.0 and exact["p@1"] == 1.0 and exact["p@5"] == 1.0 and exact["ap"] == 1.0
    shuffled = neighbour_precision(table[rows.roll(1)], table, rows, max_k=5)
    assert shuffled["p@1"] == 0.0 and shuffled["ap"] < 0.6


def test_approximation_learns_the_table_and_is_seeded():
    table = _toy_table()
    rows = np.arange(len(WORDS))
    settings = ApproximationSettings(steps=60, batch_size=16, learning_rate=0.02, warmup_steps=3, top_k=3,
                                     noise_share=0.5, noise_min_length=5, log_every=20)
    fresh = new_module(table, WORDS, SIZES, seed=0)
    before = neighbour_precision(fresh.embed_all(WORDS), table, torch.from_numpy(rows), max_k=3)
    metrics = approximate(fresh, table, WORDS, rows, settings, progress=False)
    after = neighbour_precision(fresh.embed_all(WORDS), table, torch.from_numpy(rows), max_k=3)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert after["acc"] > before["acc"] and after["ap"] > before["ap"]
    short = ApproximationSettings(steps=3, batch_size=8, top_k=3, log_every=1)
    first, second = new_module(table, WORDS, SIZES, seed=1), new_module(table, WORDS, SIZES, seed=1)
    approximate(first, table, WORDS, rows, short, progress=False)
    approximate(second, table, WORDS, rows, short, progress=False)
    assert torch.allclose(first.embed_all(WORDS), second.embed_all(WORDS))


def test_evaluation_rows_are_a_fixed_sample():
    rows = np.arange(100)
    assert np.array_equal(evaluation_rows(rows, 10, 3), evaluation_rows(rows, 10, 3))
    assert len(evaluation_rows(rows, None, 0)) == 100 and len(evaluation_rows(rows, 10, 0)) == 10


@pytest.fixture(scope="module")
def english_stream(tiny_source_dir, tmp_path_factory):
    from ramen.vocab.encode import encode_corpus
    from ramen.vocab.tokenizer import load_tokenizer

    text = tmp_path_factory.mktemp("c2s") / "en.txt"
    rng = random.Random(0)
    words = "the cat dog is was on in of to and it he she they we you mat house".split()
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(50)) + "\n")
    out = text.parent / "encoded"
    encode_corpus(load_tokenizer(tiny_source_dir), text, out)
    return out


@pytest.fixture(scope="module")
def approximated(tiny_source_dir, english_stream, tmp_path_factory):
    from ramen.char2subword.pipeline import run_approximation

    out = tmp_path_factory.mktemp("c2s_module") / "approx.safetensors"
    settings = {"steps": 20, "batch_size": 32, "learning_rate": 0.01, "warmup_steps": 2, "log_every": 10}
    run_approximation(tiny_source_dir, english_stream, out, out.with_suffix(".tsv"), sizes=SIZES, settings=settings)
    return out


def test_pretraining_trains_only_the_module(tiny_source_dir, english_stream, approximated, tmp_path):
    from ramen.char2subword.pipeline import run_pretraining
    from ramen.modeling.weights import read_word_embeddings

    out = tmp_path / "pretrained.safetensors"
    settings = {"steps": 3, "batch_size": 4, "seq_len": 12, "learning_rate": 0.01, "warmup_steps": 1, "log_every": 1}
    metrics = run_pretraining(approximated, tiny_source_dir, english_stream, out, tmp_path / "m.tsv",
                              settings=settings, checkpoint_dir=tmp_path / "checkpoints", checkpoint_every=1)
    assert len(metrics) == 3 and all(np.isfinite(row["loss"]) for row in metrics)
    # Checkpointed along the way, removed once the module is saved.
    assert out.exists() and not (tmp_path / "checkpoints").exists()
    before, _ = load_module(approximated)
    after, meta = load_module(out)
    assert meta["stage"] == "pretrained"
    assert not torch.allclose(before.embed_all(["cat"]), after.embed_all(["cat"]))
    # the model directory is read, never written
    assert read_word_embeddings(tiny_source_dir).shape[0] > 0


def test_precision_table_rows(tiny_source_dir, english_stream, approximated, tmp_path):
    from ramen.char2subword.pipeline import precision_table, write_precision_table

    rows = precision_table(tiny_source_dir, english_stream, [{"stage": "approx", "module": approximated}],
                           table_name="source", eval_rows=50, max_k=5, seed=0, noise_share=0.5,
                           operations=["drop", "swap"], noise_min_length=3, untrained={"sizes": SIZES, "seed": 0})
    assert [row["stage"] for row in rows] == ["untrained", "approx"]
    assert rows[1]["rows"] == 50 and 0.0 <= rows[1]["p@1"] <= 1.0 and rows[1]["noisy_rows"] > 0
    write_precision_table(rows, tmp_path / "p.tsv", 5)
    header, _, line = (tmp_path / "p.tsv").read_text().splitlines()
    assert header.split("\t")[:6] == ["table", "stage", "losses", "noise_share", "rows", "acc"]
    assert line.startswith("source\tapprox\tce+cos+l2+nbr\t")
    frequent = precision_table(tiny_source_dir, english_stream, [{"stage": "approx", "module": approximated}],
                               table_name="source", eval_rows=None, max_k=5, seed=0, noise_share=0.5,
                               operations=["drop"], noise_min_length=3, max_rows=7)
    assert frequent[0]["rows"] == 7


def test_frequent_rows_ranks_by_corpus_count():
    from ramen.char2subword.approximate import frequent_rows

    corpus = np.array([5, 5, 5, 3, 3, 9, 2, 2, 2, 2])
    rows = np.array([2, 3, 4, 5, 9])
    assert frequent_rows(rows, corpus, 10, 2).tolist() == [2, 5]  # 2 (four times), 5 (three times)
    assert frequent_rows(rows, corpus, 10, None).tolist() == rows.tolist()


class TableLookup:
    """A stand-in module that returns a table's own row for each known string (a perfect approximation)."""

    def __init__(self, vocab, table):
        from ramen.char2subword.approximate import subword_strings

        self.rows = {}
        for i, text in enumerate(subword_strings(vocab)):
            self.rows.setdefault(text, table[i])
        self.dim = table.shape[1]

    def embed_all(self, texts):
        return torch.stack([self.rows.get(t, torch.zeros(self.dim)) for t in texts])


def _classifier(tiny_source_dir, tmp_path):
    from ramen.tasks.xnli import NliClassifier, save_classifier
    from ramen.vocab.tokenizer import load_tokenizer

    torch.manual_seed(0)
    classifier = NliClassifier.from_pretrained(tiny_source_dir)
    out = tmp_path / "classifier"
    save_classifier(classifier, load_tokenizer(tiny_source_dir), out, {"settings": {"max_length": 32}})
    return out


EXAMPLES = [NliExample("the cat is on the mat", "a dog is in the house", 0),
            NliExample("she was walking", "they talked loudly", 1),
            NliExample("the dogs played", "he is reading", 2)]


def test_mode_switch_full_equals_table_for_a_perfect_module(tiny_source_dir, tmp_path):
    from ramen.tasks.noisy_xnli import comparison_rows, evaluate_modes
    from ramen.modeling.weights import read_word_embeddings
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    classifier = _classifier(tiny_source_dir, tmp_path)
    vocab = ordered_vocab(load_tokenizer(tiny_source_dir))
    perfect = TableLookup(vocab, read_word_embeddings(tiny_source_dir))
    rows = evaluate_modes(classifier, tiny_source_dir, {"approx": perfect}, {"clean": EXAMPLES * 4},
                          modes=["table", "full", "hybrid"], batch_size=8)
    by_mode = {row["mode"]: row for row in rows}
    assert set(by_mode) == {"table", "full", "hybrid"}
    # "##"-pieces collide with whole letters after stripping; words here are whole tokens or letters
    assert by_mode["full"]["accuracy"] == by_mode["table"]["accuracy"]
    assert by_mode["table"]["module_share"] == 0.0 and by_mode["full"]["module_share"] == 1.0
    assert 0.0 < by_mode["hybrid"]["module_share"] < 1.0  # "walking", "talked", ... are split
    paired = comparison_rows([*rows, *[{**row, "condition": "noisy"} for row in rows]])
    assert all(row["change"] == 0.0 for row in paired)


def test_hybrid_encoding_merges_split_words(tiny_source_dir):
    from ramen.tasks.noisy_xnli import hybrid_encode_pairs
    from ramen.vocab.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tiny_source_dir)
    vocab_size = len(tokenizer)
    plain = tokenizer("the walking cat", "talked")
    encoded, words, share = hybrid_encode_pairs(tokenizer, [NliExample("The WALKING cat", "talked", 0)],
                                                max_length=32, token_types=True, vocab_size=vocab_size,
                                                num_labels=3)
    ids = encoded.input_ids[0]
    assert words == ["walking", "talked"]  # normalised by the tokenizer (lowercased)
    assert ids == [plain["input_ids"][0], plain["input_ids"][1], vocab_size, plain["input_ids"][2 + len(tokenizer.tokenize("walking"))],
                   tokenizer.sep_token_id, vocab_size + 1, tokenizer.sep_token_id]
    assert encoded.token_type_ids[0] == [0, 0, 0, 0, 0, 1, 1]
    assert share == pytest.approx(2 / 4)
    short, _, _ = hybrid_encode_pairs(tokenizer, [NliExample("the walking cat", "talked", 0)], max_length=5,
                                      token_types=True, vocab_size=vocab_size, num_labels=3)
    assert len(short.input_ids[0]) == 5


def test_noisy_examples_are_seeded():
    from ramen.tasks.noisy_xnli import noisy_examples

    examples = [NliExample("les enfants mangent beaucoup", "personne ne mange", 0)]
    first = noisy_examples(examples, 1.0, 3, ["swap", "drop"], 5)
    assert first == noisy_examples(examples, 1.0, 3, ["swap", "drop"], 5)
    assert first[0].premise != examples[0].premise and first[0].label == 0


def test_char2subword_initialiser(tiny_source_dir, foreign_tokenizer_dir, approximated, tmp_path):
    import json

    from safetensors.torch import load_file

    from ramen.initializers import INITIALIZERS
    from ramen.initializers.char2subword import char2subword_init
    from ramen.pipeline.initialise import initialise_foreign

    assert INITIALIZERS["char2subword"].load() is char2subword_init
    stats = initialise_foreign("char2subword", tiny_source_dir, foreign_tokenizer_dir, {"char_module": approximated}, 0,
                               tmp_path / "init.safetensors", tmp_path / "init.json")
    tensors = load_file(tmp_path / "init.safetensors")
    assert stats["supported_share"] == 1.0 and "[MASK]" in stats["special_tokens_copied"]
    module, _ = load_module(approximated)
    from ramen.char2subword.module import strip_markers
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    vocab = ordered_vocab(load_tokenizer(foreign_tokenizer_dir))
    row = next(i for i, token in enumerate(vocab) if len(strip_markers(token)) > 3 and not token.startswith("["))
    assert torch.allclose(tensors["embeddings"][row], module.embed_all([strip_markers(vocab[row])])[0], atol=1e-5)
    assert json.loads((tmp_path / "init.json").read_text())["method"] == "char2subword"

    # Without a module, the initialiser trains one on the English table itself (seeded).
    source = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    english = ["[PAD]", "[MASK]", "cat", "##s", "house", "dog"]
    kwargs = dict(alpha=None, special_tokens=["[PAD]", "[MASK]"], sizes={"dim": 8, "layers": 1, "heads": 2},
                  settings={"steps": 5, "batch_size": 4, "top_k": 2})
    first = char2subword_init(source, torch.zeros(6), ["[PAD]", "chat", "houses"], english,
                              generator=torch.Generator().manual_seed(0), **kwargs)
    second = char2subword_init(source, torch.zeros(6), ["[PAD]", "chat", "houses"], english,
                               generator=torch.Generator().manual_seed(0), **kwargs)
    assert torch.equal(first.embeddings, second.embeddings) and first.supported.all()
    assert torch.equal(first.embeddings[0], source[0])  # [PAD] copied
