"""A decoder source's byte-level BPE extended with foreign tokens: exact round trip in every
script, the source's ids, merges, special tokens and chat template kept, shorter foreign text,
English nearly unchanged, the learner's counts equal to what the saved tokenizer produces."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from ramen.errors import ConfigError
from ramen.io import read_lines
from ramen.vocab.extend import RECORD, ContinuedBPE, extend_spec, extend_tokenizer
from ramen.vocab.tokenizer import load_tokenizer

from tiny_decoder import CHAT_TEMPLATE, ENGLISH, build_byte_tokenizer_dir

DATA = Path(__file__).resolve().parents[2] / "resources" / "demo" / "parallel"
SETTING = "variants.fr_ext.vocabulary"
SAMPLES = [
    "L'été dernier, nous sommes allés à la mer ; c'était « génial » ! Où est l'hôpital ?",
    "emoji 🙂🇫🇷 and a combining e\u0301 (not NFC) and a zero-width\u200bspace",
    "北京是中国的首都，人口超过两千万。",
    "Москва — столица России, и там очень холодно зимой.",
    "القاهرة هي عاصمة مصر وأكبر مدنها.",
    "दिल्ली भारत की राजधानी है और यह बहुत बड़ा शहर है।",
    "  two  spaces,\ttab,   three, and\n\nnewlines\r\n and a trailing one\n",
    "   ", "\n", "", "x",
]
# Llama 3's pre-tokenizer: its regex in a Split, then ByteLevel without its own regex.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def demo_lines(name: str, count: int) -> list[str]:
    return [line for line in read_lines(DATA / name) if line.strip()][:count]


def llama3_style_dir(path: Path, lines: list[str], vocab_size: int) -> Path:
    """A Llama-3-layout source: regex Split + ByteLevel, ignore_merges, special tokens after the
    merges (so their ids are the largest), a BOS template inside a processor Sequence."""
    from tokenizers import AddedToken, Regex, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(lines, BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos, eos = "<|begin_of_text|>", "<|eot_id|>"
    backend.add_special_tokens([AddedToken(bos, special=True), AddedToken(eos, special=True)])
    backend.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                      special_tokens=[(bos, backend.token_to_id(bos))])])
    spec = json.loads(backend.to_str())
    spec["model"]["ignore_merges"] = True
    wrapped = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token=bos,
                                      eos_token=eos, model_max_length=4096)
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=["gpt2", "llama3"])
def extended(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"extend_{request.param}")
    english = demo_lines("multi30k.train.en.gz", 3000)
    if request.param == "gpt2":
        source_dir = build_byte_tokenizer_dir(root / "source", lines=english, vocab_size=800)
    else:
        source_dir = llama3_style_dir(root / "source", english, 800)
    corpus = demo_lines("multi30k.train.fr.gz", 3000)
    record = extend_tokenizer(source_dir, corpus, root / "out", new_tokens=300, setting=SETTING)
    return source_dir, root / "out", record, corpus


def bytes_per_token(tokenizer, lines: list[str]) -> float:
    ids = tokenizer(lines, add_special_tokens=False, verbose=False)["input_ids"]
    return sum(len(line.encode("utf-8")) for line in lines) / sum(len(row) for row in ids)


def test_every_string_encodes_and_decodes_back_exactly(extended):
    _, out, _, _ = extended
    tokenizer = load_tokenizer(out)
    texts = SAMPLES + demo_lines("multi30k.val.fr.gz", 50) + demo_lines("multi30k.val.en.gz", 50)
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids


def test_source_ids_and_merges_are_kept_and_new_ids_follow_every_existing_id(extended):
    source_dir, out, record, _ = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    source_vocab, vocab = source.get_vocab(), tokenizer.get_vocab()
    assert {token: vocab[token] for token in source_vocab} == source_vocab
    new = {token: index for token, index in vocab.items() if token not in source_vocab}
    assert sorted(new.values()) == record["new_ids"] == list(range(len(source), len(source) + 300))
    assert record["new_tokens"] == 300 and len(tokenizer) == len(source) + 300
    # No string twice: as many ids as strings, and the model vocabulary holds no added token's string again.
    assert len(set(vocab.values())) == len(vocab) == len(tokenizer)
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    source_spec = json.loads((source_dir / "tokenizer.json").read_text(encoding="utf-8"))
    strings = list(spec["model"]["vocab"]) + [t["content"] for t in spec["added_tokens"]
                                             if t["content"] not in spec["model"]["vocab"]]
    assert len(strings) == len(set(strings)) == len(tokenizer)
    merges = spec["model"]["merges"]
    assert merges[:len(source_spec["model"]["merges"])] == source_spec["model"]["merges"]
    assert len(merges) == len(source_spec["model"]["merges"]) + record["appended_merges"]
    assert spec["added_tokens"] == source_spec["added_tokens"]


def test_the_record_maps_each_new_token_to_its_source_pieces(extended):
    source_dir, out, record, _ = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    assert json.loads((out / RECORD).read_text(encoding="utf-8")) == record
    for entry in record["tokens"]:
        assert tokenizer.convert_tokens_to_ids(entry["token"]) == entry["id"]
        assert "".join(entry["source_tokens"]) == "".join(entry["merge"]) == entry["token"]
        assert source.convert_ids_to_tokens(entry["source_ids"]) == entry["source_tokens"]
        assert len(entry["source_ids"]) >= 2 and entry["count"] >= 2


def test_the_learner_counts_what_the_saved_tokenizer_produces(extended):
    source_dir, out, record, corpus = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)

    def tokens(tok):
        return sum(len(row) for row in tok(corpus, add_special_tokens=False, verbose=False)["input_ids"])

    assert record["corpus_tokens_before"] == tokens(source)
    assert record["corpus_tokens_after"] == tokens(tokenizer) < tokens(source)


def test_special_tokens_template_and_chat_template_are_the_source_s(extended):
    source_dir, out, _, _ = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    for role in ("bos_token", "eos_token", "pad_token"):
        assert getattr(tokenizer, role) == getattr(source, role)
    assert tokenizer.all_special_tokens == source.all_special_tokens
    assert tokenizer.chat_template == source.chat_template == CHAT_TEMPLATE
    assert tokenizer.model_max_length == source.model_max_length
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Salut"}], tokenize=False)
    assert chat == source.apply_chat_template([{"role": "user", "content": "Salut"}], tokenize=False)
    # The source's BOS template, same id; English that no new merge touches gets the very same ids.
    assert tokenizer("The cat")["input_ids"] == source("The cat")["input_ids"]
    assert tokenizer("The cat")["input_ids"][0] == source.convert_tokens_to_ids(source.bos_token)
    marker = tokenizer.eos_token
    assert tokenizer(f"Le chat{marker}", add_special_tokens=False)["input_ids"][-1] == tokenizer.eos_token_id


def test_foreign_text_gets_fewer_tokens_and_english_nearly_the_same(extended):
    source_dir, out, _, _ = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    french, english = demo_lines("multi30k.val.fr.gz", 500), demo_lines("multi30k.val.en.gz", 500)
    french_ratio = bytes_per_token(tokenizer, french) / bytes_per_token(source, french)
    english_ratio = bytes_per_token(tokenizer, english) / bytes_per_token(source, english)
    assert french_ratio > 1.3, french_ratio
    # New merges rank after every source merge, so a word never gets more tokens; some English words
    # share a French merge (measured 1.019 here with this 800-entry source, 1.001 with 8,000 entries
    # and 2,000 new tokens in benchmarks/bench_vocab_extend.py).
    assert 1.0 <= english_ratio < 1.03, english_ratio


@pytest.mark.parametrize("layout", ["gpt2", "llama3"])
def test_english_it_was_given_to_keep_encodes_exactly_as_the_source_encodes_it(tmp_path, layout):
    english = demo_lines("multi30k.train.en.gz", 3000)
    build = build_byte_tokenizer_dir if layout == "gpt2" else llama3_style_dir
    source_dir = (build(tmp_path / "source", lines=english, vocab_size=800) if layout == "gpt2"
                  else build(tmp_path / "source", english, 800))
    french = demo_lines("multi30k.train.fr.gz", 3000)
    free = extend_tokenizer(source_dir, french, tmp_path / "free", new_tokens=300)
    kept = extend_tokenizer(source_dir, french, tmp_path / "kept", new_tokens=300, keep=english, keep_lines=2000)
    source = load_tokenizer(source_dir)

    def ids(directory, lines):
        return load_tokenizer(directory)(lines, add_special_tokens=False, verbose=False)["input_ids"]

    kept_lines, later_lines = english[:2000], english[2000:]
    assert ids(tmp_path / "kept", kept_lines) == ids(source_dir, kept_lines)
    # Without the English text, French merges fire on some of those lines: the check above can fail.
    assert ids(tmp_path / "free", kept_lines) != ids(source_dir, kept_lines)
    assert kept["kept_word_types"] > 1000 and kept["blocked_pairs"] > 1000 and free["blocked_pairs"] == 0
    none_read = extend_tokenizer(source_dir, french, tmp_path / "none", new_tokens=300, keep=english, keep_lines=0)
    assert none_read["kept_word_types"] == 0 and none_read["tokens"] == free["tokens"]
    # English lines past keep_lines were not read: new merges may touch them, but fewer than without keep.
    changed = [sum(a != b for a, b in zip(ids(directory, later_lines), ids(source_dir, later_lines)))
               for directory in (tmp_path / "kept", tmp_path / "free")]
    assert changed[0] < changed[1], changed
    assert kept["new_tokens"] == 300
    assert bytes_per_token(load_tokenizer(tmp_path / "kept"), french) > 1.3 * bytes_per_token(source, french)


def test_a_merge_to_a_string_the_source_has_adds_no_entry_but_its_merge():
    """'abc' is in the source vocabulary but its merge path (ab + c) never fires once (b, c) has
    merged first: the learned merge (a, bc) reaches the existing entry instead of a second one."""
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: index for index, char in enumerate(sorted(alphabet))}
    for token in ("bc", "ab", "abc"):
        vocab[token] = len(vocab)
    backend = Tokenizer(BPE(vocab=vocab, merges=[("b", "c"), ("a", "b"), ("ab", "c")]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    spec = json.loads(backend.to_str())
    assert [token.value for token in backend.model.tokenize("abc")] == ["a", "bc"]
    extended, new, summary = extend_spec(spec, ["abc abcd abc"] * 5, new_tokens=1, min_frequency=2)
    assert summary["merges_to_existing_tokens"] == 1 and summary["appended_merges"] == 2
    assert extended["model"]["merges"][3] == ["a", "bc"]
    assert [token.token for token in new] == ["Ġabc"] and new[0].source_tokens == ("Ġ", "abc")
    tokenizer = Tokenizer.from_str(json.dumps(extended))
    assert tokenizer.encode("abc").ids == [vocab["abc"]]
    assert tokenizer.encode(" abc").ids == [new[0].id]


def test_a_pair_that_would_form_an_added_token_is_never_learned():
    learner = ContinuedBPE(collections.Counter({"ab": 9, "cd": 3}), _CharModel(), {}, set("abcd"),
                           forbidden={"ab"}, ignore_merges=False)
    assert learner.best(2) == (("c", "d"), 3)


class _CharModel:
    """A model that segments a word into its characters, as the bytes before any merge."""

    class _Token:
        def __init__(self, value):
            self.value = value

    def tokenize(self, word):
        return [self._Token(char) for char in word]


@pytest.mark.parametrize("kind, named", [("wordpiece", "WordPiece"), ("unigram", "Unigram"),
                                         ("sentencepiece_bpe", "SentencePiece-style BPE without byte_fallback"),
                                         ("whitespace_bpe", "Whitespace")])
def test_a_source_that_is_not_byte_level_bpe_is_refused_by_name(tmp_path, kind, named):
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE, Unigram, WordPiece
    from transformers import PreTrainedTokenizerFast

    if kind == "wordpiece":
        backend = Tokenizer(WordPiece({"[UNK]": 0, "le": 1, "##s": 2}, unk_token="[UNK]"))
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    elif kind == "unigram":
        backend = Tokenizer(Unigram([("<unk>", 0.0), ("▁le", -1.0), ("s", -2.0)], unk_id=0))
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.decoder = decoders.Metaspace()
    elif kind == "sentencepiece_bpe":  # served with byte fallback (test_sentencepiece_extend.py), not without
        backend = Tokenizer(BPE({"<unk>": 0, "▁": 1, "l": 2, "e": 3, "<0x41>": 4}, [], byte_fallback=False,
                                unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
    else:
        backend = Tokenizer(BPE({"l": 0, "e": 1, "le": 2}, [("l", "e")]))
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend).save_pretrained(tmp_path / "source")
    with pytest.raises(ConfigError, match=named) as error:
        extend_tokenizer(tmp_path / "source", ["le chat"], tmp_path / "out", new_tokens=5, setting=SETTING)
    assert SETTING in str(error.value) and "byte-level BPE" in str(error.value)
    assert error.value.setting == SETTING
    assert not (tmp_path / "out").exists()


def test_a_byte_level_bpe_missing_byte_symbols_is_extended_and_records_them():
    """Real byte-level sources lack some byte symbols (SmolLM2: 21): the extension keeps the source's
    coverage and says which bytes neither encodes."""
    from tokenizers import pre_tokenizers
    from tokenizers.models import BPE

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    kept = sorted(char for char in alphabet if char not in ("\u0100", "ÿ"))  # byte 0x00 and byte 0xff
    vocab = {char: index for index, char in enumerate(kept)}
    backend = Tokenizer(BPE(vocab, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    extended, new, summary = extend_spec(json.loads(backend.to_str()), ["abab abab"] * 5, new_tokens=2, setting=SETTING)
    assert summary["source_missing_bytes"] == ["0x00", "0xff"]
    assert [token.token for token in new][:1] == ["ab"]


@pytest.mark.parametrize("lines, options, setting, problem", [
    (["le chat le chien"] * 3, {"min_frequency": 1000}, "bpe.extension_min_count",
     "the most frequent pair of tokens in the foreign text occurs 6 times, fewer than 1000 (lower "
     "bpe.extension_min_count to at most 6"),
    (["le chat le chien"] * 3, {"min_frequency": 1, "keep": ["le chat le chien"]}, "bpe.extension_keep_source_lines",
     "every pair of tokens in the foreign text is also a pair within a word of the English text"),
    (["ball", "Two"], {"min_frequency": 1}, SETTING, "the source already encodes every word of the foreign text"),
])
def test_an_extension_that_would_add_no_token_names_what_bounds_it(lines, options, setting, problem):
    """It saved the source's tokenizer as the extended one, and the source was trained and exported."""
    with pytest.raises(ConfigError) as error:
        extend_spec(_byte_level_spec(), lines, new_tokens=5, setting=SETTING, **options)
    assert error.value.setting == setting
    assert "the extension would add no token" in str(error.value) and problem in str(error.value), str(error.value)


