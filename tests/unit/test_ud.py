"""The biaffine parser task on a tiny BERT: it can fit a small treebank, save, reload and report."""

import pytest

torch = pytest.importorskip("torch")

from ramen.data.conllu import read_conllu  # noqa: E402
from ramen.errors import ConfigError  # noqa: E402
from ramen.tasks.parsing.decode import is_tree  # noqa: E402
from ramen.tasks import TASKS  # noqa: E402
from ramen.glue import settings_from  # noqa: E402
from ramen.tasks import ud  # noqa: E402
from ramen.vocab.tokenizer import load_tokenizer  # noqa: E402

# (form, upos, head, deprel) per word; words from the tiny source model's vocabulary.
TREEBANK = [
    [("the", "DET", 2, "det"), ("cat", "NOUN", 3, "nsubj"), ("was", "AUX", 0, "root"),
     ("on", "ADP", 6, "case"), ("the", "DET", 6, "det"), ("mat", "NOUN", 3, "obl"), (".", "PUNCT", 3, "punct")],
    [("she", "PRON", 2, "nsubj"), ("is", "AUX", 0, "root"), ("a", "DET", 4, "det"), ("teacher", "NOUN", 2, "attr")],
    [("the", "DET", 3, "det"), ("old", "ADJ", 3, "amod"), ("dog", "NOUN", 0, "root"), ("!", "PUNCT", 3, "punct")],
    [("they", "PRON", 0, "root"), ("and", "CCONJ", 3, "cc"), ("we", "PRON", 1, "conj")],
    [("in", "ADP", 3, "case"), ("the", "DET", 3, "det"), ("garden", "NOUN", 0, "root"),
     ("of", "ADP", 6, "case"), ("the", "DET", 6, "det"), ("school", "NOUN", 3, "nmod:poss")],
    [("my", "PRON", 2, "nmod"), ("father", "NOUN", 3, "nsubj"), ("was", "AUX", 0, "root"), ("big", "ADJ", 3, "xcomp")],
    [("it", "PRON", 2, "nsubj"), ("was", "AUX", 0, "root"), ("red", "ADJ", 2, "xcomp"), ("and", "CCONJ", 5, "cc"),
     ("small", "ADJ", 3, "conj"), (".", "PUNCT", 2, "punct")],
    [("you", "PRON", 2, "nsubj"), ("is", "AUX", 0, "root"), ("new", "ADJ", 2, "xcomp")],
]


def write_treebank(path, sentences):
    lines = []
    for sentence in sentences:
        for index, (form, upos, head, deprel) in enumerate(sentence, start=1):
            lines.append("\t".join([str(index), form, form, upos, "_", "_", str(head), deprel, "_", "_"]))
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    path = write_treebank(tmp_path_factory.mktemp("ud") / "tiny.conllu", TREEBANK)
    return list(read_conllu(path))


@pytest.fixture(scope="module")
def overfit(tmp_path_factory, tiny_source_dir, treebank):
    out = tmp_path_factory.mktemp("parser") / "parser"
    settings = ud.UdSettings(epochs=30, batch_size=4, learning_rate=1e-3, head_learning_rate=5e-3, warmup_ratio=0.0,
                             dropout=0.0, arc_dim=64, relation_dim=32, relations="full", word_pooling="mean",
                             threads=1)
    history = ud.train_parser(tiny_source_dir, treebank, (None, treebank), settings, out, variant="tiny",
                              dev_lang="en", dev_name="tiny.conllu", progress=False)
    return out, history


def test_parser_overfits_a_tiny_treebank(overfit, treebank):
    out, history = overfit
    scores = ud.evaluate_saved(out, None, treebank, threads=1)
    assert scores["las"] >= 0.95 and scores["uas"] >= 0.95
    assert scores["words"] == sum(1 for s in treebank for u in s.upos if u != "PUNCT")
    selected = [row for row in history if row["selected"]]
    assert len(selected) == 1 and selected[0]["las"] == max(row["las"] for row in history)


def test_saved_parser_predicts_trees_with_known_relations(overfit, treebank, tiny_source_dir):
    out, _ = overfit
    parser, meta = ud.load_parser(out)
    assert "nmod:poss" in meta["relations"]  # relations: full keeps subtypes
    tokenizer = load_tokenizer(out)
    heads, labels = ud.predict(parser, tokenizer, treebank, meta["relations"], "mean", batch_size=3)
    for sentence, sentence_heads, sentence_labels in zip(treebank, heads, labels):
        assert is_tree([-1, *sentence_heads]) and len(sentence_labels) == len(sentence)


def test_first_subword_pooling_and_truncation_build_pooling_rows():
    encoded = [ud.EncodedSentence([2, 10, 11, 12, 3], [(1, 3), (3, 4), None])]
    first = ud.collate(encoded, "first", 0)["pooling"][0]
    mean = ud.collate(encoded, "mean", 0)["pooling"][0]
    assert first[1].tolist() == [0, 1, 0, 0, 0] and mean[1].tolist() == [0, 0.5, 0.5, 0, 0]
    assert first[0].tolist() == first[3].tolist() == [1, 0, 0, 0, 0]  # root, and a word without subwords


