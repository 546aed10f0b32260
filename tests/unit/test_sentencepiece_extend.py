"""A SentencePiece-style BPE source (Llama-2, Mistral, Gemma, Phi-3 layouts) extended with Greek
tokens: the extended segmentation coarsens the source's, the English it keeps is untouched, Greek
gets far fewer tokens, characters the source spells as bytes become pieces whose rows start from
those bytes' rows, the chat is the source's, and what is not served is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ramen.data.checkpoint_headers import Checkpoint, check_extensible_tokenizer
from ramen.data.checkpoints import SourceLocation
from ramen.errors import ConfigError
from ramen.io import read_lines
from ramen.vocab.extend import NO_SLOW_MODEL, RECORD, extend_tokenizer
from ramen.vocab.tokenizer import load_tokenizer

from sp_source import PHI3_TEMPLATE, build_sp_source_dir, english_lines
from tiny_decoder import build_byte_tokenizer_dir

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo"
SETTING = "variants.el_ext.vocabulary"
LEARN = 500  # Greek FLORES lines learned on; the rest are held out
CONVERSATION = [{"role": "user", "content": "Two men are playing football in the park."},
                {"role": "assistant", "content": "A dog runs after the ball."},
                {"role": "user", "content": "What colour is the house?"}]


def lines(path: Path) -> list[str]:
    return [line for line in read_lines(path) if line.strip()]


def keep_text() -> dict[str, list[str]]:
    """The English an extension keeps: the demo's background text, captions and FLORES English."""
    return {"lee_background": lines(DEMO / "en" / "lee_background.txt"),
            "multi30k.train.en": lines(DEMO / "parallel" / "multi30k.train.en.gz")[:3000],
            "flores.train.en": lines(DEMO / "parallel" / "flores.train.en")}


def greek() -> list[str]:
    return lines(DEMO / "parallel" / "flores.train.el")


@pytest.fixture(scope="module")
def extension_of(tmp_path_factory):
    """The source of a layout and its extension, built once per layout for the module."""
    built = {}

    def build(style: str):
        if style not in built:
            root = tmp_path_factory.mktemp(f"sp_{style}")
            source_dir = build_sp_source_dir(root / "source", style, chat=style == "llama2")
            keep = [line for text in keep_text().values() for line in text]
            record = extend_tokenizer(source_dir, greek()[:LEARN], root / "out", new_tokens=400, keep=keep,
                                      setting=SETTING)
            built[style] = (style, source_dir, root / "out", record)
        return built[style]

    return build


@pytest.fixture(scope="module", params=["llama2", "mistral", "gemma"])
def extended(request, extension_of):
    return extension_of(request.param)


def bytes_per_token(tokenizer, texts: list[str]) -> float:
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    return sum(len(text.encode("utf-8")) for text in texts) / sum(len(row) for row in ids)