@pytest.mark.parametrize("merges, problem", [
    ({"a b": 0}, "not a list"),
    (["a b c"], r"merges\[0\]"),
    ([["a", "b"], "b c"], r"merges\[1\]"),
    ([["a", "b", "c"]], r"merges\[0\]"),
    (["a b", ["b", "c"]], r"merges\[1\]"),
])
def test_merges_of_an_unexpected_shape_are_refused(merges, problem):
    source_dir_spec = _byte_level_spec()
    source_dir_spec["model"]["merges"] = merges
    with pytest.raises(ConfigError, match=problem) as error:
        extend_spec(source_dir_spec, ["le chat"], new_tokens=1, setting=SETTING)
    assert error.value.setting == SETTING


def test_merges_stored_as_strings_stay_strings():
    spec = _byte_level_spec()
    spec["model"]["merges"] = [" ".join(pair) for pair in spec["model"]["merges"]]
    extended, new, _ = extend_spec(spec, ["le chat le chien le chat"] * 3, new_tokens=2)
    appended = extended["model"]["merges"][len(spec["model"]["merges"]):]
    assert appended and all(isinstance(merge, str) and len(merge.split(" ")) == 2 for merge in appended)
    tokenizer = Tokenizer.from_str(json.dumps(extended))
    assert tokenizer.decode(tokenizer.encode(" chat le chien").ids) == " chat le chien"
    assert len(new) == 2


