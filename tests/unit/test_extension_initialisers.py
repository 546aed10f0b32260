"""An extension's new rows from the field's subword initialisers, and its new output rows chosen
apart from its input rows: the output rules' rows, the head a tied source then unties (trained and
exported untied) and what the Hewitt mean spares of the source's English."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ramen.initializers.extension import initialise_new_rows
from ramen.modeling.causal import BilingualCausalLM, CausalBatch
from ramen.modeling.sources import causal_lm_parts

import test_extended_causal
from test_causal import tiny_causal_lm
from test_extended_causal import assert_source_rows_kept
from tiny_decoder import ENGLISH

# The extended tokenizer and the source layouts of test_extended_causal.py, as fixtures of this module.
extension, source = test_extended_causal.extension, test_extended_causal.source


def recorded_pieces(record) -> list[list[int]]:
    return [entry["source_ids"] for entry in record["tokens"]]


def new_tables(method, source, extension, output_init="input"):
    source_tokenizer, extended_tokenizer, record, _ = extension
    return initialise_new_rows(method, source[2], source_tokenizer, extended_tokenizer, record, seed=0,
                               output_init=output_init)


def test_fvt_new_rows_are_the_means_of_the_pieces_they_were_merged_from(source, extension):
    _, _, parts = source
    first = len(extension[0])
    tables, stats = new_tables("fvt", source, extension)
    assert_source_rows_kept(tables, parts, first)
    for row, pieces in enumerate(recorded_pieces(extension[2])):
        assert len(pieces) > 1
        torch.testing.assert_close(tables.embeddings[first + row], parts.input_embeddings[pieces].mean(0))
        if tables.output is not None:
            torch.testing.assert_close(tables.output[first + row], parts.output_rows[pieces].mean(0))
        if tables.bias is not None:
            torch.testing.assert_close(tables.bias[first + row], parts.output_bias[pieces].mean())
    assert stats["supported_rows"] == stats["new_rows"] and stats["untied_head_parameters"] == 0


@pytest.mark.parametrize("rule", ["mean", "first_piece", "subword_mean"])
def test_an_output_rule_builds_the_new_output_rows_apart_from_the_input_rows(rule, source, extension):
    """The input rows keep the initialiser's rule (here weighted toward the last piece); the output
    rows and bias follow ``rule``; a tied source's head is untied, its output rows its input rows."""
    _, _, parts = source
    first, record = len(extension[0]), extension[2]
    tables, stats = new_tables("weighted_pieces", source, extension, rule)
    assert torch.equal(tables.embeddings[:first], parts.input_embeddings[:first])
    assert torch.equal(tables.output[:first], parts.output_rows[:first])
    rows, dim = parts.output_rows[:first], parts.input_embeddings.shape[1]
    bias = parts.output_bias
    for row, pieces in enumerate(recorded_pieces(record)):
        last = torch.tensor(2.0 ** np.arange(len(pieces)), dtype=torch.float32)
        torch.testing.assert_close(tables.embeddings[first + row], (last / last.sum()) @ parts.input_embeddings[pieces])
        weights = {"mean": None, "subword_mean": torch.full((len(pieces),), 1 / len(pieces)),
                   "first_piece": last.flip(0) / last.sum()}[rule]
        expected = rows.mean(0) if weights is None else weights @ rows[pieces]
        torch.testing.assert_close(tables.output[first + row], expected)
        if bias is not None:
            expected_bias = bias[:first].mean() if weights is None else weights @ bias[pieces]
            torch.testing.assert_close(tables.bias[first + row], expected_bias)
    assert stats["output_init"] == rule and not stats["tied"]
    assert stats["untied_head_parameters"] == (tables.embeddings.shape[0] * dim if parts.tied else 0)


