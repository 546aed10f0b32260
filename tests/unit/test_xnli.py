"""Zero-shot NLI: embedding swap, freezing, training, metrics and save/load on a tiny BERT."""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForMaskedLM,
    BertModel,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForMaskedLM,
)

from ramen.errors import ConfigError, RamenError  # noqa: E402
from ramen.modeling.weights import read_word_embeddings  # noqa: E402
from ramen.tasks import TASKS  # noqa: E402
from ramen.glue import settings_from  # noqa: E402
from ramen.tasks import xnli  # noqa: E402
from ramen.vocab.tokenizer import load_tokenizer  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Keyword in the hypothesis decides the label: yes -> entailment, maybe -> neutral, no -> contradiction.
KEYWORDS = ["yes", "maybe", "no"]
FILLER = ["a", "the", "man", "woman", "dog", "cat", "runs", "sleeps", "eats", "big", "small",
          "park", "red", "blue"]  # fmt: skip
EN_WORDS = KEYWORDS + FILLER
TRANSLATION = {
    "yes": "oui", "maybe": "peut-etre", "no": "non", "a": "un", "the": "le", "man": "homme",
    "woman": "femme", "dog": "chien", "cat": "chat", "runs": "court", "sleeps": "dort",
    "eats": "mange", "big": "grand", "small": "petit", "park": "parc", "red": "rouge", "blue": "bleu",
}  # fmt: skip
FR_EXTRA = ["la", "les", "des", "et"]  # foreign vocabulary is larger, so table shapes differ


@dataclass
class Pair:
    premise: str
    hypothesis: str
    label: int


def make_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # keeps "peut-etre" one token
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def make_pairs(n: int, seed: int) -> list[Pair]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        label = rng.randrange(3)
        premise = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 8)))
        hyp = [rng.choice(FILLER) for _ in range(rng.randint(1, 4))]
        hyp.insert(rng.randint(0, len(hyp)), KEYWORDS[label])
        pairs.append(Pair(premise, " ".join(hyp), label))
    return pairs


def translate(pairs: list[Pair]) -> list[Pair]:
    def tr(text: str) -> str:
        return " ".join(TRANSLATION[w] for w in text.split())

    return [Pair(tr(p.premise), tr(p.hypothesis), p.label) for p in pairs]


def bert_config(vocab_size: int, hidden: int = 32) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        type_vocab_size=2,
    )


def roberta_config(vocab_size: int, hidden: int = 32) -> RobertaConfig:
    # Padding id 0 matches the test tokenizers' [PAD]; RoBERTa numbers positions after it.
    return RobertaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=70,
        type_vocab_size=1,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )


def build_sides(root, model_class, make_config) -> dict:
    """English model, an aligned 'French' side, and a side of the wrong width."""
    torch.manual_seed(0)
    en_dir = root / "en"
    en_tok = make_tokenizer(EN_WORDS)
    en_model = model_class(make_config(len(en_tok)))
    en_model.save_pretrained(en_dir)
    en_tok.save_pretrained(en_dir)

    # French vocabulary in another order; each row copies its English translation's
    # row, so a perfectly aligned table must give the English predictions exactly.
    fr_words = [TRANSLATION[w] for w in reversed(EN_WORDS)] + FR_EXTRA
    fr_tok = make_tokenizer(fr_words)
    fr_model = model_class(make_config(len(fr_tok)))
    en_table = en_model.get_input_embeddings().weight.detach()
    en_vocab, fr_vocab = en_tok.get_vocab(), fr_tok.get_vocab()
    with torch.no_grad():
        table = fr_model.get_input_embeddings().weight
        for en_word, fr_word in TRANSLATION.items():
            table[fr_vocab[fr_word]] = en_table[en_vocab[en_word]]
        for special in SPECIALS:
            table[fr_vocab[special]] = en_table[en_vocab[special]]
    fr_dir = root / "fr"
    fr_model.save_pretrained(fr_dir)
    fr_tok.save_pretrained(fr_dir)

    bad_dir = root / "narrow"
    model_class(make_config(len(fr_tok), hidden=16)).save_pretrained(bad_dir)
    fr_tok.save_pretrained(bad_dir)
    return {"en": en_dir, "fr": fr_dir, "bad": bad_dir}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return build_sides(tmp_path_factory.mktemp("bert_sides"), BertForMaskedLM, bert_config)