def test_the_output_directory_is_replaced_whole(tmp_path):
    source_dir = build_byte_tokenizer_dir(tmp_path / "source")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("old")
    extend_tokenizer(source_dir, ["le chat et le chien"] * 4, tmp_path / "out", new_tokens=3)
    names = {path.name for path in (tmp_path / "out").iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", RECORD} <= names and "stale.txt" not in names
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def _byte_level_spec() -> dict:
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(ENGLISH, BpeTrainer(vocab_size=300, show_progress=False,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return json.loads(backend.to_str())


@pytest.mark.slow
def test_it_loads_with_auto_tokenizer_where_ramen_is_not_importable(extended, tmp_path):
    _, out, _, _ = extended
    tokenizer = load_tokenizer(out)
    text = "L'été dernier, 🙂 北京 — Москва.\n"
    expected = tokenizer(text)["input_ids"]
    # Every directory that holds a ramen package goes (this checkout's and an editable install's).
    script = textwrap.dedent(f"""
        import importlib.util, json, sys
        from pathlib import Path
        sys.path = [p for p in sys.path if not (Path(p or ".") / "ramen" / "__init__.py").exists()]
        sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
        if importlib.util.find_spec("ramen") is not None:
            raise SystemExit("ramen is importable")
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(out)!r})
        ids = tokenizer({text!r})["input_ids"]
        print(json.dumps({{"ids": ids, "text": tokenizer.decode(ids, skip_special_tokens=True),
                          "size": len(tokenizer), "chat": tokenizer.chat_template}}))
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", "-c", script], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {"ids": expected, "text": text, "size": len(tokenizer), "chat": CHAT_TEMPLATE}


def test_a_gguf_source_is_extended_like_a_directory(tmp_path):
    """The decoder demo's source is a GGUF file: its tokenizer, converted on loading, is extended the same way."""
    from conftest import french_lines
    from test_causal import byte_level_tokenizer, tiny_causal_lm, write_llama_gguf

    tokenizer = byte_level_tokenizer(300)
    package = tmp_path / "package"
    package.mkdir()
    write_llama_gguf(tiny_causal_lm("llama-tied", len(tokenizer)), tokenizer, package / "tiny.Q-F32.gguf")
    record = extend_tokenizer(package, french_lines(300), tmp_path / "out", new_tokens=50)
    source, extended = load_tokenizer(package), load_tokenizer(tmp_path / "out")
    assert record["new_ids"] == list(range(len(source), len(source) + 50)) and len(extended) == len(source) + 50
    assert extended.bos_token == source.bos_token == "<s>"
    assert extended("le chat")["input_ids"][:1] == source("le chat")["input_ids"][:1]  # BOS or not, as the source
    for text in SAMPLES:
        assert extended.decode(extended(text, add_special_tokens=False)["input_ids"]) == text
