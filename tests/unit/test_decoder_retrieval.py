"""Retrieval from a decoder's hidden states: the causal-LM directory's transformer stack, mean-pooled."""

from __future__ import annotations

import json

import torch

from ramen.tasks.retrieval import RetrievalSettings, embed, evaluate_retrieval

from tiny_decoder import ENGLISH, build_tiny_decoder_dir


def test_decoder_sentences_embed_alike_alone_and_padded_in_a_batch(tmp_path):
    model_dir = build_tiny_decoder_dir(tmp_path / "decoder", tie=False)
    # As many decoder tokenizers ship: no pad token, left padding.
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("pad_token", None)
    config["padding_side"] = "left"
    config_path.write_text(json.dumps(config))
    settings = RetrievalSettings(batch_size=8)
    batch = embed(model_dir, ENGLISH, settings)
    assert batch.shape[0] == len(ENGLISH)
    torch.testing.assert_close(batch.norm(dim=1), torch.ones(len(ENGLISH)))
    for i, sentence in enumerate(ENGLISH):
        torch.testing.assert_close(embed(model_dir, [sentence], settings)[0], batch[i], rtol=1e-4, atol=1e-5)
    result = evaluate_retrieval(model_dir, model_dir, ENGLISH, ENGLISH, settings)
    assert result["source_to_target"] == result["target_to_source"] == 1.0


def test_sentences_batched_by_length_come_back_in_input_order(tmp_path):
    model_dir = build_tiny_decoder_dir(tmp_path / "decoder", tie=True)
    # Longest first, two per batch: batching by length reorders every pair.
    sentences = sorted(set(ENGLISH), key=len, reverse=True)
    settings = RetrievalSettings(batch_size=2)
    vectors = embed(model_dir, sentences, settings)
    for i, sentence in enumerate(sentences):
        torch.testing.assert_close(embed(model_dir, [sentence], settings)[0], vectors[i], rtol=1e-4, atol=1e-5)