@pytest.fixture(scope="module")
def roberta_dirs(tmp_path_factory):
    return build_sides(tmp_path_factory.mktemp("roberta_sides"), RobertaForMaskedLM, roberta_config)


def logits_for(classifier, tokenizer, pairs, max_length=64):
    encoded = xnli.encode_pairs(tokenizer, pairs, max_length, classifier.uses_token_types)
    classifier.eval()
    with torch.inference_mode():
        return classifier(**xnli.collate(encoded, range(len(encoded)), classifier.pad_token_id))


def test_swap_changes_only_word_embeddings_and_restores(dirs):
    classifier = xnli.NliClassifier.from_pretrained(dirs["en"])
    en_tok = load_tokenizer(dirs["en"])
    pairs = make_pairs(8, seed=1)
    before = {k: v.clone() for k, v in classifier.state_dict().items()}
    logits_before = logits_for(classifier, en_tok, pairs)

    fr_tok = xnli.swap_embeddings(classifier, dirs["fr"])
    after = classifier.state_dict()
    assert set(after) == set(before)
    changed = [
        k for k in before if before[k].shape != after[k].shape or not torch.equal(before[k], after[k])
    ]
    assert changed == ["encoder.embeddings.word_embeddings.weight"]
    assert after[changed[0]].shape == (len(fr_tok), 32)
    assert classifier.encoder.config.vocab_size == len(fr_tok)
    assert fr_tok.convert_ids_to_tokens(fr_tok("chien")["input_ids"])[1] == "chien"

    xnli.swap_embeddings(classifier, dirs["en"])
    assert torch.equal(logits_for(classifier, en_tok, pairs), logits_before)
    assert all(torch.equal(before[k], v) for k, v in classifier.state_dict().items())


@pytest.mark.parametrize("sides", ["dirs", "roberta_dirs"])
def test_aligned_foreign_table_reproduces_english_logits(sides, request):
    dirs = request.getfixturevalue(sides)
    classifier = xnli.NliClassifier.from_pretrained(dirs["en"])
    pairs = make_pairs(16, seed=2)
    english = logits_for(classifier, load_tokenizer(dirs["en"]), pairs)
    fr_tok = xnli.swap_embeddings(classifier, dirs["fr"])
    french = logits_for(classifier, fr_tok, translate(pairs))
    assert torch.allclose(english, french, atol=1e-6)


def test_roberta_encoder_uses_no_token_types(roberta_dirs):
    classifier = xnli.NliClassifier.from_pretrained(roberta_dirs["en"])
    assert not classifier.uses_token_types and classifier.pad_token_id == 0
    xnli.swap_embeddings(classifier, roberta_dirs["fr"])
    assert classifier.word_embeddings().num_embeddings == len(SPECIALS) + len(EN_WORDS) + len(FR_EXTRA)


def test_bare_encoder_directory_works_as_a_language_side(dirs, tmp_path):
    # The source baseline's sides are the original encoder directory, which has no MLM head.
    mlm = BertForMaskedLM.from_pretrained(dirs["en"])
    bare = BertModel(mlm.config, add_pooling_layer=False)
    bare.load_state_dict(mlm.bert.state_dict(), strict=False)
    bare.save_pretrained(tmp_path / "bare")
    load_tokenizer(dirs["en"]).save_pretrained(tmp_path / "bare")
    table = read_word_embeddings(tmp_path / "bare")
    assert torch.equal(table, mlm.get_input_embeddings().weight.detach())
    classifier = xnli.NliClassifier.from_pretrained(tmp_path / "bare")
    tokenizer = xnli.swap_embeddings(classifier, tmp_path / "bare")
    assert len(tokenizer) == table.shape[0]


def test_hidden_size_mismatch_names_directory(dirs):
    classifier = xnli.NliClassifier.from_pretrained(dirs["en"])
    with pytest.raises(RamenError, match=re.escape(str(dirs["bad"]))) as info:
        xnli.swap_embeddings(classifier, dirs["bad"])
    assert "16" in str(info.value) and "32" in str(info.value)
    # A failed swap leaves the English table in place.
    assert classifier.word_embeddings().num_embeddings == len(SPECIALS) + len(EN_WORDS)


