"""A SentencePiece-style decoder source (Mistral's tokenizer layout and a tiny Mistral; Gemma's and a
tiny tied Gemma; Llama-2's with Phi-3's chat markers and a tiny Phi-3) through the decoder workflow's stages with ``vocabulary: extend``, by the functions its
rules call: extend_vocabulary, encode_monolingual and encode_parallel, translation_probabilities
(alpha from links written here instead of an aligner's), focus_fasttext, init_foreign with every
extension initialiser that needs no outside data, train_bilingual (a few updates and the export),
language_modeling and its summary. Characters the source spells as byte pieces become tokens whose
rows start from those bytes' rows; the exported side loads without a tokenizer.model; Greek takes
fewer tokens per line and English as many as the source's. Then the token-string conventions that
matching across vocabularies reads: a SentencePiece vocabulary is never taken for a byte-level one
(Gemma's may hold every byte-level character), and in it only '▁' marks a word start."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ramen.alignment.parallel import count_links, save_alpha, translation_probabilities
from ramen.alignment.vectors import FastTextSettings, train_token_fasttext
from ramen.initializers import names_for
from ramen.initializers.common import is_byte_level, is_sentencepiece, normalise_tokens
from ramen.initializers.overlap import shared_tokens
from ramen.io import read_lines
from ramen.pipeline.initialise import initialise_foreign
from ramen.pipeline.train import train_bilingual
from ramen.pipeline.vocabulary import extend_foreign_vocabulary
from ramen.reports.language_modeling import initialiser_rows, summary_rows
from ramen.tasks.language_modeling import LanguageModelSettings, evaluate_sides, write_bits_per_byte
from ramen.training.trainer import TrainSettings
from ramen.vocab.encode import encode_corpus, write_id_lines
from ramen.vocab.extend import NO_SLOW_MODEL, RECORD
from ramen.vocab.tokenizer import load_tokenizer

from sp_source import build_sp_source_dir, english_lines
from tiny_decoder import tiny_family

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo"
# Extension initialisers that need no outside data (wechsel and monolingual need published
# fastText models or vectors, char2subword a trained module).
OUTSIDE_DATA = {"wechsel", "monolingual", "char2subword"}
DISTILL = dict(contexts_per_token=2, context_tokens=8, following_tokens=2, steps=6, batch_size=8, lr=1e-2,
               checkpoint_every=3)
LM = LanguageModelSettings(max_length=64, stride=32, batch_size=8, max_new_tokens=4, speed_prompts=2,
                           speed_repeats=1)


def greek() -> list[str]:
    return [line for line in read_lines(DEMO / "parallel" / "flores.train.el") if line.strip()]


def english_flores() -> list[str]:
    return [line for line in read_lines(DEMO / "parallel" / "flores.train.en") if line.strip()]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def proportional_links(foreign_ids: Path, english_ids: Path, out: Path) -> Path:
    """Each foreign position linked to the English position at the same relative place: alignments
    as an aligner writes them, without running one."""
    rows = []
    for f_line, e_line in zip(foreign_ids.read_text().splitlines(), english_ids.read_text().splitlines()):
        f, e = len(f_line.split()), len(e_line.split())
        rows.append(" ".join(f"{i}-{i * e // f}" for i in range(f)) if f and e else "")
    return write(out, rows)


@pytest.fixture(scope="module", params=[("mistral", "mistral"), ("gemma", "gemma"), ("llama2", "phi3")],
                ids=["mistral", "gemma", "phi3-chat"])
def stages(request, tmp_path_factory):
    """The source directory, its tokenizer extended on Greek, both texts in the extended ids, the
    parallel text's alpha and FOCUS's token vectors: every input init_foreign reads. Phi-3's chat
    markers are added tokens after the vocabulary, so the new ids follow them."""
    style, family = request.param
    root = tmp_path_factory.mktemp(f"sp_pipeline_{family}")
    source = build_sp_source_dir(root / "source", style, chat=family == "phi3")
    first = len(load_tokenizer(source))
    tiny_family(family, first, hidden=16).save_pretrained(source)
    el, en = write(root / "el.txt", greek()[:300]), write(root / "en.txt", english_lines(400))
    summary = extend_foreign_vocabulary(el, source, root / "extended", new_tokens=60, min_frequency=2,
                                        source_text=en, keep_lines=10_000)
    extended = load_tokenizer(root / "extended")
    for lang, text in (("en", en), ("el", el)):
        encode_corpus(extended, text, root / f"encoded_{lang}")
    # encode_parallel: English in the source's ids, Greek in the extended ones
    pair_en, pair_el = write(root / "pair.en", english_flores()[:300]), write(root / "pair.el", greek()[:300])
    write_id_lines(load_tokenizer(source), pair_en, root / "ids.en")
    write_id_lines(extended, pair_el, root / "ids.el")
    forward = proportional_links(root / "ids.el", root / "ids.en", root / "links.forward")
    counts = count_links(root / "ids.el", root / "ids.en", (forward, forward), len(extended), first)
    save_alpha(root / "alpha.npz", translation_probabilities(counts))
    train_token_fasttext(el, extended, root / "token_fasttext.vec",
                         FastTextSettings(dim=8, epoch=1, min_count=2, bucket=2000, minn=2, maxn=3))
    record = json.loads((root / "extended" / RECORD).read_text(encoding="utf-8"))
    return {"root": root, "style": style, "source": source, "first": first, "summary": summary,
            "record": record, "extended": extended}


def inputs_of(method: str, root: Path) -> tuple[dict, dict]:
    """(rule inputs, settings) of init_foreign for ``method``."""
    files = {"parallel": {"parallel_alpha": root / "alpha.npz"}, "parallel_fvt": {"parallel_alpha": root / "alpha.npz"},
             "focus": {"token_vectors": root / "token_fasttext.vec"},
             "distill": {"foreign_encoded": root / "encoded_el"}}
    return files.get(method, {}), DISTILL if method == "distill" else {}


@pytest.fixture(scope="module")
def initialised(stages):
    root, out = stages["root"], {}
    for method in names_for("extend"):
        if method in OUTSIDE_DATA:
            continue
        files, settings = inputs_of(method, root)
        stats = initialise_foreign(method, stages["source"], root / "extended", files, 0,
                                   root / f"init_{method}.safetensors", root / f"init_{method}.json",
                                   settings=settings, vocabulary="extend", checkpoint_dir=root / "checkpoints")
        out[method] = (stats, load_file(str(root / f"init_{method}.safetensors")))
    return out


def test_the_extension_adds_greek_characters_and_merges_after_the_source_s(stages):
    summary, record = stages["summary"], stages["record"]
    assert summary["kind"] == "sentencepiece" and summary["new_tokens"] == 60
    characters = [entry for entry in record["tokens"] if not entry["merge"]]
    assert characters and summary["appended_merges"] > 0
    for entry in characters:  # a character's pieces are its UTF-8 bytes as byte-fallback pieces
        assert entry["source_tokens"] == [f"<0x{byte:02X}>" for byte in entry["token"].encode("utf-8")]
    assert record["new_ids"] == list(range(stages["first"], stages["first"] + 60))


def test_every_extension_initialiser_keeps_the_source_rows_and_fills_the_new_ones(stages, initialised):
    from transformers import AutoModelForCausalLM

    first, total = stages["first"], stages["first"] + 60
    source = AutoModelForCausalLM.from_pretrained(stages["source"])
    table = source.get_input_embeddings().weight.detach()
    assert set(initialised) >= {"mean", "random", "overlap", "focus", "parallel", "fvt", "weighted_pieces",
                                "parallel_fvt", "distill"}
    for method, (stats, tensors) in initialised.items():
        assert tensors["embeddings"].shape == (total, table.shape[1]), method
        assert torch.equal(tensors["embeddings"][:first], table[:first]), method
        assert torch.isfinite(tensors["embeddings"]).all(), method
        assert stats["new_rows"] == 60 and stats["vocabulary"] == "extend", method
        if not source.config.tie_word_embeddings:
            assert torch.equal(tensors["output"][:first], source.get_output_embeddings().weight.detach()), method
    # the parallel text's alignments reach the new tokens
    assert initialised["parallel"][0]["aligned_rows"] > 30


def test_a_new_character_starts_from_the_rows_of_its_byte_pieces(stages, initialised):
    """fvt: the mean of the byte pieces' rows; distill fits from there and lowers the mismatch."""
    first, record = stages["first"], stages["record"]
    tensors = initialised["fvt"][1]
    table = tensors["embeddings"][:first]
    for offset, entry in enumerate(record["tokens"]):
        torch.testing.assert_close(tensors["embeddings"][first + offset], table[entry["source_ids"]].mean(0))
    stats = initialised["distill"][0]
    assert stats["distill_tokens"] > 30 and stats["distill_loss_end"] < stats["distill_loss_start"]


