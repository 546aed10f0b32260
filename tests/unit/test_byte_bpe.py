"""Byte-level BPE for decoder sources: exact round trip in many scripts, the source's special
tokens, template and chat template kept, a standard tokenizer directory."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from ramen.errors import ConfigError
from ramen.initializers.common import is_byte_level
from ramen.io import write_lines
from ramen.vocab.byte_bpe import check_round_trip, train_byte_bpe

from conftest import french_lines
from tiny_decoder import CHAT_TEMPLATE, SPECIALS, build_byte_tokenizer_dir

# Hand-written, none of them in the training text except French-like lines; scripts the
# vocabulary never saw must still round-trip byte for byte.
SAMPLES = [
    "Москва — столица России, и там очень холодно зимой.",
    "القاهرة هي عاصمة مصر وأكبر مدنها.",
    "北京是中国的首都，人口超过两千万。",
    "दिल्ली भारत की राजधानी है और यह बहुत बड़ा शहर है।",
    "Hà Nội là thủ đô của Việt Nam, nằm bên bờ sông Hồng.",
    "L'été dernier, nous sommes allés à la mer ; c'était « génial » !",
    "  two  spaces,\ttab and a trailing newline\n",
    "emoji 🙂 and a combining e\u0301 (not NFC) and a zero-width\u200bspace",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("byte_bpe")
    source = build_byte_tokenizer_dir(root / "source")
    corpus = root / "fr.txt"
    write_lines(corpus, french_lines(400))
    stats = train_byte_bpe(corpus, source, root / "tokenizer", vocab_size=500, min_frequency=2)
    return source, root / "tokenizer", stats


def test_every_sample_decodes_to_itself(trained):
    _, out, _ = trained
    assert check_round_trip(out, SAMPLES + french_lines(20, seed=9)) == []
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in tokenizer(SAMPLES[2])["input_ids"]


def test_size_is_the_setting_and_merges_fit_the_foreign_text(trained):
    source_dir, out, stats = trained
    tokenizer = AutoTokenizer.from_pretrained(out)
    source = AutoTokenizer.from_pretrained(source_dir)
    assert len(tokenizer) == stats["vocab_size"] == 500
    assert is_byte_level(list(tokenizer.get_vocab()))
    text = " ".join(french_lines(30, seed=3))
    # Learned on French, it needs fewer tokens for French than the English source does.
    assert len(tokenizer(text)["input_ids"]) < len(source(text)["input_ids"])


def test_special_tokens_template_and_chat_template_come_from_the_source(trained):
    source_dir, out, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(out)
    source = AutoTokenizer.from_pretrained(source_dir)
    for role in ("bos_token", "eos_token", "pad_token"):
        assert getattr(tokenizer, role) == getattr(source, role)
    assert tokenizer.convert_ids_to_tokens(list(range(len(SPECIALS)))) == SPECIALS
    assert tokenizer.all_special_tokens == source.all_special_tokens
    assert [t.content for t in tokenizer.added_tokens_decoder.values() if t.special] == SPECIALS
    # The source prepends BOS; so does the new tokenizer, with the new id of the same string.
    ids = tokenizer("Bonjour")["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids(source.bos_token)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Bonjour"
    assert tokenizer.chat_template == source.chat_template == CHAT_TEMPLATE
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Salut"}], tokenize=False)
    assert chat == "<|im_start|>user\nSalut<|im_end|>\n"
    # A chat marker in text is one token, never split into bytes.
    marked = tokenizer("<|im_start|>user", add_special_tokens=False)["input_ids"]
    assert marked[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert json.loads((out / "tokenizer_config.json").read_text())  # a standard directory


def test_too_small_a_size_is_refused_before_training(tmp_path, trained):
    source_dir, _, _ = trained
    corpus = tmp_path / "fr.txt"
    write_lines(corpus, french_lines(10))
    with pytest.raises(ConfigError, match="vocab_size"):
        train_byte_bpe(corpus, source_dir, tmp_path / "out", vocab_size=200)
    assert not (tmp_path / "out").exists()


def test_a_llama3_style_template_in_a_processor_sequence_is_remapped(tmp_path):
    """Llama 3 and Qwen put their special tokens after the merges (Llama 3's BOS is 128000) and wrap
    the BOS template in a Sequence with a ByteLevel processor; the new vocabulary has them first."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(french_lines(100), BpeTrainer(vocab_size=300, show_progress=False,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = "<|begin_of_text|>"
    backend.add_special_tokens([AddedToken(bos, special=True), AddedToken("<|eot_id|>", special=True)])
    old_id = backend.token_to_id(bos)
    backend.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, old_id)])])
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token="<|eot_id|>").save_pretrained(
        tmp_path / "source")
    corpus = tmp_path / "fr.txt"
    write_lines(corpus, french_lines(200))
    train_byte_bpe(corpus, tmp_path / "source", tmp_path / "out", vocab_size=400)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    new_id = tokenizer.convert_tokens_to_ids(bos)
    assert new_id != old_id
    ids = tokenizer("Le chat")["input_ids"]
    assert ids[0] == new_id and tokenizer.decode(ids[1:]) == "Le chat"