def test_accuracy_report_on_known_predictions():
    gold = [0, 1, 2, 0, 1, 2, 0]
    pred = [0, 1, 1, 0, 2, 2, 1]
    report = xnli.accuracy_report(gold, pred)
    assert report["n"] == 7 and report["correct"] == 4
    assert report["accuracy"] == pytest.approx(4 / 7)
    assert report["confusion"] == [[2, 1, 0], [0, 1, 1], [0, 1, 1]]
    assert report["per_label"]["entailment"] == {"n": 3, "correct": 2, "accuracy": pytest.approx(2 / 3)}
    assert report["per_label"]["neutral"]["accuracy"] == pytest.approx(0.5)
    empty = xnli.accuracy_report([0, 0], [0, 1])
    assert empty["per_label"]["contradiction"] == {"n": 0, "correct": 0, "accuracy": None}


def test_evaluate_with_a_constant_classifier(dirs):
    classifier = xnli.NliClassifier.from_pretrained(dirs["en"])
    with torch.no_grad():
        classifier.head.weight.zero_()
        classifier.head.bias.copy_(torch.tensor([0.0, 0.0, 5.0]))  # always "contradiction"
    pairs = make_pairs(30, seed=3)
    expected = sum(p.label == 2 for p in pairs)
    tokenizer = load_tokenizer(dirs["en"])
    report = xnli.evaluate(classifier, tokenizer, pairs, batch_size=7, max_length=64)
    assert report["n"] == 30 and report["correct"] == expected
    assert report["accuracy"] == pytest.approx(expected / 30)
    gold_counts = [sum(p.label == k for p in pairs) for k in range(3)]
    assert [row[2] for row in report["confusion"]] == gold_counts


def test_bad_label_is_reported():
    tok = make_tokenizer(EN_WORDS)
    with pytest.raises(RamenError, match="example 1"):
        xnli.encode_pairs(tok, [Pair("a", "yes", 0), Pair("a", "no", 3)])


def test_save_load_round_trip_gives_identical_logits(dirs, tmp_path):
    torch.manual_seed(4)
    classifier = xnli.NliClassifier.from_pretrained(dirs["en"], pooling="cls")
    # Save with the foreign table installed: its shape must survive the round trip.
    fr_tok = xnli.swap_embeddings(classifier, dirs["fr"])
    pairs = translate(make_pairs(10, seed=5))
    expected = logits_for(classifier, fr_tok, pairs)
    xnli.save_classifier(classifier, fr_tok, tmp_path / "clf", {"note": "round trip"})
    assert sorted(p.name for p in (tmp_path / "clf").iterdir()) >= sorted(
        ["classifier.safetensors", "config.json", "nli_classifier.json", "tokenizer.json"]
    )
    loaded = xnli.load_classifier(tmp_path / "clf")
    assert loaded.pooling == "cls" and not loaded.training
    assert torch.equal(logits_for(loaded, load_tokenizer(tmp_path / "clf"), pairs), expected)
    assert not list(tmp_path.glob(".clf.*"))  # no temporary left behind


def original_table(dirs):
    return read_word_embeddings(dirs["en"])


