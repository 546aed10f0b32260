"""Zero-shot XNLI when the language sides are causal LMs (a tiny Llama layout): fine-tuning on
English with the table frozen, the foreign table and its own padding swapped in, and the epoch
selection of a model shared by every language."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ramen.data.nli_data import NliExample
from ramen.errors import ConfigError
from ramen.tasks import xnli

from tiny_decoder import build_byte_tokenizer_dir, build_tiny_decoder_dir, tiny_llama

# entailment 0, neutral 1, contradiction 2
PAIRS = [
    NliExample("A man plays football in the park.", "A man plays a sport.", 0),
    NliExample("The cat sleeps on the mat.", "An animal is resting.", 0),
    NliExample("Two children swim in the lake.", "Kids are in the water.", 0),
    NliExample("A woman sells fruit at the market.", "The woman is selling apples to her sister.", 1),
    NliExample("The dog runs with a ball.", "The dog is playing with its owner.", 1),
    NliExample("She reads a book under the tree.", "She reads a novel for school.", 1),
    NliExample("The house is red.", "The house is blue.", 2),
    NliExample("A man sleeps in his bed.", "The man is running a race.", 2),
    NliExample("Children are swimming in the lake.", "Nobody is in the water.", 2),
]
FRENCH = [
    "Un homme joue au football dans le parc.", "Le chat dort sur le tapis.", "La maison est rouge.",
    "Deux enfants nagent dans le lac.", "Une femme vend des fruits au marché.", "Le chien court avec une balle.",
]


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """An English side padding with a token added after the vocabulary (as Llama 3's pad ids lie
    far up), and a smaller French side without a pad token: the English pad id is past the end of
    its table, so padding French batches with it would index out of range."""
    root = tmp_path_factory.mktemp("xnli_decoder")
    english = build_byte_tokenizer_dir(root / "en")
    tokenizer = AutoTokenizer.from_pretrained(english)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    tokenizer.save_pretrained(english)
    model = tiny_llama(len(tokenizer), seed=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(english)
    french = build_byte_tokenizer_dir(root / "fr", lines=FRENCH, vocab_size=270)
    config = french / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"pad_token": "<|endoftext|>",', ""), encoding="utf-8")
    french_tokenizer = AutoTokenizer.from_pretrained(french)
    assert french_tokenizer.pad_token is None and tokenizer.pad_token_id >= len(french_tokenizer)
    tiny_llama(len(french_tokenizer), seed=2).save_pretrained(french)
    return {"en": english, "fr": french, "same": build_tiny_decoder_dir(root / "same", seed=3)}


def french_pairs():
    return [NliExample(FRENCH[i % len(FRENCH)], FRENCH[(i * 2 + 1) % len(FRENCH)], i % 3) for i in range(9)]


def settings(**overrides):
    values = dict(epochs=3, batch_size=4, learning_rate=3e-3, warmup_ratio=0.0, threads=1, max_length=64, seed=0)
    return xnli.NliSettings(**{**values, **overrides})


def test_english_fine_tuning_keeps_the_table_and_selects_on_the_foreign_side(sides, tmp_path):
    history = xnli.finetune(sides["en"], PAIRS, {"fr": (sides["fr"], french_pairs()), "en": (None, PAIRS)},
                            settings(epochs=12), tmp_path / "clf", progress=False)
    assert [row["epoch"] for row in history if row["lang"] == "fr"] == list(range(1, 13))
    assert all(row["n"] == 9 for row in history)
    english = [row for row in history if row["lang"] == "en"]
    assert english[-1]["accuracy"] > 1 / 3  # the head learnt from the handful of pairs
    assert english[-1]["train_loss"] < english[0]["train_loss"]
    classifier = xnli.load_classifier(tmp_path / "clf")
    assert classifier.causal and classifier.pad_token_id == AutoTokenizer.from_pretrained(sides["en"]).pad_token_id
    source = AutoModelForCausalLM.from_pretrained(sides["en"]).get_input_embeddings().weight
    torch.testing.assert_close(classifier.word_embeddings().weight, source)  # frozen, row for row


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_the_foreign_table_pads_with_its_own_id_and_batches_agree_with_single_pairs(sides, tmp_path, pooling):
    xnli.finetune(sides["en"], PAIRS, None, settings(epochs=1, pooling=pooling), tmp_path / "clf", progress=False)
    classifier = xnli.load_classifier(tmp_path / "clf")
    tokenizer = xnli.swap_embeddings(classifier, sides["fr"])
    assert classifier.pad_token_id == tokenizer.eos_token_id < len(tokenizer)
    torch.testing.assert_close(classifier.word_embeddings().weight,
                               AutoModelForCausalLM.from_pretrained(sides["fr"]).get_input_embeddings().weight)
    encoded = xnli.encode_pairs(tokenizer, french_pairs(), 64, classifier.uses_token_types)
    assert len(set(encoded.lengths)) > 1  # the batch is padded
    classifier.eval()
    with torch.inference_mode():
        batched = classifier(**xnli.collate(encoded, range(len(encoded)), classifier.pad_token_id))
        alone = torch.cat([classifier(**xnli.collate(encoded, [i], classifier.pad_token_id))
                           for i in range(len(encoded))])
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-5)
    if pooling == "last":  # the pair's own last token, not the batch's last column
        hidden = classifier.encoder(input_ids=torch.tensor([encoded.input_ids[0]])).last_hidden_state[0, -1]
        torch.testing.assert_close(alone[0], classifier.head(hidden), rtol=1e-4, atol=1e-5)
    report = xnli.evaluate_zero_shot(tmp_path / "clf", sides["fr"], french_pairs(), batch_size=4,
                                     keep_predictions=True)
    assert report["predicted"] == batched.argmax(-1).tolist()


def test_a_shared_decoder_selects_each_epoch_as_a_run_of_its_own(sides, tmp_path):
    """The English side's own directory as the foreign side (one model for every language) must
    give what the English classifier gives, and a shared fine-tuning the selection of a separate run."""
    same, run = sides["same"], settings(epochs=2)
    xnli.finetune(same, PAIRS, None, run, tmp_path / "shared", progress=False, keep_epochs=True)
    rows, predictions = xnli.select_and_test(tmp_path / "shared", same, PAIRS, [("fr", same, PAIRS)],
                                             variant="shared", lang="fr", threads=1)
    history = xnli.finetune(same, PAIRS, {"fr": (same, PAIRS)}, run, tmp_path / "alone", progress=False)
    assert [(row["epoch"], row["accuracy"], row["selected"]) for row in rows[:-1]] == \
        [(row["epoch"], row["accuracy"], row["selected"]) for row in history]
    english = xnli.evaluate_zero_shot(tmp_path / "alone", None, PAIRS, keep_predictions=True)
    assert rows[-1]["accuracy"] == english["accuracy"]
    assert [row["predicted"] for row in predictions] == [xnli.LABELS[p] for p in english["predicted"]]


def test_cls_pooling_is_refused_for_a_decoder(sides):
    with pytest.raises(ConfigError, match="tasks.xnli.settings.pooling.*first token"):
        xnli.NliClassifier.from_pretrained(sides["en"], pooling="cls")