def piece_bytes(token: str) -> bytes:
    """The bytes a SentencePiece token stands for ('▁' a space, ``<0xCE>`` one byte)."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])
    return token.replace("▁", " ").encode("utf-8")


def boundaries(tokens: list[str]) -> list[int]:
    ends, position = [], 0
    for token in tokens:
        position += len(piece_bytes(token))
        ends.append(position)
    return ends


def test_every_english_line_it_keeps_encodes_exactly_as_the_source_encodes_it(extended):
    _, source_dir, out, record = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    for name, text in keep_text().items():
        before = source(text, verbose=False)["input_ids"]
        after = tokenizer(text, verbose=False)["input_ids"]
        changed = sum(a != b for a, b in zip(before, after))
        assert changed == 0, (name, changed)
    assert record["kept_word_types"] > 5000 and record["kind"] == "sentencepiece"


def test_the_extended_segmentation_coarsens_the_source_s(extended):
    """New merges rank after every source merge: each text's tokens are the source's, some
    neighbours joined; their bytes line up and every extended boundary is a source boundary."""
    _, source_dir, out, _ = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    texts = (greek()[LEARN:] + lines(DEMO / "parallel" / "multi30k.val.en.gz")[:200]
             + lines(DEMO / "parallel" / "multi30k.val.fr.gz")[:100]
             + ["Ελληνικά  με  δύο κενά", "  αρχή με κενά", "τέλος ", "ω", "", "χ2 and 北京 🙂"])
    joined = 0
    for text in texts:
        before = source.convert_ids_to_tokens(source(text, add_special_tokens=False)["input_ids"])
        after = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert b"".join(map(piece_bytes, after)) == b"".join(map(piece_bytes, before)), text
        assert set(boundaries(after)) <= set(boundaries(before)), text
        assert all("▁" not in token.lstrip("▁") for token in after), text  # no piece crosses a word
        joined += len(before) - len(after)
    assert joined > 0


def test_greek_gets_far_fewer_tokens_on_held_out_lines(extended):
    style, source_dir, out, _ = extended
    held_out = greek()[LEARN:]
    ratio = bytes_per_token(load_tokenizer(out), held_out) / bytes_per_token(load_tokenizer(source_dir), held_out)
    print(f"{style}: Greek held-out bytes/token ratio extended/source = {ratio:.2f}")
    assert ratio >= 1.5, ratio


def test_the_learner_counts_what_the_saved_tokenizer_produces(extended):
    """The learner segments words apart; the encoder runs on whole lines (Llama-2: no pre-tokenizer):
    no piece crosses a '▁' word start, so both count the same tokens."""
    _, source_dir, out, record = extended
    corpus = greek()[:LEARN]

    def tokens(directory):
        return sum(map(len, load_tokenizer(directory)(corpus, add_special_tokens=False, verbose=False)["input_ids"]))

    assert record["corpus_tokens_before"] == tokens(source_dir)
    assert record["corpus_tokens_after"] == tokens(out) < tokens(source_dir)


def test_every_string_decodes_back_exactly(extended):
    _, _, out, _ = extended
    tokenizer = load_tokenizer(out)
    for text in greek()[LEARN:LEARN + 50] + ["Ελληνικά  με  δύο κενά\n", "x", "北京 🙂 é"]:
        assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_characters_spelled_as_bytes_become_pieces_recorded_as_those_bytes(extended):
    _, source_dir, out, record = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    assert "α" not in source.get_vocab()
    assert source.tokenize("α") [-2:] == ["<0xCE>", "<0xB1>"]
    characters = {entry["token"]: entry for entry in record["tokens"] if not entry["merge"]}
    assert "α" in characters and record["new_characters"] == len(characters) > 20
    alpha = characters["α"]
    assert alpha["source_tokens"] == ["<0xCE>", "<0xB1>"]
    assert alpha["source_ids"] == source.convert_tokens_to_ids(["<0xCE>", "<0xB1>"])
    assert tokenizer.convert_tokens_to_ids("α") == alpha["id"]
    for entry in record["tokens"]:
        assert b"".join(map(piece_bytes, entry["source_tokens"])) == piece_bytes(entry["token"])
        assert source.convert_ids_to_tokens(entry["source_ids"]) == entry["source_tokens"]
        assert "".join(entry["merge"]) in ("", entry["token"])
        assert "▁" not in entry["token"].lstrip("▁")  # a piece never reaches across a word start
    merged = next(entry for entry in record["tokens"] if entry["merge"] and "α" in entry["token"])
    assert "<0xCE>" in merged["source_tokens"]  # a merge over a new character records its bytes


@pytest.mark.parametrize("method", ["fvt", "weighted_pieces"])
def test_initialisers_start_a_new_character_s_row_from_its_byte_pieces(extension_of, method):
    from ramen.initializers.extension import initialise_new_rows
    from ramen.initializers.pieces import toward_last
    from ramen.modeling.sources import causal_lm_parts

    from tiny_decoder import tiny_llama

    _, source_dir, out, record = extension_of("llama2")  # the layouts share the initialisers' road
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    model = tiny_llama(len(source), tie=False)
    parts = causal_lm_parts(model, source)
    tables, _ = initialise_new_rows(method, parts, source, tokenizer, record, seed=0)
    alpha = tokenizer.convert_tokens_to_ids("α")
    pieces = source.convert_tokens_to_ids(["<0xCE>", "<0xB1>"])
    rows = parts.input_embeddings[pieces].float()
    weights = torch.tensor(toward_last(2) if method == "weighted_pieces" else [0.5, 0.5], dtype=torch.float32)
    assert torch.allclose(tables.embeddings[alpha], weights @ rows, atol=1e-6)
    assert torch.equal(tables.embeddings[:len(source)], parts.input_embeddings[:len(source)].float())


def test_the_directory_has_no_slow_model_and_says_so(extended):
    """transformers 5 ignores use_fast=False (it always loads tokenizer.json): both encode alike. The
    source's tokenizer.model lacks the new pieces, so it is not exported, and tokenizer_config.json says why."""
    from transformers import AutoTokenizer

    _, source_dir, out, _ = extended
    assert (source_dir / "tokenizer.model").is_file() and not (out / "tokenizer.model").exists()
    assert "tokenizer.model is not written" in json.loads((out / "tokenizer_config.json").read_text())[NO_SLOW_MODEL]
    slow, fast = AutoTokenizer.from_pretrained(out, use_fast=False), AutoTokenizer.from_pretrained(out, use_fast=True)
    held_out = greek()[LEARN:LEARN + 100] + keep_text()["lee_background"][:20]
    assert slow(held_out)["input_ids"] == fast(held_out)["input_ids"] == load_tokenizer(out)(held_out)["input_ids"]
    assert len(slow) == len(fast) == len(load_tokenizer(out))