@pytest.fixture(scope="module")
def trained(dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("xnli_run") / "clf"
    train = make_pairs(240, seed=10)
    dev = make_pairs(60, seed=11)
    settings = xnli.NliSettings(
        epochs=6, batch_size=16, learning_rate=2e-3, warmup_ratio=0.1, seed=3, threads=1, max_length=64
    )
    history = xnli.finetune(
        dirs["en"],
        train,
        {"en": (None, dev), "fr": (dirs["fr"], translate(dev))},
        settings,
        out,
        log_every=5,
        variant="tiny",
        progress=False,
    )
    return {"out": out, "history": history, "train": train, "dev": dev, "settings": settings}


def test_finetune_learns_synthetic_task(trained):
    report = xnli.evaluate_zero_shot(trained["out"], None, trained["train"])
    assert report["accuracy"] >= 0.9
    dev = [r for r in trained["history"] if r["lang"] == "en"]
    assert len(dev) == trained["settings"].epochs
    assert max(r["accuracy"] for r in dev) >= 0.9


def test_finetune_keeps_word_embeddings_frozen(trained, dirs):
    loaded = xnli.load_classifier(trained["out"])
    base = xnli.NliClassifier.from_pretrained(dirs["en"])
    assert torch.equal(loaded.word_embeddings().weight, original_table(dirs))
    tuned, start = loaded.state_dict(), base.state_dict()
    for name in (
        "encoder.embeddings.position_embeddings.weight",
        "encoder.embeddings.LayerNorm.weight",
        "encoder.encoder.layer.0.attention.self.query.weight",
        "encoder.encoder.layer.1.output.dense.weight",
    ):
        assert not torch.equal(tuned[name], start[name]), name


def test_finetune_selects_best_epoch_and_saves_it(trained, dirs):
    history, out = trained["history"], trained["out"]
    meta = json.loads((out / "nli_classifier.json").read_text())
    by_epoch = {}
    for row in history:
        assert row["task"] == "xnli" and row["split"] == "dev" and row["variant"] == "tiny"
        by_epoch.setdefault(row["epoch"], []).append(row["accuracy"])
    # Aligned French table: transfer is exact, so both dev sets agree every epoch.
    assert all(len(set(accs)) == 1 for accs in by_epoch.values())
    means = {e: sum(a) / len(a) for e, a in by_epoch.items()}
    best = max(means, key=lambda e: (means[e], -e))
    assert meta["selected_epoch"] == best
    assert meta["labels"] == list(xnli.LABELS)
    assert meta["base_model_dir"] == str(dirs["en"])
    assert meta["settings"]["freeze_embeddings"] is True
    assert meta["dev_history"] == json.loads(json.dumps(history))
    assert {r["epoch"] for r in history if r["selected"]} == {best}
    selected_fr = next(r for r in history if r["selected"] and r["lang"] == "fr")
    report = xnli.evaluate_zero_shot(out, dirs["fr"], translate(trained["dev"]))
    assert report["correct"] == selected_fr["correct"] and report["n"] == 60


def test_finetune_is_deterministic_and_unfrozen_tables_move(dirs, tmp_path):
    train = make_pairs(48, seed=20)
    dev = make_pairs(12, seed=21)
    settings = xnli.NliSettings(
        epochs=1, batch_size=8, learning_rate=1e-3, seed=7, threads=1, freeze_embeddings=False
    )
    runs = []
    for name in ("a", "b"):
        history = xnli.finetune(
            dirs["en"], train, {"en": (dirs["en"], dev)}, settings, tmp_path / name, progress=False
        )
        runs.append((history, xnli.load_classifier(tmp_path / name).state_dict()))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])
    assert not torch.equal(runs[0][1]["encoder.embeddings.word_embeddings.weight"], original_table(dirs))


def test_max_train_examples_subsamples(dirs, tmp_path):
    settings = xnli.NliSettings(epochs=1, batch_size=4, max_train_examples=10, threads=1)
    xnli.finetune(dirs["en"], make_pairs(50, seed=30), {}, settings, tmp_path / "c", progress=False)
    meta = xnli.read_classifier_info(tmp_path / "c")
    assert meta["train_examples"] == 10 and meta["total_steps"] == 3 and meta["selected_epoch"] == 1


def test_write_results_tsv(tmp_path):
    report = xnli.accuracy_report([0, 1, 2, 2], [0, 1, 2, 0])
    rows = [
        xnli.results_row(report, variant="ramen_fr", lang="fr", split="test"),
        xnli.results_row(
            report, variant="source", lang="fr", split="dev",
            epoch=2, step=40, selected=True, train_loss=0.5,
        ),  # fmt: skip
    ]
    path = tmp_path / "out" / "xnli.tsv"
    assert xnli.write_results_tsv(path, rows) == 2
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == list(xnli.RESULT_COLUMNS)
    first = dict(zip(xnli.RESULT_COLUMNS, lines[1].split("\t")))
    second = dict(zip(xnli.RESULT_COLUMNS, lines[2].split("\t")))
    assert first == {
        "variant": "ramen_fr", "lang": "fr", "split": "test", "task": "xnli", "step": "", "epoch": "",
        "accuracy": "0.750000", "n": "4", "correct": "3", "selected": "", "train_loss": "",
    }  # fmt: skip
    picked = (second["step"], second["epoch"], second["selected"], second["train_loss"])
    assert picked == ("40", "2", "true", "0.500000")


def test_settings_validation():
    def parse(values):
        return settings_from(xnli.NliSettings, values, "tasks.xnli.settings")

    settings = parse({"epochs": 2, "learning_rate": "1e-5", "threads": None})
    assert (settings.epochs, settings.learning_rate, settings.threads) == (2, 1e-5, None)
    with pytest.raises(ConfigError, match="'tasks.xnli.settings.epochs': must not be null"):
        parse({"epochs": None})
    with pytest.raises(ConfigError, match="'tasks.xnli.settings.epochs': must be >= 1"):
        parse({"epochs": 0})
    with pytest.raises(ConfigError, match="'tasks.xnli.settings.batch_size': 2.5 is not an integer"):
        parse({"batch_size": 2.5})
    with pytest.raises(ConfigError, match="'tasks.xnli.settings.epoch': unknown setting"):
        parse({"epoch": 2})
    with pytest.raises(ConfigError, match="tasks.xnli.settings.pooling"):
        xnli.NliSettings(pooling="max")