def test_a_tied_source_under_the_mean_output_rule_trains_and_exports_an_untied_head(extension, tmp_path):
    from transformers import AutoModelForCausalLM

    source_tokenizer, extended_tokenizer, record, _ = extension
    first = len(source_tokenizer)
    source_lm = tiny_causal_lm("llama-tied", first)
    parts = causal_lm_parts(source_lm, source_tokenizer)
    tables, _ = initialise_new_rows("fvt", parts, source_tokenizer, extended_tokenizer, record, seed=0,
                                    output_init="mean")
    model = BilingualCausalLM.extended(tiny_causal_lm("llama-tied", first), tables, first, ("en", "fr"))
    groups = model.parameter_groups()
    head = model.lm.get_output_embeddings().weight
    assert not model.tied and head is not model.lm.get_input_embeddings().weight
    assert [id(p) for p in groups["head"]] == [id(head)]
    assert {id(p) for p in groups["foreign_embeddings"]} == {id(model.new_embeddings), id(model.new_output)}
    model.export_language("fr", extended_tokenizer, tmp_path / "out")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert exported.config.tie_word_embeddings is False
    output, table = exported.get_output_embeddings().weight, exported.get_input_embeddings().weight
    assert output.data_ptr() != table.data_ptr()
    source_table = parts.input_embeddings
    assert torch.equal(output[:first], source_table[:first]) and torch.equal(table[:first], source_table[:first])
    torch.testing.assert_close(output[first:], source_table.mean(0).expand(len(record["new_ids"]), -1))
    for row, pieces in enumerate(recorded_pieces(record)):
        torch.testing.assert_close(table[first + row], source_table[pieces].mean(0))
    english = source_tokenizer(ENGLISH[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        torch.testing.assert_close(exported(**english).logits[..., :first], source_lm(**english).logits,
                                   rtol=1e-5, atol=1e-5)


def english_batch(tokenizer) -> CausalBatch:
    encoded = tokenizer(ENGLISH, add_special_tokens=False)["input_ids"]
    ids = torch.zeros(len(encoded), max(map(len, encoded)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, sentence in enumerate(encoded):
        ids[row, :len(sentence)], mask[row, :len(sentence)] = torch.tensor(sentence), 1
    labels = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100)
    return CausalBatch(ids[:, :-1], mask[:, :-1], labels)


def test_the_hewitt_output_rule_keeps_english_near_the_source_where_the_tied_alignment_mixture_does_not(extension):
    """A tied source fitted to English text; each new token aligned to one or two English tokens of
    that text (as p(e|f) aligns French words to their English translations). Tied, the new rows
    copy those tokens' output rows and take their probability in English text; at the mean of the
    source's output rows (Hewitt), each new token's logit is the mean logit. The English loss at
    update 0 against the source's."""
    source_tokenizer, extended_tokenizer, record, _ = extension
    first, new = len(source_tokenizer), len(record["new_ids"])
    batch = english_batch(source_tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is the fastest on a shared machine
    try:
        fitted = tiny_causal_lm("llama-tied", first).train()
        optimizer = torch.optim.Adam(fitted.parameters(), lr=3e-2)
        for _ in range(20):
            logits = fitted(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, first), batch.labels.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        state = fitted.eval().state_dict()
        parts = causal_lm_parts(fitted, source_tokenizer)
        english = sorted({int(index) for index in batch.input_ids[batch.attention_mask.bool()]})
        generator = np.random.default_rng(0)
        rows, cols, values = [], [], []
        for row in range(new):
            count = int(generator.integers(1, 3))
            rows += [row] * count
            cols += list(generator.choice(english, size=count, replace=False))
            values += list(generator.dirichlet(np.ones(count)))
        alpha = sp.csr_matrix((values, (rows, cols)), shape=(new, first))

        def english_loss(output_init):
            tables, _ = initialise_new_rows("parallel", parts, source_tokenizer, extended_tokenizer, record, seed=0,
                                            inputs={"alpha": alpha}, output_init=output_init)
            source_lm = tiny_causal_lm("llama-tied", first)
            source_lm.load_state_dict(state)
            model = BilingualCausalLM.extended(source_lm, tables, first)
            with torch.no_grad():
                return model({"en": batch})["en"].item()

        with torch.no_grad():
            logits = fitted(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            source_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, first), batch.labels.reshape(-1)).item()
        tied, hewitt = english_loss("input") - source_loss, english_loss("mean") - source_loss
    finally:
        torch.set_num_threads(threads)
    assert 0 <= hewitt < tied / 10, (source_loss, tied, hewitt)
