"""SIB-200 zero-shot topic classification: the file reader, fine-tuning on English and the
swap of a foreign input table, for an encoder (tiny BERT) and a decoder (tiny Llama) alike."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoTokenizer

from ramen.data.sib200 import CATEGORIES, TopicExample, is_sib200_file, read_sib200
from ramen.errors import InputFormatError
from ramen.tasks import sib200
from ramen.tasks.sib200 import Sib200Settings, evaluate_zero_shot, finetune, load_classifier_model, predict, \
    swap_input_table

from tiny_decoder import build_tiny_decoder_dir, tiny_llama

# One cue word per topic in an otherwise random sentence: learnable by a tiny model in a few epochs.
CUES = ["science", "travel", "politics", "sports", "health", "music", "river"]
FILLER = "the a man woman old new big small red house city day is was with and on".split()


def topic_examples(count: int, seed: int) -> list[TopicExample]:
    rng = random.Random(seed)
    examples = []
    for i in range(count):
        label = i % len(CATEGORIES)
        words = [rng.choice(FILLER) for _ in range(rng.randint(2, 8))]
        words.insert(rng.randint(0, len(words)), CUES[label])
        examples.append(TopicExample(index_id=str(i), text=" ".join(words), label=label))
    return examples


def write_sib(path, rows, header="index_id\tcategory\ttext"):
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_reader_reads_labels_and_names_the_bad_line(tmp_path):
    good = write_sib(tmp_path / "dev.tsv", ["548\tsports\tThe match ended.", "824\ttravel\tTake a look."])
    assert is_sib200_file(good)
    assert [(e.index_id, CATEGORIES[e.label], e.text) for e in read_sib200(good)] == [
        ("548", "sports", "The match ended."), ("824", "travel", "Take a look.")]
    bad = write_sib(tmp_path / "bad.tsv", ["1\tsports\tok", "2\tcooking\tA recipe."])
    with pytest.raises(InputFormatError, match=r"bad.tsv:3: unknown category 'cooking'"):
        read_sib200(bad)
    fields = write_sib(tmp_path / "fields.tsv", ["1\tsports"])
    with pytest.raises(InputFormatError, match=r"fields.tsv:2: 2 tab-separated fields"):
        read_sib200(fields)
    header = write_sib(tmp_path / "header.tsv", ["1\tsports\tx"], header="premise\thypothesis\tlabel")
    assert not is_sib200_file(header)
    with pytest.raises(InputFormatError, match="header.tsv:1"):
        read_sib200(header)


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory):
    return build_tiny_decoder_dir(tmp_path_factory.mktemp("sib_decoder") / "en", tie=True)


def test_a_decoder_learns_topics_with_its_table_frozen_and_resumes_cleanly(tmp_path, decoder_dir):
    settings = Sib200Settings(epochs=8, batch_size=8, learning_rate=3e-3, warmup_ratio=0.0, seed=0)
    checkpoints = tmp_path / "checkpoints"
    history = finetune(decoder_dir, topic_examples(140, 0), topic_examples(35, 1), tmp_path / "clf", settings,
                       checkpoint_dir=checkpoints, checkpoint_every=5)
    assert [row["epoch"] for row in history] == list(range(1, 9))
    assert sum(row["selected"] for row in history) == 1
    assert not any(checkpoints.rglob("*.safetensors"))  # removed once the classifier is saved
    test = topic_examples(70, 2)
    result = evaluate_zero_shot(tmp_path / "clf", None, test, settings)
    assert result["accuracy"] >= 0.5, result  # chance is 1/7
    # The frozen table is the source's, row for row.
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    trained = AutoModelForSequenceClassification.from_pretrained(tmp_path / "clf").get_input_embeddings().weight
    source = AutoModelForCausalLM.from_pretrained(decoder_dir).get_input_embeddings().weight
    torch.testing.assert_close(trained, source)


def test_training_batches_group_examples_of_similar_length(tmp_path, decoder_dir, monkeypatch):
    def padded_train_tokens(group: bool) -> int:
        widths = []
        collate = sib200.collate

        def recording_collate(encoded, indices, pad_id):
            batch = collate(encoded, indices, pad_id)
            if torch.is_grad_enabled():  # a training batch, not dev prediction
                widths.append(batch["input_ids"].numel() - int(batch["attention_mask"].sum()))
            return batch

        monkeypatch.setattr(sib200, "collate", recording_collate)
        settings = Sib200Settings(epochs=1, batch_size=8, seed=0, group_by_length=group)
        finetune(decoder_dir, topic_examples(64, 0), topic_examples(7, 1), tmp_path / f"clf-{group}", settings)
        assert len(widths) == 8
        return sum(widths)

    assert padded_train_tokens(True) < padded_train_tokens(False) / 2


def test_the_foreign_table_and_its_padding_replace_the_english_ones(tmp_path, decoder_dir):
    model, _ = load_classifier_model(decoder_dir)
    # A foreign side: another tokenizer (no pad token: EOS pads) and a table of other size.
    foreign_dir = tmp_path / "fr"
    build_tiny_decoder_dir(foreign_dir, seed=5)
    config = foreign_dir / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"pad_token": "<|endoftext|>",', ""))
    foreign_tokenizer = AutoTokenizer.from_pretrained(foreign_dir)
    assert foreign_tokenizer.pad_token is None
    tokenizer = swap_input_table(model, foreign_dir)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == model.config.pad_token_id
    foreign_table = tiny_llama(len(foreign_tokenizer), seed=5).get_input_embeddings().weight
    torch.testing.assert_close(model.get_input_embeddings().weight, foreign_table)
    # Last-token pooling finds each text's own last token in a padded batch.
    texts = [e.text for e in topic_examples(9, 3)]
    encoded = tokenizer(texts, return_attention_mask=False)["input_ids"]
    assert len({len(ids) for ids in encoded}) > 1
    batched = predict(model, encoded, tokenizer.pad_token_id, batch_size=9)
    model.eval()
    with torch.inference_mode():
        alone = [int(model(input_ids=torch.tensor([ids])).logits.argmax()) for ids in encoded]
    assert batched == alone


def test_an_encoder_runs_the_same_protocol(tmp_path, tiny_source_dir):
    settings = Sib200Settings(epochs=1, batch_size=8, seed=0)

    def tsv(name, examples):
        return write_sib(tmp_path / name, [f"{e.index_id}\t{CATEGORIES[e.label]}\t{e.text}" for e in examples])

    test = topic_examples(14, 2)
    sib200.finetune_on_files(tiny_source_dir, tsv("train.tsv", topic_examples(21, 0)),
                             tsv("dev.tsv", topic_examples(7, 1)), tmp_path / "clf", settings, variant="ramen")
    rows = sib200.test_zero_shot(tmp_path / "clf", tiny_source_dir, {"fr": tsv("fr.tsv", test), "en": tsv("en.tsv", test)},
                                 settings, variant="ramen", source_lang="en")
    assert [(row["variant"], row["lang"], row["examples"]) for row in rows] == [("ramen", "fr", 14), ("ramen", "en", 14)]
    english = evaluate_zero_shot(tmp_path / "clf", None, test, settings)
    swapped = evaluate_zero_shot(tmp_path / "clf", tiny_source_dir, test, settings)
    # The source's own table swapped in: the table is frozen, so nothing may change.
    assert swapped["predicted"] == english["predicted"]
    assert rows[0]["accuracy"] == rows[1]["accuracy"] == english["accuracy"] and "predicted" not in rows[0]
    assert sib200.write_results(tmp_path / "out.tsv", rows) == 2
