"""Token Distillation (``distill``) on a tiny decoder: the fit lowers the hidden-state mismatch from
the subword mean and moves only new input rows, two runs agree bit for bit, a fit killed after a
checkpoint resumes to the rows of an uninterrupted one, and a token the text never holds keeps its
subword mean; through the init rule's function it checkpoints under the rule's directory and
removes it once the tables are written."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import ramen.initializers.distill as distill
from ramen.initializers import names_for
from ramen.initializers.distill import DistillSettings, distill_examples, mismatch
from ramen.initializers.extension import initialise_new_rows
from ramen.initializers.pieces import extension_pieces
from ramen.modeling.causal import special_token_ids
from ramen.modeling.sources import causal_lm_parts
from ramen.training.checkpoints import list_checkpoints
from ramen.vocab.encode import TokenStream, encode_lines

import test_extended_causal
from conftest import french_lines
from test_causal import tiny_causal_lm
from test_extended_causal import assert_source_rows_kept

extension = test_extended_causal.extension
SETTINGS = dict(contexts_per_token=2, context_tokens=8, following_tokens=2, steps=8, batch_size=8, lr=1e-2,
                checkpoint_every=4)


def encoded(tokenizer, lines) -> TokenStream:
    sentences = [ids for ids in encode_lines(tokenizer, lines) if ids]
    offsets = np.cumsum([0, *map(len, sentences)])
    return TokenStream(np.concatenate(sentences).astype(np.int64), offsets, len(tokenizer))


@pytest.fixture(scope="module")
def decoder(extension):
    source_tokenizer, extended_tokenizer, record, _ = extension
    model = tiny_causal_lm("llama-untied", len(source_tokenizer))
    return model, causal_lm_parts(model, source_tokenizer), encoded(extended_tokenizer, french_lines(150, seed=1))


def run(method, extension, decoder, text=None, **settings):
    source_tokenizer, extended_tokenizer, record, _ = extension
    model, parts, stream = decoder
    inputs = {"text": stream if text is None else text, **SETTINGS, **settings} if method == "distill" else {}
    return initialise_new_rows(method, parts, source_tokenizer, extended_tokenizer, record, seed=0, inputs=inputs,
                               model=model)


@pytest.fixture(scope="module")
def fitted(extension, decoder):
    return run("distill", extension, decoder)


def test_distill_is_an_extension_initialiser():
    assert "distill" in names_for("extend") and "distill" not in names_for("replace")


def test_the_fit_lowers_the_mismatch_and_moves_only_new_input_rows(extension, decoder, fitted):
    source_tokenizer, extended_tokenizer, record, _ = extension
    model, parts, stream = decoder
    first = len(source_tokenizer)
    tables, stats = fitted
    start, _ = run("fvt", extension, decoder)
    assert_source_rows_kept(tables, parts, first)
    # The output rows are the subword mean's: the fit is of the input rows alone.
    assert torch.equal(tables.output, start.output)
    assert not torch.equal(tables.embeddings[first:], start.embeddings[first:])
    pieces = extension_pieces(record, extended_tokenizer.convert_ids_to_tokens(record["new_ids"]), source_tokenizer)
    examples = distill_examples(stream, first, pieces, DistillSettings(**SETTINGS),
                                special_token_ids(extended_tokenizer).get("bos"))
    table = parts.input_embeddings[:first]
    with torch.no_grad():
        before = mismatch(model.base_model, table, start.embeddings[first:], examples, pieces)
        after = mismatch(model.base_model, table, tables.embeddings[first:], examples, pieces)
    assert after < before
    assert stats["distill_loss_end"] < stats["distill_loss_start"]
    assert stats["method"] == "distill" and stats["seconds"] > 0 and stats["distill_steps"] == SETTINGS["steps"]
    # The source model is left as it was: trainable, without gradients.
    assert all(param.requires_grad and param.grad is None for param in model.parameters())


def test_two_fits_give_the_same_rows_bit_for_bit(extension, decoder, fitted):
    assert torch.equal(run("distill", extension, decoder)[0].embeddings, fitted[0].embeddings)


class Killed(Exception):
    pass


def test_a_fit_killed_after_a_checkpoint_resumes_to_the_uninterrupted_rows(extension, decoder, fitted, tmp_path,
                                                                          monkeypatch):
    drawn, kill_at = [], [6]
    unpatched = distill.fitted_order

    def drawing(step, batch_size, count):
        drawn.append(step)
        if step in kill_at:
            raise Killed
        return unpatched(step, batch_size, count)

    monkeypatch.setattr(distill, "fitted_order", drawing)
    with pytest.raises(Killed):
        run("distill", extension, decoder, checkpoint_dir=tmp_path)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [4]
    drawn.clear()
    kill_at.clear()
    tables, stats = run("distill", extension, decoder, checkpoint_dir=tmp_path)
    assert drawn == [5, 6, 7, 8]  # from the checkpoint of step 4, step 5 again
    assert torch.equal(tables.embeddings, fitted[0].embeddings)
    assert stats["seconds"] > 0


def test_a_token_the_text_never_holds_keeps_its_subword_mean(extension, decoder, fitted):
    source_tokenizer, _, _, _ = extension
    first = len(source_tokenizer)
    stream = decoder[2]
    ids = np.asarray(stream.ids)
    absent = int(np.bincount(ids[ids >= first] - first).argmax())  # the most frequent: the fit reaches it
    sentences = [ids[stream.offsets[i]:stream.offsets[i + 1]] for i in range(stream.num_sentences)]
    kept = [sentence for sentence in sentences if first + absent not in sentence]
    without = TokenStream(np.concatenate(kept), np.cumsum([0, *map(len, kept)]), stream.vocab_size)
    tables, _ = run("distill", extension, decoder, text=without)
    start, _ = run("fvt", extension, decoder)
    assert torch.equal(tables.embeddings[first + absent], start.embeddings[first + absent])
    assert not torch.equal(fitted[0].embeddings[first + absent], start.embeddings[first + absent])


def test_the_init_rule_checkpoints_under_its_directory_and_removes_it(extension, decoder, fitted, tmp_path):
    from ramen.pipeline.initialise import initialise_foreign
    from ramen.vocab.encode import encode_corpus

    source_tokenizer, extended_tokenizer, _, root = extension
    model = decoder[0]
    source_dir = tmp_path / "source"
    shutil.copytree(root / "source", source_dir)
    model.save_pretrained(source_dir)
    text = tmp_path / "fr.txt"
    text.write_text("\n".join(french_lines(150, seed=1)) + "\n", encoding="utf-8")
    encode_corpus(extended_tokenizer, text, tmp_path / "encoded")
    checkpoints = tmp_path / "checkpoints" / "init" / "distill_fr"
    stats = initialise_foreign("distill", source_dir, root / "extended", {"foreign_encoded": tmp_path / "encoded"}, 0,
                               tmp_path / "init.safetensors", tmp_path / "init.json", settings=SETTINGS,
                               vocabulary="extend", checkpoint_dir=checkpoints)
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(tmp_path / "init.safetensors"))["embeddings"], fitted[0].embeddings)
    assert json.loads((tmp_path / "init.json").read_text())["seconds"] == stats["seconds"] > 0
    assert not checkpoints.exists() and (tmp_path / "checkpoints" / "init").exists()
