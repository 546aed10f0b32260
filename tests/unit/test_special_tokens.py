"""Special tokens are mapped by string, then role, for BERT WordPiece and RoBERTa byte-level BPE tokenizers."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers.implementations import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast

from ramen.initializers import get_entry
from ramen.alignment.monolingual import subword_tokenize, word_splitter
from ramen.vocab.tokenizer import ordered_vocab

TEXT = ["the cat sat on the mat", "le chat est sur le tapis", "dogs and cats play together"]


def bert_wordpiece() -> PreTrainedTokenizerFast:
    # Special tokens deliberately away from BERT's usual ids 0, 100-103.
    vocab = ["the", "cat", "##s", "[SEP]", "sat", "[PAD]", "on", "[CLS]", "mat", "[MASK]", "dog", "[UNK]"]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=backend, cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")


def roberta_byte_level() -> PreTrainedTokenizerFast:
    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(TEXT * 5, vocab_size=300, min_frequency=1,
                                special_tokens=["<pad>", "<s>", "<unk>", "</s>", "<mask>"])
    return PreTrainedTokenizerFast(tokenizer_object=backend._tokenizer, bos_token="<s>", eos_token="</s>",
                                   cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   mask_token="<mask>")


ROLES = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")


@pytest.mark.parametrize("source_kind, foreign_kind", [("bert", "roberta"), ("roberta", "bert"), ("roberta", "roberta")])
def test_special_rows_are_copied_by_role(source_kind, foreign_kind):
    build = {"bert": bert_wordpiece, "roberta": roberta_byte_level}
    source, foreign = build[source_kind](), build[foreign_kind]()
    source_vocab, foreign_vocab = ordered_vocab(source), ordered_vocab(foreign)
    embeddings = torch.randn(len(source_vocab), 8, generator=torch.Generator().manual_seed(0))
    bias = torch.arange(len(source_vocab), dtype=torch.float32)
    result = get_entry("random").load()(embeddings, bias, foreign_vocab, source_vocab,
                                        generator=torch.Generator().manual_seed(1),
                                        special_tokens=list(foreign.all_special_tokens))
    for role in ROLES:
        f = foreign_vocab.index(getattr(foreign, role))
        e = source_vocab.index(getattr(source, role))
        assert torch.equal(result.embeddings[f], embeddings[e]), role
        assert result.bias[f].item() == e and bool(result.supported[f])
    assert set(result.copied_special_tokens) == set(foreign.all_special_tokens)
    assert int(result.supported.sum()) == len(set(foreign.all_special_tokens))


def test_unmatched_special_tokens_stay_random():
    source, foreign = bert_wordpiece(), roberta_byte_level()
    source_vocab = [t for t in ordered_vocab(source) if t != "[MASK]"]
    embeddings, bias = torch.randn(len(source_vocab), 4), torch.zeros(len(source_vocab))
    foreign_vocab = ordered_vocab(foreign)
    result = get_entry("random").load()(embeddings, bias, foreign_vocab, source_vocab,
                                        generator=torch.Generator().manual_seed(0),
                                        special_tokens=list(foreign.all_special_tokens))
    assert "<mask>" not in result.copied_special_tokens
    assert not bool(result.supported[foreign_vocab.index("<mask>")])


def test_word_helpers_follow_each_tokenizer_kind():
    roberta, bert = roberta_byte_level(), bert_wordpiece()
    assert word_splitter(roberta)("the cat sat") == ["the", "cat", "sat"]
    assert subword_tokenize(roberta)("cat")[0].startswith("Ġ")  # as the word appears inside text
    assert word_splitter(bert)("the cats, sat") == ["the", "cats", ",", "sat"]
    assert subword_tokenize(bert)("cats") == ["cat", "##s"]


@pytest.mark.parametrize("style", ["llama2", "mistral", "gemma"])
def test_word_helpers_split_a_sentencepiece_tokenizer_s_text_into_words(tmp_path, style):
    """Its spaces are '▁' once normalised, so the words lie between them; a word inside text is
    segmented as it is there, after one '▁'."""
    from sp_source import build_sp_source_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_sp_source_dir(tmp_path, style))
    assert word_splitter(tokenizer)("the cat  sat on the mat") == ["the", "cat", "sat", "on", "the", "mat"]
    inside = tokenizer("a dog runs", add_special_tokens=False).tokens()
    assert subword_tokenize(tokenizer)("runs") == inside[-len(subword_tokenize(tokenizer)("runs")):]
    assert subword_tokenize(tokenizer)("runs")[0].startswith("▁")