def test_task_registry():
    assert TASKS["xnli"].metric == "accuracy"
    assert TASKS.load("xnli") is xnli
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        TASKS.load("nope")


def test_labels_match_the_nli_reader():
    nli_data = pytest.importorskip("ramen.data.nli_data")
    assert tuple(nli_data.LABELS) == xnli.LABELS


def test_max_dev_examples_limits_model_selection(dirs, tmp_path):
    settings = xnli.NliSettings(epochs=1, batch_size=4, max_train_examples=8, max_dev_examples=6, threads=1)
    dev = {"fr": (dirs["fr"], translate(make_pairs(20, seed=31)))}
    history = xnli.finetune(dirs["en"], make_pairs(20, seed=30), dev, settings, tmp_path / "c", progress=False)
    assert [row["n"] for row in history] == [6]
    with pytest.raises(ConfigError, match="tasks.xnli.settings.max_dev_examples"):
        xnli.NliSettings(max_dev_examples=0)


def test_finetune_and_test_equals_finetune_then_evaluate(dirs, tmp_path):
    settings = xnli.NliSettings(epochs=1, batch_size=4, max_train_examples=16, learning_rate=2e-3, threads=1,
                                max_length=64)
    train, dev = make_pairs(16, seed=40), translate(make_pairs(12, seed=41))
    test = translate(make_pairs(30, seed=42))
    point = xnli.finetune_and_test(dirs["en"], dirs["fr"], train, dev, test, settings, "fr", tmp_path / "a")
    xnli.finetune(dirs["en"], train, {"fr": (dirs["fr"], dev)}, settings, tmp_path / "b", progress=False)
    expected = xnli.evaluate_zero_shot(tmp_path / "b", dirs["fr"], test, threads=1)
    assert point == {"accuracy": expected["accuracy"], "n": 30, "epoch": 1}


def test_one_shared_fine_tuning_selects_per_language_as_separate_runs_would(dirs, tmp_path):
    """A model shared by every language (mBERT: both sides one directory) is fine-tuned once, every
    epoch kept; each language's selection on its own dev set equals a run of its own."""
    settings = xnli.NliSettings(epochs=3, batch_size=8, max_train_examples=48, learning_rate=2e-3, threads=1,
                                max_length=64, seed=5)
    train = make_pairs(48, seed=50)
    dev = {"fr": make_pairs(24, seed=51), "ru": make_pairs(24, seed=52)}
    test = make_pairs(30, seed=53)
    xnli.finetune(dirs["en"], train, None, settings, tmp_path / "shared", progress=False, keep_epochs=True,
                  checkpoint_dir=tmp_path / "checkpoints", checkpoint_every=2)
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == ["epoch-1", "epoch-2", "epoch-3", "epochs.json"]
    assert not list((tmp_path / "checkpoints").rglob("epoch-*"))  # staged epochs moved out, the run removed
    for lang, examples in dev.items():
        rows, predictions = xnli.select_and_test(tmp_path / "shared", dirs["en"], examples,
                                                 [(lang, dirs["en"], test)], variant="mbert", lang=lang, threads=1)
        history = xnli.finetune(dirs["en"], train, {lang: (dirs["en"], examples)}, settings, tmp_path / lang,
                                progress=False, variant="mbert")
        columns = ("lang", "split", "epoch", "step", "accuracy", "correct", "n", "selected")
        assert [{c: row[c] for c in columns} for row in rows[:-1]] == [{c: row[c] for c in columns} for row in history]
        assert [row["train_loss"] for row in rows[:-1]] == pytest.approx([row["train_loss"] for row in history])
        expected = xnli.evaluate_zero_shot(tmp_path / lang, dirs["en"], test, threads=1)
        assert rows[-1]["split"] == "test" and rows[-1]["accuracy"] == expected["accuracy"]
        assert rows[-1]["epoch"] == xnli.read_classifier_info(tmp_path / lang)["selected_epoch"]
        assert len(predictions) == len(test)
