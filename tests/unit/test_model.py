"""The bilingual masked LM against plain Hugging Face models built from the same weights."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, MaskedBatch, load_source_mlm

ATOL = 1e-5


@pytest.fixture(scope="module")
def tokenizers(tiny_source_dir, foreign_tokenizer_dir):
    from transformers import AutoTokenizer

    return {"en": AutoTokenizer.from_pretrained(tiny_source_dir),
            "fr": AutoTokenizer.from_pretrained(foreign_tokenizer_dir)}


@pytest.fixture
def model(tiny_source_dir, tokenizers):
    generator = torch.Generator().manual_seed(1)
    size = len(tokenizers["fr"])
    hidden = 32
    foreign = {"fr": (torch.randn(size, hidden, generator=generator) * 0.5,
                      torch.randn(size, generator=generator))}
    return BilingualMaskedLM(load_source_mlm(tiny_source_dir), "en", foreign).eval()


def make_batch(tokenizer, rows=3, length=12, seed=0) -> MaskedBatch:
    """Random non-special ids in [CLS] ... [SEP] [PAD]... rows of different lengths, some positions masked."""
    generator = torch.Generator().manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    input_ids = torch.full((rows, length), tokenizer.pad_token_id)
    attention = torch.zeros((rows, length), dtype=torch.long)
    labels = torch.full((rows, length), IGNORE_INDEX)
    for row in range(rows):
        content = length - 2 - 3 * row  # later rows are padded
        body = ordinary[torch.randint(len(ordinary), (content,), generator=generator)]
        input_ids[row, 1:1 + content] = body
        input_ids[row, 0], input_ids[row, 1 + content] = tokenizer.cls_token_id, tokenizer.sep_token_id
        attention[row, :content + 2] = 1
        chosen = torch.randperm(content, generator=generator)[:3] + 1
        labels[row, chosen] = input_ids[row, chosen]
        input_ids[row, chosen[0]] = tokenizer.mask_token_id
    return MaskedBatch(input_ids=input_ids, attention_mask=attention, labels=labels)


def test_masked_logits_equal_full_hf_logits_for_the_source(model, tiny_source_dir, tokenizers):
    from transformers import AutoModelForMaskedLM

    reference = AutoModelForMaskedLM.from_pretrained(tiny_source_dir).eval()
    batch = make_batch(tokenizers["en"])
    positions = batch.labels != IGNORE_INDEX
    with torch.no_grad():
        ours = model.masked_logits("en", model.encode({"en": batch})["en"], positions)
        full = reference(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    assert ours.shape == (int(positions.sum()), len(tokenizers["en"]))
    torch.testing.assert_close(ours, full[positions], atol=ATOL, rtol=0)


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_export_language_round_trip(model, tokenizers, tmp_path, lang):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = tokenizers[lang]
    model.export_language(lang, tokenizer, tmp_path / lang)
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / lang).eval()
    assert exported.config.vocab_size == len(tokenizer)
    assert exported.config.pad_token_id == tokenizer.pad_token_id
    assert len(AutoTokenizer.from_pretrained(tmp_path / lang)) == len(tokenizer)

    # The output layer is the input table (tied), with this language's own bias.
    output, table = exported.get_output_embeddings(), exported.get_input_embeddings()
    assert output.weight.data_ptr() == table.weight.data_ptr()
    torch.testing.assert_close(table.weight, model.input_embeddings(lang).weight, atol=0, rtol=0)
    torch.testing.assert_close(exported.cls.predictions.bias, model.output_bias(lang), atol=0, rtol=0)

    batch = make_batch(tokenizer, seed=2)
    positions = batch.labels != IGNORE_INDEX
    with torch.no_grad():
        ours = model.masked_logits(lang, model.encode({lang: batch})[lang], positions)
        theirs = exported(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[positions]
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def test_parameter_groups_partition_the_parameters(model):
    groups = model.parameter_groups()
    assert set(groups) == {"encoder", "head", "source_embeddings", "foreign_embeddings"}
    seen = {}
    for name, params in groups.items():
        assert params, name
        for param in params:
            assert id(param) not in seen, f"in both {seen.get(id(param))} and {name}"
            seen[id(param)] = name
    assert set(seen) == {id(p) for p in model.parameters()}
    assert seen[id(model.input_embeddings("en").weight)] == "source_embeddings"
    assert seen[id(model.input_embeddings("fr").weight)] == "foreign_embeddings"
    assert seen[id(model.output_bias("fr"))] == seen[id(model.output_bias("en"))] == "head"


def test_forward_runs_both_languages_in_one_encoder_pass(model, tokenizers):
    batches = {"en": make_batch(tokenizers["en"], seed=3), "fr": make_batch(tokenizers["fr"], rows=2, seed=4)}
    calls = []

    def record(module, args, kwargs, output):
        calls.append(kwargs["inputs_embeds"].shape)

    hook = model.mlm.base_model.register_forward_hook(record, with_kwargs=True)
    try:
        losses = model(batches)
    finally:
        hook.remove()
    assert len(calls) == 1 and calls[0][0] == 5
    assert set(losses) == {"en", "fr"}
    assert all(torch.isfinite(loss) and loss > 0 for loss in losses.values())

    # Sequences do not see each other: one joint pass equals separate passes.
    with torch.no_grad():
        joint = model.encode(batches)
        for lang, batch in batches.items():
            alone = model.encode({lang: batch})[lang]
            keep = batch.attention_mask.bool()
            torch.testing.assert_close(joint[lang][keep], alone[keep], atol=ATOL, rtol=0)

    # The loss is the plain cross-entropy over that language's vocabulary at the masked positions.
    with torch.no_grad():
        batch = batches["fr"]
        positions = batch.labels != IGNORE_INDEX
        logits = model.masked_logits("fr", joint["fr"], positions)
        torch.testing.assert_close(losses["fr"].detach(), F.cross_entropy(logits, batch.labels[positions]),
                                   atol=ATOL, rtol=0)

    sum(losses.values()).backward()
    assert model.input_embeddings("en").weight.grad.abs().sum() > 0
    assert model.input_embeddings("fr").weight.grad.abs().sum() > 0
    assert model.output_bias("fr").grad.abs().sum() > 0


def test_add_language_rejects_a_wrong_width(model):
    with pytest.raises(ConfigError, match=r"'variants\.<variant>\.init': de's initial embeddings \(10, 16\)"):
        model.add_language("de", torch.zeros(10, 16), torch.zeros(10))