# Not the Gemma layout: it drops SentencePiece's dummy prefix on purpose.
@pytest.mark.parametrize("style", ["llama2", "mistral"])
def test_the_source_directory_is_a_faithful_sentencepiece_conversion(extension_of, style):
    import sentencepiece

    _, source_dir, _, _ = extension_of(style)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(source_dir / "tokenizer.model"))
    source = load_tokenizer(source_dir)
    texts = keep_text()["flores.train.en"][:100] + greek()[:20]
    assert [processor.encode(text) for text in texts] == source(texts, add_special_tokens=False)["input_ids"]


def test_source_ids_merges_special_tokens_and_chat_are_the_source_s(extended):
    style, source_dir, out, record = extended
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(out)
    source_vocab, vocab = source.get_vocab(), tokenizer.get_vocab()
    assert {token: vocab[token] for token in source_vocab} == source_vocab
    assert record["new_ids"] == list(range(len(source), len(source) + record["new_tokens"]))
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    source_spec = json.loads((source_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["added_tokens"] == source_spec["added_tokens"]
    assert spec["model"]["merges"][:len(source_spec["model"]["merges"])] == source_spec["model"]["merges"]
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert spec[key] == source_spec[key], key
    assert tokenizer.all_special_tokens == source.all_special_tokens
    assert tokenizer("The cat")["input_ids"] == source("The cat")["input_ids"]  # BOS as the source adds it
    if style == "llama2":  # Phi-3 style: chat markers after the vocabulary, and its template
        assert tokenizer.chat_template == source.chat_template == PHI3_TEMPLATE
        for kwargs in ({"tokenize": False}, {"tokenize": True}):
            assert (tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, **kwargs)
                    == source.apply_chat_template(CONVERSATION, add_generation_prompt=True, **kwargs))
        assert tokenizer.convert_tokens_to_ids("<|user|>") == source.convert_tokens_to_ids("<|user|>") == 800


def test_a_byte_level_chat_source_keeps_its_chat(tmp_path):
    source_dir = build_byte_tokenizer_dir(tmp_path / "source", lines=english_lines(500), vocab_size=500)
    extend_tokenizer(source_dir, greek()[:200], tmp_path / "out", new_tokens=50, keep=english_lines(500))
    source, tokenizer = load_tokenizer(source_dir), load_tokenizer(tmp_path / "out")
    assert tokenizer.chat_template == source.chat_template
    for kwargs in ({"tokenize": False}, {"tokenize": True}):
        assert tokenizer.apply_chat_template(CONVERSATION, **kwargs) == source.apply_chat_template(CONVERSATION,
                                                                                                   **kwargs)
    spec = json.loads((tmp_path / "out" / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["added_tokens"] == json.loads((source_dir / "tokenizer.json").read_text())["added_tokens"]


def _sp_spec(byte_fallback: bool = True) -> dict:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {"<unk>": 0, "▁": 1, "l": 2, "e": 3, "▁l": 4, **{f"<0x{b:02X}>": 5 + b for b in range(256)}}
    backend = Tokenizer(BPE(vocab, [("▁", "l")], byte_fallback=byte_fallback, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    return json.loads(backend.to_str())


def _checkpoint(tmp_path: Path, spec: dict | None = None, gguf: dict | None = None) -> Checkpoint:
    if spec is not None:
        (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return Checkpoint(SourceLocation(tmp_path, "m.gguf" if gguf else None), {}, tmp_path / "config.json", gguf)


@pytest.mark.parametrize("case, named", [
    ("unigram", "Unigram model, not BPE: a Unigram model chooses among segmentations by piece probabilities"),
    ("no_byte_fallback", "SentencePiece-style BPE without byte_fallback: a character outside its vocabulary "
                         "becomes its unknown token"),
    ("space_inside", "pieces with '▁' inside"),
])
def test_what_is_not_served_is_refused_by_name_in_the_extension_and_the_dry_run(tmp_path, case, named):
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    if case == "unigram":
        backend = Tokenizer(Unigram([("<unk>", 0.0), ("▁le", -1.0), ("s", -2.0)], unk_id=0))
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        spec = json.loads(backend.to_str())
    else:
        spec = _sp_spec(byte_fallback=case != "no_byte_fallback")
        if case == "space_inside":
            spec["model"]["vocab"]["l▁e"] = len(spec["model"]["vocab"])
    source = tmp_path / "source"
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec))).save_pretrained(source)
    with pytest.raises(ConfigError, match=named) as error:
        extend_tokenizer(source, ["le le le"] * 3, tmp_path / "out", new_tokens=5, setting=SETTING)
    assert error.value.setting == SETTING and "use 'replace' for this source" in str(error.value)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=named) as error:  # the dry run reads tokenizer.json alone
        check_extensible_tokenizer(_checkpoint(source), SETTING)
    assert error.value.setting == SETTING


def test_the_dry_run_accepts_what_is_served(tmp_path):
    for style in ("llama2", "mistral", "gemma"):
        check_extensible_tokenizer(_checkpoint(build_sp_source_dir(tmp_path / style, style)), SETTING)
    check_extensible_tokenizer(_checkpoint(build_byte_tokenizer_dir(tmp_path / "byte")), SETTING)
    pieces = [f"<0x{b:02X}>" for b in range(256)]
    for model, tokens in (("gpt2", ["a"]), ("llama", ["<unk>", "<s>", "</s>", *pieces, "▁a"])):
        check_extensible_tokenizer(_checkpoint(tmp_path, gguf={"tokenizer.ggml.model": model,
                                                               "tokenizer.ggml.tokens": tokens}), SETTING)


@pytest.mark.parametrize("model, tokens, named", [
    ("t5", ["<pad>", "▁a"], "'t5', not byte-level BPE \\('gpt2'\\) or SentencePiece BPE \\('llama'\\): a Unigram"),
    ("bert", ["[PAD]"], "'bert'"),
    ("llama", ["<unk>", "<s>", "</s>", "▁a"], "lacks byte pieces"),
])
def test_the_dry_run_refuses_gguf_tokenizers_it_does_not_serve(tmp_path, model, tokens, named):
    checkpoint = _checkpoint(tmp_path, gguf={"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": tokens})
    with pytest.raises(ConfigError, match=named) as error:
        check_extensible_tokenizer(checkpoint, SETTING)
    assert error.value.setting == SETTING and "tokenizer.ggml.model" in str(error.value)


def test_the_record_is_saved_beside_the_tokenizer(extended):
    _, _, out, record = extended
    assert json.loads((out / RECORD).read_text(encoding="utf-8")) == record


def test_a_gguf_sentencepiece_source_is_extended_through_transformers_converter(tmp_path, monkeypatch):
    """A GGUF whose tokenizer.ggml.model is 'llama' (SentencePiece, as llama.cpp writes Llama-2's) loads
    as a BPE with byte fallback; the dry run accepts it and the extension serves it."""
    import gguf

    from ramen.data.checkpoint_headers import read_checkpoint

    from tiny_decoder import tiny_llama, write_llama_gguf

    tokenizer = load_tokenizer(build_sp_source_dir(tmp_path / "dir", "mistral"))
    write_model = gguf.GGUFWriter.add_tokenizer_model
    monkeypatch.setattr(gguf.GGUFWriter, "add_tokenizer_model", lambda writer, model: write_model(writer, "llama"))
    package = tmp_path / "package"
    package.mkdir()
    write_llama_gguf(tiny_llama(len(tokenizer)), tokenizer, package / "tiny.Q-F32.gguf")
    checkpoint = read_checkpoint(package)
    assert checkpoint.gguf_metadata["tokenizer.ggml.model"] == "llama"
    check_extensible_tokenizer(checkpoint, SETTING)
    english = english_lines(1000)
    record = extend_tokenizer(package, greek()[:LEARN], tmp_path / "out", new_tokens=200, keep=english)
    source, extended = load_tokenizer(package), load_tokenizer(tmp_path / "out")
    assert json.loads(source.backend_tokenizer.to_str())["model"]["byte_fallback"] is True
    assert record["kind"] == "sentencepiece" and record["new_ids"][0] == len(source)
    assert extended(english)["input_ids"] == source(english)["input_ids"]
    held_out = greek()[LEARN:]
    assert bytes_per_token(extended, held_out) >= 1.5 * bytes_per_token(source, held_out)


def test_a_character_of_the_kept_english_stays_bytes(tmp_path):
    """The source spells α as bytes; English that holds α keeps those bytes, so α never becomes a piece."""
    source_dir = build_sp_source_dir(tmp_path / "source", "llama2")
    english = english_lines(500) + ["We write α and β in maths."]
    kept = extend_tokenizer(source_dir, greek()[:200], tmp_path / "kept", new_tokens=100, keep=english)
    free = extend_tokenizer(source_dir, greek()[:200], tmp_path / "free", new_tokens=100, keep=english[:-1])
    assert "α" in [entry["token"] for entry in free["tokens"]]
    assert not any(set("αβ") & set(entry["token"]) for entry in kept["tokens"])
    source = load_tokenizer(source_dir)
    assert load_tokenizer(tmp_path / "kept")(english)["input_ids"] == source(english)["input_ids"]
    assert load_tokenizer(tmp_path / "free")(english[-1])["input_ids"] != source(english[-1])["input_ids"]