@pytest.fixture(scope="module")
def trained(stages):
    """A few updates of the new rows from fvt's start, both sides exported."""
    root = stages["root"]
    settings = TrainSettings(steps=3, batch_size=4, seq_len=32, peak_lr=1e-2, init_lr=1e-3, warmup_steps=1,
                             log_every=1, checkpoint_every=2, stages=[{"train": ["foreign_embeddings"]}])
    out = root / "trained"
    train_bilingual(stages["source"], {"el": {"init": root / "init_fvt.safetensors", "tokenizer": root / "extended"}},
                    {"en": root / "encoded_en", "el": root / "encoded_el"}, settings,
                    {"en": str(out / "en"), "el": str(out / "el")}, out / "checkpoints", out / "metrics.csv",
                    objective={"name": "clm"}, vocabulary="extend")
    return out


def test_the_exported_side_is_the_extended_model_without_a_tokenizer_model(stages, trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    side = trained / "el"
    assert not (side / "tokenizer.model").exists()
    assert NO_SLOW_MODEL in json.loads((side / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(side)
    model = AutoModelForCausalLM.from_pretrained(side)
    assert len(tokenizer) == model.get_input_embeddings().weight.shape[0] == stages["first"] + 60
    line = greek()[400]
    ids = tokenizer(line, add_special_tokens=False)["input_ids"]
    assert max(ids) >= stages["first"] and tokenizer.decode(ids) == line


def test_bits_per_byte_and_tokens_per_line_of_the_source_and_the_extended_model(stages, trained):
    root = stages["root"]
    held_el, held_en = write(root / "test.el", greek()[400:440]), write(root / "test.en", english_flores()[400:440])
    texts = {"el": [held_el], "en": [held_en]}
    prompts = {"el": [greek()[450][:20]], "en": ["The cat"]}
    rows, files = {}, []
    for variant, english, foreign in (("source", stages["source"], stages["source"]),
                                      ("fvt-ext", trained / "en", trained / "el")):
        scores, continuations, _ = evaluate_sides(english, foreign, texts, prompts, LM, variant=variant,
                                                  source_lang="en")
        rows[variant] = {row["lang"]: row for row in scores}
        assert all(math.isfinite(row["bits_per_byte"]) and row["bits_per_byte"] > 0 for row in scores)
        assert len(continuations) == 2
        files.append(root / f"{variant}_el.tsv")
        write_bits_per_byte(files[-1], scores)
    source, extended = rows["source"], rows["fvt-ext"]
    assert extended["el"]["bytes"] == source["el"]["bytes"]  # the same text, counted alike
    assert extended["el"]["tokens_per_line"] < 0.7 * source["el"]["tokens_per_line"]
    assert extended["en"]["tokens"] == source["en"]["tokens"]  # English encodes as the source encodes it
    summary = summary_rows({"source": {"init": "none", "updates": None, "source": True},
                            "fvt-ext": {"init": "fvt", "updates": 3, "vocabulary": "extend", "output_init": "input"}},
                           "en", bits_per_byte=files, texts={"el": "test.el", "en": "test.en"})
    choice = initialiser_rows(summary)
    assert [row["init"] for row in choice] == ["fvt"]
    assert choice[0]["tokens_per_line"] == extended["el"]["tokens_per_line"]
    assert choice[0]["bits_per_byte"] == pytest.approx(extended["el"]["bits_per_byte"] / source["el"]["bits_per_byte"])


def gemma_like_vocab() -> list[str]:
    """A SentencePiece vocabulary (byte pieces, '▁' words) that holds every character of the
    byte-level alphabet as a piece, as Gemma's 256k pieces may, and Latin-1 words."""
    from ramen.data.checkpoint_headers import BYTE_CHARACTERS, BYTE_PIECES

    pieces = ["<unk>", "<s>", "</s>", *BYTE_PIECES, "▁the", "été", "abra", "Ġabra", "##"]
    return pieces + [char for char in BYTE_CHARACTERS if char not in pieces]


def test_a_sentencepiece_vocabulary_holding_every_byte_level_character_is_not_byte_level():
    vocab = gemma_like_vocab()
    assert is_sentencepiece(vocab) and not is_byte_level(vocab)
    bare = dict(zip(vocab, normalise_tokens(vocab)))
    assert bare["été"] == "été" and bare["é"] == "é"  # characters, not bytes
    # overlap: a new token spelled like a source token without its leading '▁' starts from its row
    assert shared_tokens(["▁été"], vocab, ["<unk>", "<s>", "</s>"]) == [(0, vocab.index("été"))]


def test_in_a_sentencepiece_vocabulary_only_the_space_marks_a_word():
    vocab = gemma_like_vocab()
    bare = dict(zip(vocab, normalise_tokens(vocab)))
    assert bare["Ġabra"] == "Ġabra" and bare["##"] == "##" and bare["▁the"] == "the"
    # Maltese 'Ġabra' is its own word: a new '▁Ġabra' matches it, not 'abra'
    assert shared_tokens(["▁Ġabra"], vocab, ["<unk>", "<s>", "</s>"]) == [(0, vocab.index("Ġabra"))]
    # a byte-level vocabulary still reads 'Ġ' as its space
    from ramen.data.checkpoint_headers import BYTE_CHARACTERS

    byte_vocab = [*BYTE_CHARACTERS, "Ġabra", "abra"]
    assert is_byte_level(byte_vocab) and normalise_tokens(byte_vocab)[-2] == "abra"
    assert not is_sentencepiece(byte_vocab)


class Writes(torch.nn.Module):
    """A causal LM stand-in whose greedy decoding writes ``ids`` after any prompt."""

    def __init__(self, ids: list[int]):
        super().__init__()
        self.ids = ids
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids, max_new_tokens, **_):
        return torch.cat([input_ids, torch.tensor([self.ids[:max_new_tokens]])], dim=1)


@pytest.mark.parametrize("style", ["llama2", "mistral"])
def test_the_text_a_sentencepiece_model_writes_keeps_its_leading_space(style, tmp_path):
    """Llama-2's and Mistral's decoders strip the space of a text's first piece: the continuation
    and the bytes a generation speed counts are what the new tokens add after the prompt."""
    from ramen.tasks.language_modeling import decoding_speed, generate_continuations

    tokenizer = load_tokenizer(build_sp_source_dir(tmp_path / style, style))
    ids = tokenizer("sits on the mat", add_special_tokens=False)["input_ids"]
    model = Writes(ids)
    assert generate_continuations(model, tokenizer, ["The cat"], max_new_tokens=len(ids)) == [" sits on the mat"]
    speed = decoding_speed(model, tokenizer, ["The cat", "Two dogs"], new_tokens=len(ids))
    assert speed["bytes"] == 2 * len(" sits on the mat")