def test_results_rows_and_tsv(tmp_path):
    scores = {"las": 0.5, "uas": 0.75, "las_all": 0.4, "uas_all": 0.6, "words": 8, "sentences": 2}
    row = ud.results_row(scores, variant="ramen", lang="fr", split="test", mode="zero-shot", treebank="t.conllu")
    assert ud.write_results(tmp_path / "r.tsv", [row]) == 1
    header, line = (tmp_path / "r.tsv").read_text().splitlines()
    values = dict(zip(header.split("\t"), line.split("\t")))
    assert (values["las"], values["uas"], values["mode"], values["task"]) == ("0.500000", "0.750000", "zero-shot", "ud")
    with pytest.raises(ValueError, match="mode"):
        ud.results_row(scores, variant="v", lang="fr", split="test", mode="few-shot")


def test_settings_validation_names_the_setting():
    assert settings_from(ud.UdSettings, {"learning_rate": "1e-5"}, "tasks.ud.settings").learning_rate == 1e-5
    with pytest.raises(ConfigError, match="tasks.ud.settings.word_pooling"):
        ud.UdSettings(word_pooling="last")
    with pytest.raises(ConfigError, match="tasks.ud.settings.epoch"):
        settings_from(ud.UdSettings, {"epoch": 3}, "tasks.ud.settings")


def test_task_registry_lists_ud_and_retrieval():
    assert TASKS["ud"].metric == "las" and TASKS.load("ud") is ud
    assert TASKS["retrieval"].metric == "accuracy"


def test_encoder_truncation_keeps_the_first_layers_and_is_saved(tiny_source_dir, treebank, tmp_path):
    settings = ud.UdSettings(epochs=1, batch_size=8, encoder_layers=1, finetune_encoder=False, arc_dim=8,
                             relation_dim=4, threads=1)
    ud.train_parser(tiny_source_dir, treebank, None, settings, tmp_path / "p", progress=False)
    parser, _ = ud.load_parser(tmp_path / "p")
    assert len(parser.encoder.encoder.layer) == parser.encoder.config.num_hidden_layers == 1
    with pytest.raises(ConfigError, match="exceeds the encoder's 1 layers"):
        ud.truncate_encoder(parser.encoder, 5)


def test_train_and_test_equals_training_then_parsing_the_test_set(tiny_source_dir, treebank, tmp_path):
    settings = ud.UdSettings(epochs=2, batch_size=4, arc_dim=8, relation_dim=4, threads=1)
    dev, test = treebank[:3], treebank[3:]
    point = ud.train_and_test(tiny_source_dir, tiny_source_dir, treebank, dev, test, settings, tmp_path / "a")
    ud.train_parser(tiny_source_dir, treebank, (tiny_source_dir, dev), settings, tmp_path / "b", progress=False)
    expected = ud.evaluate_saved(tmp_path / "b", tiny_source_dir, test, threads=1)
    assert point["epoch"] in (1, 2) and point["sentences"] == len(test)
    assert {key: point[key] for key in expected} == expected


def test_one_shared_parser_training_selects_per_language_as_separate_runs_would(tiny_source_dir, treebank, tmp_path):
    """A model shared by every language is trained once, every epoch's parser kept; each language's
    selection on its own dev treebank equals a run of its own."""
    from types import SimpleNamespace

    from ramen.tasks.epochs import read_epochs

    settings = ud.UdSettings(epochs=3, batch_size=4, arc_dim=8, relation_dim=4, threads=1, learning_rate=1e-3,
                             head_learning_rate=5e-3)
    ud.train_parser(tiny_source_dir, treebank, None, settings, tmp_path / "shared", progress=False,
                    keep_epochs=True, variant="mbert")
    assert [row["epoch"] for row in read_epochs(tmp_path / "shared")["epochs"]] == [1, 2, 3]
    test = write_treebank(tmp_path / "test.conllu", TREEBANK[4:])
    for lang, sentences in {"fr": TREEBANK[:3], "ru": TREEBANK[2:6]}.items():
        dev = write_treebank(tmp_path / f"dev.{lang}.conllu", sentences)
        own = SimpleNamespace(**{name: tmp_path / lang / name for name in ("scores", "predictions", "parser")})
        shared = SimpleNamespace(**{name: tmp_path / f"shared-{lang}" / name for name in ("scores", "predictions")})
        ud.parse_and_write(tiny_source_dir, tiny_source_dir, treebank, dev, test, settings, own, variant="mbert",
                           lang=lang, mode="zero-shot")
        ud.select_and_parse(tmp_path / "shared", tiny_source_dir, dev, test, shared, variant="mbert", lang=lang,
                            threads=1)
        assert shared.scores.read_text() == own.scores.read_text()
        assert shared.predictions.read_text() == own.predictions.read_text()


def test_dev_on_another_language_side_swaps_its_table_in_and_out(tiny_source_dir, treebank, tmp_path):
    """Zero-shot parsing selects on the target language's dev set with that side's table swapped in:
    a parser (which has no causal-LM flag) goes through the same table swap as an NLI classifier."""
    import shutil

    foreign = shutil.copytree(tiny_source_dir, tmp_path / "foreign")
    settings = ud.UdSettings(epochs=1, batch_size=4, arc_dim=8, relation_dim=4, threads=1)
    history = ud.train_parser(tiny_source_dir, treebank, (foreign, treebank[:3]), settings, tmp_path / "p",
                              progress=False)
    assert [row["epoch"] for row in history] == [1]
