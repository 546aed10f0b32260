"""A local mirror of every host config/paper.yaml downloads from, for config/rehearsal.yaml.

    python tests/rehearsal/mirror.py build DIR            # small archives, built from bundled data
    python tests/rehearsal/mirror.py serve DIR --port 8719  # http://127.0.0.1:8719/<host>/<path>

A URL ``https://<host>/<path>`` of the paper config is served at
``http://127.0.0.1:<port>/<host>/<path>``, in the real source's format: MediaWiki XML dumps
(``.xml.bz2``), OPUS Moses zips with their member names, the XNLI 1.0 and MultiNLI 1.0 zips with
their members and columns, the UD v2.4 ``.tgz`` with its member paths, fastText ``.vec`` text files
LASER's Tatoeba files, SIB-200's annotated TSV files and the FLORES-200 ``.tar.gz`` with its member
paths. The same server answers the Hugging Face hub routes ``snapshot_download`` uses (set
``HF_ENDPOINT=http://127.0.0.1:<port>``) for a tiny cased BERT masked LM under the id of
``bert-base-cased``, a tiny multilingual one under the id of ``bert-base-multilingual-cased`` (both
for config/rehearsal.yaml) and, for config/rehearsal-decoder.yaml, a tiny Llama-layout causal LM
with an untied output layer under the id of ``Qwen/Qwen2.5-0.5B`` (whose real output layer is tied:
the untied one is the harder case, its rows initialised by the same mixture as the input table).

The rehearsal's languages are English, French (Latin script) and Russian (Cyrillic). English and
French text comes from resources/demo (Wikipedia sample pages, Multi30k, Sequoia, XNLI, SICK, UD,
Tatoeba; licences in resources/demo/SOURCES.md). Russian text is generated here from a small
hand-written English-Russian grammar (subject, verb, adjective, object, place), with its UD trees;
it is grammatical but says nothing. Where a real file is not bundled (the GSD train split, the EWT
test split) sentences of another split of the same bundled treebank stand in, disjoint from the
ones served as its dev and test files.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import html
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import tarfile
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "resources" / "demo"
# The Hugging Face models the paper config names, as the mirror's hub serves them.
SOURCE_MODEL_ID = "google-bert/bert-base-cased"
MULTILINGUAL_MODEL_ID = "google-bert/bert-base-multilingual-cased"
DECODER_MODEL_ID = "Qwen/Qwen2.5-0.5B"
HUB_COMMIT = "5e1ea25e1ea25e1ea25e1ea25e1ea25e1ea25e1e"
HUB_DIR = "hub"  # models under DIR/hub/<model id>/, apart from the mirrored hosts

# Sizes of everything served (small: the rehearsal runs in CI on two cores).
SIZES = {
    "wiki_real_pages": 3,  # English pages of the bundled dump
    "wiki_sentences": {"en": 900, "fr": 900, "ru": 900},
    "parallel_pairs": 400,
    "xnli": {"dev": 30, "test": 45},
    "multinli_train": 240,
    "ud": {"train": 60, "dev": 20, "test": 30},
    "sib200": {"train": 120, "dev": 30, "test": 40},
    "tatoeba": 40,
    "decoder_vocab": 1000,  # byte-level BPE entries of the served causal LM
}

# --- Russian: a hand-written English-Russian grammar ---------------------------------------------

SUBJECTS = [  # English, Russian (nominative), UPOS
    ("The boy", "Мальчик", "NOUN"), ("The girl", "Девочка", "NOUN"), ("The teacher", "Учитель", "NOUN"),
    ("The doctor", "Врач", "NOUN"), ("The student", "Студентка", "NOUN"), ("Grandmother", "Бабушка", "NOUN"),
    ("Grandfather", "Дедушка", "NOUN"), ("The neighbour", "Сосед", "NOUN"), ("Anna", "Анна", "PROPN"),
    ("Ivan", "Иван", "PROPN"), ("Mother", "Мама", "NOUN"),
]
VERBS = [  # English 3rd person singular, the same in Russian
    ("reads", "читает"), ("sees", "видит"), ("buys", "покупает"), ("draws", "рисует"), ("finds", "находит"),
    ("takes", "берёт"), ("sells", "продаёт"), ("opens", "открывает"), ("washes", "моет"), ("loves", "любит"),
    ("carries", "несёт"), ("wants", "хочет"),
]
NEGATED = {"reads": "read", "sees": "see", "buys": "buy", "draws": "draw", "finds": "find", "takes": "take",
           "sells": "sell", "opens": "open", "washes": "wash", "loves": "love", "carries": "carry", "wants": "want"}
OBJECTS = [  # English, Russian (accusative), gender; brand names are written in Latin script in Russian too
    ("book", "книгу", "f"), ("letter", "письмо", "n"), ("house", "дом", "m"), ("car", "машину", "f"),
    ("apple", "яблоко", "n"), ("newspaper", "газету", "f"), ("table", "стол", "m"), ("flower", "цветок", "m"),
    ("picture", "картину", "f"), ("window", "окно", "n"), ("bag", "сумку", "f"), ("chair", "стул", "m"),
    ("iPhone", "iPhone", "m"), ("iPad", "iPad", "m"), ("MacBook", "MacBook", "m"), ("Kindle", "Kindle", "m"),
    ("Xbox", "Xbox", "m"), ("PlayStation", "PlayStation", "f"),
]
ADJECTIVES = [  # English, Russian accusative masculine (inanimate), feminine, neuter
    ("new", "новый", "новую", "новое"), ("old", "старый", "старую", "старое"),
    ("red", "красный", "красную", "красное"), ("big", "большой", "большую", "большое"),
    ("small", "маленький", "маленькую", "маленькое"), ("white", "белый", "белую", "белое"),
    ("beautiful", "красивый", "красивую", "красивое"),
]
PLACES = [  # English, Russian tokens as (form, UPOS, relation); a preposition depends on the next token
    ("in the park", [("в", "ADP", "case"), ("парке", "NOUN", "obl")]),
    ("in the city", [("в", "ADP", "case"), ("городе", "NOUN", "obl")]),
    ("at school", [("в", "ADP", "case"), ("школе", "NOUN", "obl")]),
    ("in the garden", [("в", "ADP", "case"), ("саду", "NOUN", "obl")]),
    ("on the street", [("на", "ADP", "case"), ("улице", "NOUN", "obl")]),
    ("in Moscow", [("в", "ADP", "case"), ("Москве", "PROPN", "obl")]),
    ("in London", [("в", "ADP", "case"), ("Лондоне", "PROPN", "obl")]),
    ("at home", [("дома", "ADV", "advmod")]),
    ("today", [("сегодня", "ADV", "advmod")]),
    ("in the morning", [("утром", "NOUN", "obl")]),
    ("in the evening", [("вечером", "NOUN", "obl")]),
]
# Word-level translations, so that the served Russian vectors are a rotation of the English ones.
RU_TO_EN = {
    **{ru: en.split()[-1] for en, ru, _ in SUBJECTS}, **{ru: en for en, ru in VERBS},
    **{ru: en for en, ru, _ in OBJECTS}, **{form: en for en, *forms in ADJECTIVES for form in forms},
    **{tokens[-1][0]: en.split()[-1] for en, tokens in PLACES}, "не": "not", "и": "and",
}


class RussianClause:
    """One clause of the grammar: its English sentence, Russian tokens and their UD analysis."""

    def __init__(self, rng: random.Random):
        self.subject = rng.choice(SUBJECTS)
        self.verb = rng.choice(VERBS)
        self.object = rng.choice(OBJECTS)
        self.adjective = rng.choice(ADJECTIVES)
        self.place = rng.choice(PLACES)

    def english(self, adjective=True, place=True, negated=False) -> str:
        verb = f"does not {NEGATED[self.verb[0]]}" if negated else self.verb[0]
        noun = f"{self.adjective[0]} {self.object[0]}" if adjective else self.object[0]
        article = "an" if noun[0] in "aeiou" else "a"
        return " ".join([self.subject[0], verb, article, noun] + ([self.place[0]] if place else [])) + "."

    def russian_tokens(self, adjective=True, place=True, negated=False) -> list[tuple[str, str, str, int | None]]:
        """(form, UPOS, relation, head) with heads 1-based within the clause; None: the clause root."""
        gender = {"m": 1, "f": 2, "n": 3}[self.object[2]]
        tokens = [(self.subject[1], self.subject[2], "nsubj", "verb")]
        if negated:
            tokens.append(("не", "PART", "advmod", "verb"))
        tokens.append((self.verb[1], "VERB", "root", None))
        if adjective:
            tokens.append((self.adjective[gender], "ADJ", "amod", "object"))
        tokens.append((self.object[1], "PROPN" if self.object[1].isascii() else "NOUN", "obj", "verb"))
        if place:
            for index, (form, upos, relation) in enumerate(self.place[1]):
                head = "next" if upos == "ADP" else "verb"
                tokens.append((form, upos, relation, head))
        positions = {"verb": next(i for i, t in enumerate(tokens) if t[2] == "root") + 1,
                     "object": next(i for i, t in enumerate(tokens) if t[2] == "obj") + 1}
        return [(form, upos, relation, None if head is None else (i + 2 if head == "next" else positions[head]))
                for i, (form, upos, relation, head) in enumerate(tokens)]

    def russian(self, **kwargs) -> str:
        return " ".join(form for form, *_ in self.russian_tokens(**kwargs)) + "."


def russian_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        clause = RussianClause(rng)
        pairs.append((clause.english(), clause.russian()))
    return pairs


def russian_conllu(count: int, seed: int, split: str) -> str:
    """Russian UD sentences of the grammar, in the CoNLL-U layout of UD v2.4 (SynTagRus's file names)."""
    rng = random.Random(seed)
    blocks = []
    for number in range(1, count + 1):
        clause = RussianClause(rng)
        tokens = clause.russian_tokens()
        root = next(i for i, t in enumerate(tokens) if t[3] is None) + 1
        lines = [f"# sent_id = rehearsal-{split}-{number:04d}", f"# text = {clause.russian()}"]
        for i, (form, upos, relation, head) in enumerate(tokens, start=1):
            misc = "SpaceAfter=No" if i == len(tokens) else "_"
            lines.append(f"{i}\t{form}\t_\t{upos}\t_\t_\t{0 if head is None else head}\t{relation}\t_\t{misc}")
        lines.append(f"{len(tokens) + 1}\t.\t.\tPUNCT\t_\t_\t{root}\tpunct\t_\t_")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


def russian_nli(count: int, seed: int) -> list[tuple[str, str, str, str, str]]:
    """(English premise, English hypothesis, Russian premise, Russian hypothesis, label)."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        clause = RussianClause(rng)
        label = ("entailment", "neutral", "contradiction")[index % 3]
        premise = dict(adjective=True, place=label != "neutral")
        hypothesis = {"entailment": dict(adjective=False, place=False), "neutral": dict(adjective=True, place=True),
                      "contradiction": dict(adjective=False, place=False, negated=True)}[label]
        rows.append((clause.english(**premise), clause.english(**hypothesis),
                     clause.russian(**premise), clause.russian(**hypothesis), label))
    return rows


# --- bundled English and French --------------------------------------------------------------------


def demo_lines(name: str, start: int, count: int) -> list[str]:
    path = DEMO / name
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    return lines[start:start + count]


def demo_conllu(name: str, start: int, count: int) -> str:
    with gzip.open(DEMO / "ud" / name, "rt", encoding="utf-8") as handle:
        blocks = [block for block in handle.read().split("\n\n") if block.strip()]
    return "\n\n".join(blocks[start:start + count]) + "\n\n"


def demo_nli(name: str, start: int, count: int) -> list[dict]:
    lines = demo_lines(f"nli/{name}", 0, 10**9)
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1 + start:1 + start + count]]


# --- the served formats ----------------------------------------------------------------------------

SITEINFO = """  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>{lang}wiki</dbname>
    <base>https://{lang}.wikipedia.org/wiki/</base>
    <generator>MediaWiki 1.33.0-wmf.25</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
MEDIAWIKI_OPEN = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" '
                  'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
                  'xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.10/ '
                  'http://www.mediawiki.org/xml/export-0.10.xsd" version="0.10" xml:lang="{lang}">\n')


def dump_page(title: str, page_id: int, paragraphs: list[str]) -> str:
    text = html.escape("\n\n".join(paragraphs), quote=False)
    return (f"  <page>\n    <title>{html.escape(title)}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n"
            f"    <revision>\n      <id>{page_id + 100000}</id>\n      <timestamp>2019-06-01T00:00:00Z</timestamp>\n"
            f"      <contributor>\n        <username>Rehearsal</username>\n        <id>1</id>\n      </contributor>\n"
            f"      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
            f'      <text xml:space="preserve">{text}</text>\n'
            f"      <sha1>{hashlib.sha1(text.encode()).hexdigest()[:31]}</sha1>\n    </revision>\n  </page>\n")


def wikipedia_dump(lang: str, sentences: list[str], real_pages: str = "") -> bytes:
    """A pages-articles dump: the export-0.10 schema, ``sentences`` as articles of 10 sentences
    in paragraphs of 5, after ``real_pages`` (page elements of a real dump, as they are)."""
    pages = []
    for number, start in enumerate(range(0, len(sentences), 10)):
        chunk = sentences[start:start + 10]
        pages.append(dump_page(f"Rehearsal {number + 1}", 900000 + number,
                               [" ".join(chunk[:5]), " ".join(chunk[5:])]))
    xml = MEDIAWIKI_OPEN.format(lang=lang) + SITEINFO.format(lang=lang) + real_pages + "".join(pages) + "</mediawiki>\n"
    return bz2.compress(xml.encode("utf-8"))


def real_english_pages(count: int) -> str:
    """The first ``count`` article pages (no redirects) of the bundled English dump, verbatim."""
    xml = bz2.decompress((DEMO / "en" / "enwiki-sample.xml.bz2").read_bytes()).decode("utf-8")
    pages = re.findall(r"  <page>\n.*?\n  </page>\n", xml, flags=re.DOTALL)
    return "".join([page for page in pages if "<redirect" not in page][:count])


def binary_parse(sentence: str) -> str:
    words = sentence.replace("(", "-LRB-").replace(")", "-RRB-").split()
    tree = words[-1]
    for word in reversed(words[:-1]):
        tree = f"( {word} {tree} )"
    return tree


def nli_release_row(columns: list[str], values: dict) -> str:
    premise, hypothesis = values["sentence1"], values["sentence2"]
    derived = {"sentence1_binary_parse": binary_parse(premise), "sentence2_binary_parse": binary_parse(hypothesis),
               "sentence1_parse": f"(ROOT (S {binary_parse(premise)}))",
               "sentence2_parse": f"(ROOT (S {binary_parse(hypothesis)}))",
               "sentence1_tokenized": " ".join(premise.split()), "sentence2_tokenized": " ".join(hypothesis.split()),
               "label1": values["gold_label"], "match": "True"}
    return "\t".join(str({**derived, **values}.get(column, "")) for column in columns) + "\n"


XNLI_COLUMNS = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
                "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID", "genre", "label1", "label2",
                "label3", "label4", "label5", "sentence1_tokenized", "sentence2_tokenized", "match"]
MULTINLI_COLUMNS = ["gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
                    "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID", "genre", "label1"]


def xnli_release(russian: dict[str, list]) -> bytes:
    """XNLI-1.0.zip: XNLI-1.0/xnli.{dev,test}.tsv with every language in one file, plus the .jsonl."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for split, count in SIZES["xnli"].items():
            rows = []
            english, french = demo_nli(f"xnli.{split}.en.tsv", 0, count), demo_nli(f"xnli.{split}.fr.tsv", 0, count)
            for index in range(count):
                pair = {"promptID": str(10000 + index), "pairID": f"{10000 + index}e", "genre": english[index]["genre"]}
                for lang, row in (("en", english[index]), ("fr", french[index])):
                    rows.append({"language": lang, "gold_label": row["label"], "sentence1": row["premise"],
                                 "sentence2": row["hypothesis"], **pair})
            for index, (_, _, premise, hypothesis, label) in enumerate(russian[split]):
                rows.append({"language": "ru", "gold_label": label, "sentence1": premise, "sentence2": hypothesis,
                             "promptID": str(20000 + index), "pairID": f"{20000 + index}r", "genre": "fiction"})
            text = "\t".join(XNLI_COLUMNS) + "\n" + "".join(nli_release_row(XNLI_COLUMNS, row) for row in rows)
            bundle.writestr(f"XNLI-1.0/xnli.{split}.tsv", text)
            bundle.writestr(f"XNLI-1.0/xnli.{split}.jsonl", "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        bundle.writestr("XNLI-1.0/README.md", "XNLI 1.0 (rehearsal mirror): a few pairs per language.\n")
    return buffer.getvalue()


def multinli_release() -> bytes:
    """multinli_1.0.zip: multinli_1.0/multinli_1.0_{train,dev_matched}.txt (English pairs of SICK's TRAIN split)."""
    lines = demo_lines("nli/SICK.txt", 0, 10**9)
    header = lines[0].split("\t")
    sick = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    train = [row for row in sick if row["SemEval_set"] == "TRAIN"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, rows in (("train", train[:SIZES["multinli_train"]]), ("dev_matched", train[-20:])):
            body = "".join(nli_release_row(MULTINLI_COLUMNS, {
                "gold_label": row["entailment_label"].lower(), "sentence1": row["sentence_A"],
                "sentence2": row["sentence_B"], "promptID": row["pair_ID"], "pairID": f"{row['pair_ID']}n",
                "genre": "fiction"}) for row in rows)
            bundle.writestr(f"multinli_1.0/multinli_1.0_{name}.txt", "\t".join(MULTINLI_COLUMNS) + "\n" + body)
        bundle.writestr("multinli_1.0/README.txt", "MultiNLI 1.0 (rehearsal mirror).\n")
    return buffer.getvalue()


def moses_zip(corpus: str, pair: str, sides: dict[str, list[str]]) -> bytes:
    """An OPUS Moses zip: <corpus>.<pair>.<lang> per side, README and LICENSE."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for lang, lines in sides.items():
            bundle.writestr(f"{corpus}.{pair}.{lang}", "\n".join(lines) + "\n")
        bundle.writestr("README", f"{corpus} {pair} (rehearsal mirror)\n")
        bundle.writestr("LICENSE", "See the licences of the bundled sources (resources/demo/SOURCES.md).\n")
    return buffer.getvalue()


def ud_archive(treebanks: dict[str, dict[str, str]]) -> bytes:
    """ud-treebanks-v2.4.tgz: ud-treebanks-v2.4/UD_<Name>/<code>-ud-<split>.conllu."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for member, text in sorted((f"ud-treebanks-v2.4/{directory}/{name}", text)
                                   for directory, files in treebanks.items() for name, text in files.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 1557000000, 0o644
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def word_vectors(lines: list[str], concept, dim: int, seed: int) -> str:
    """A fastText .vec file ('<count> <dim>' then '<word> <values>') for every token of ``lines``.

    A word's vector is drawn from a generator seeded by ``concept(word)``, rotated by a random
    orthogonal matrix per language, plus noise: translations get related vectors, as real ones do."""
    import numpy as np

    counts: dict[str, int] = {}
    for line in lines:
        for word in TOKEN.findall(line):
            counts[word] = counts.get(word, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    rows = []
    for word in words:
        digest = int.from_bytes(hashlib.sha256(concept(word).encode()).digest()[:8], "little")
        vector = np.random.default_rng(digest).standard_normal(dim) @ rotation + 0.1 * rng.standard_normal(dim)
        rows.append(word + " " + " ".join(f"{value:.4f}" for value in vector))
    return f"{len(words)} {dim}\n" + "\n".join(rows) + "\n"


def train_wordpiece(lines: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from tokenizers.trainers import WordPieceTrainer

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend = Tokenizer(WordPiece(unk_token="[UNK]"))
    # Cased, as bert-base-cased and bert-base-multilingual-cased: no lowercasing, accents kept.
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=False, lowercase=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(lines, WordPieceTrainer(vocab_size=vocab_size, special_tokens=special,
                                                        continuing_subword_prefix="##"))
    ids = {token: backend.token_to_id(token) for token in special}
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    backend.decoder = decoders.WordPiece()
    return backend


def tiny_bert(lines: list[str], vocab_size: int, out: Path, seed: int) -> Path:
    """A 2-layer BertForMaskedLM (MLM head included) and its cased WordPiece tokenizer, as a hub
    snapshot holds them: config.json, model.safetensors, tokenizer.json, tokenizer_config.json, vocab.txt."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    backend = train_wordpiece(lines, vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=512, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    config = BertConfig(vocab_size=backend.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512,
                        pad_token_id=backend.token_to_id("[PAD]"))
    torch.manual_seed(seed)
    model = BertForMaskedLM(config)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    vocab = sorted(backend.get_vocab().items(), key=lambda item: item[1])
    (out / "vocab.txt").write_text("".join(token + "\n" for token, _ in vocab), encoding="utf-8")
    return out


def flores_archive(devtest: dict[str, list[str]]) -> bytes:
    """flores200_dataset.tar.gz: flores200_dataset/devtest/<code>.devtest (one sentence a line, the
    same sentences in every language), with the release's README. Only devtest is served: it is the
    split the decoder config reads."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        members = {"flores200_dataset/README": "FLORES-200 (rehearsal mirror): SIB-200's test sentences.\n",
                   **{f"flores200_dataset/devtest/{code}.devtest": "\n".join(lines) + "\n"
                      for code, lines in devtest.items()}}
        for member, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 1657000000, 0o644
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tiny_causal_lm(lines: list[str], vocab_size: int, out: Path, seed: int) -> Path:
    """A 2-layer LlamaForCausalLM with an untied output layer (tie_word_embeddings false) and a
    byte-level BPE tokenizer learned from ``lines``, with the chat markers and a chat template, as a hub
    snapshot holds them (config.json, generation_config.json, model.safetensors, tokenizer files).
    Like Qwen2.5's tokenizer it prepends no BOS."""
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_decoder import build_byte_tokenizer_dir, tiny_llama
    from transformers import AutoTokenizer

    build_byte_tokenizer_dir(out, lines, vocab_size=vocab_size, bos=False)
    tiny_llama(len(AutoTokenizer.from_pretrained(out)), tie=False, seed=seed).save_pretrained(out)
    return out


def build(root: Path) -> None:
    """Write the mirror under ``root`` (which must not exist yet), atomically."""
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    def put(url_path: str, data: bytes | str) -> None:
        path = tmp / url_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    n_pairs = SIZES["parallel_pairs"]
    # Russian: separate draws (seeds) for each use, as the real sources are separate texts.
    ru_parallel = russian_pairs(n_pairs, seed=1)
    ru_mono = [ru for _, ru in russian_pairs(SIZES["wiki_sentences"]["ru"], seed=2)]
    en_mono_grammar = [en for en, _ in russian_pairs(SIZES["wiki_sentences"]["en"] // 2, seed=3)]
    ru_tatoeba = russian_pairs(SIZES["tatoeba"], seed=4)
    ru_xnli = {split: russian_nli(count, seed=5 + i) for i, (split, count) in enumerate(SIZES["xnli"].items())}

    en_parallel = demo_lines("parallel/multi30k.train.en.gz", 0, n_pairs)
    fr_parallel = demo_lines("parallel/multi30k.train.fr.gz", 0, n_pairs)
    en_mono = demo_lines("parallel/multi30k.train.en.gz", n_pairs, SIZES["wiki_sentences"]["en"] // 2) + en_mono_grammar
    fr_mono = (demo_lines("parallel/multi30k.train.fr.gz", n_pairs, SIZES["wiki_sentences"]["fr"] // 2)
               + demo_lines("fr/sequoia.train.txt", 0, SIZES["wiki_sentences"]["fr"] // 2))

    wiki = "dumps.wikimedia.org/{0}wiki/latest/{0}wiki-latest-pages-articles.xml.bz2"
    real_pages = real_english_pages(SIZES["wiki_real_pages"])
    put(wiki.format("en"), wikipedia_dump("en", en_mono, real_pages))
    put(wiki.format("fr"), wikipedia_dump("fr", fr_mono))
    put(wiki.format("ru"), wikipedia_dump("ru", ru_mono))

    put("object.pouta.csc.fi/OPUS-UNPC/v1.0/moses/en-fr.txt.zip",
        moses_zip("UNPC", "en-fr", {"en": en_parallel, "fr": fr_parallel}))
    put("object.pouta.csc.fi/OPUS-UNPC/v1.0/moses/en-ru.txt.zip",
        moses_zip("UNPC", "en-ru", {"en": [en for en, _ in ru_parallel], "ru": [ru for _, ru in ru_parallel]}))

    english_text = re.sub(r"<[^>]+>|\[\[|\]\]|\{\{|\}\}|'''?|==+", " ", html.unescape(real_pages)).splitlines()
    vectors = "dl.fbaipublicfiles.com/fasttext/vectors-wiki/wiki.{}.vec"
    put(vectors.format("en"), word_vectors(english_text + en_mono + en_parallel, str.lower, dim=24, seed=10))
    put(vectors.format("fr"), word_vectors(fr_mono + fr_parallel, str.lower, dim=24, seed=11))
    put(vectors.format("ru"), word_vectors(ru_mono + [ru for _, ru in ru_parallel],
                                           lambda word: RU_TO_EN.get(word, word).lower(), dim=24, seed=12))

    put("dl.fbaipublicfiles.com/XNLI/XNLI-1.0.zip", xnli_release(ru_xnli))
    put("cims.nyu.edu/~sbowman/multinli/multinli_1.0.zip", multinli_release())

    ud = SIZES["ud"]
    put("lindat.mff.cuni.cz/repository/xmlui/bitstream/handle/11234/1-2988/ud-treebanks-v2.4.tgz", ud_archive({
        "UD_English-EWT": {
            "en_ewt-ud-train.conllu": demo_conllu("en_ewt-ud-train.first2000.conllu.gz", 0, ud["train"]),
            "en_ewt-ud-dev.conllu": demo_conllu("en_ewt-ud-dev.first500.conllu.gz", 0, ud["dev"]),
            # EWT's test split is not bundled: later dev sentences stand in.
            "en_ewt-ud-test.conllu": demo_conllu("en_ewt-ud-dev.first500.conllu.gz", 200, ud["test"]),
        },
        "UD_French-GSD": {
            # GSD's train split is not bundled: later dev sentences stand in.
            "fr_gsd-ud-train.conllu": demo_conllu("fr_gsd-ud-dev.first400.conllu.gz", 200, ud["train"]),
            "fr_gsd-ud-dev.conllu": demo_conllu("fr_gsd-ud-dev.first400.conllu.gz", 0, ud["dev"]),
            "fr_gsd-ud-test.conllu": demo_conllu("fr_gsd-ud-test.conllu.gz", 0, ud["test"]),
        },
        "UD_Russian-SynTagRus": {
            f"ru_syntagrus-ud-{split}.conllu": russian_conllu(count, seed=20 + i, split=split)
            for i, (split, count) in enumerate(ud.items())
        },
    }))

    tatoeba = "raw.githubusercontent.com/facebookresearch/LASER/main/data/tatoeba/v1/tatoeba.{}-eng.{}"
    put(tatoeba.format("fra", "eng"), "\n".join(demo_lines("parallel/tatoeba.fra-eng.en", 0, SIZES["tatoeba"])) + "\n")
    put(tatoeba.format("fra", "fra"), "\n".join(demo_lines("parallel/tatoeba.fra-eng.fr", 0, SIZES["tatoeba"])) + "\n")
    put(tatoeba.format("rus", "eng"), "\n".join(en for en, _ in ru_tatoeba) + "\n")
    put(tatoeba.format("rus", "rus"), "\n".join(ru for _, ru in ru_tatoeba) + "\n")

    # SIB-200: the first rows of the bundled English and French files (a header line first); Russian
    # sentences stand in for the Russian test set, with the English test rows' ids and topics.
    sib = "raw.githubusercontent.com/dadelani/sib-200/593cea88519930f776c1a4a1980b6a35b39dca57/data/annotated/{}/{}.tsv"
    for split, count in SIZES["sib200"].items():
        put(sib.format("eng_Latn", split), "\n".join(demo_lines(f"sib200/eng_Latn.{split}.tsv", 0, count + 1)) + "\n")
    test = SIZES["sib200"]["test"]
    put(sib.format("fra_Latn", "test"), "\n".join(demo_lines("sib200/fra_Latn.test.tsv", 0, test + 1)) + "\n")
    english_test = demo_lines("sib200/eng_Latn.test.tsv", 0, test + 1)
    russian = [ru for _, ru in russian_pairs(test, seed=30)]
    put(sib.format("rus_Cyrl", "test"), "\n".join([english_test[0], *(
        "\t".join([*row.split("\t")[:2], ru]) for row, ru in zip(english_test[1:], russian))]) + "\n")

    # FLORES-200 devtest: SIB-200's sentences are FLORES sentences, so its test rows stand in (the
    # same rows in every language, as FLORES is parallel).
    put("dl.fbaipublicfiles.com/nllb/flores200_dataset.tar.gz", flores_archive({
        "eng_Latn": [row.split("\t")[2] for row in english_test[1:]],
        "fra_Latn": [row.split("\t")[2] for row in demo_lines("sib200/fra_Latn.test.tsv", 1, test)],
        "rus_Cyrl": russian,
    }))

    tiny_bert(english_text + en_mono + en_parallel, 1000, tmp / HUB_DIR / SOURCE_MODEL_ID, seed=0)
    tiny_causal_lm(english_text + en_mono + en_parallel, SIZES["decoder_vocab"], tmp / HUB_DIR / DECODER_MODEL_ID,
                   seed=2)
    tiny_bert(english_text + en_mono + fr_mono + ru_mono, 1500, tmp / HUB_DIR / MULTILINGUAL_MODEL_ID, seed=1)
    os.replace(tmp, root)


# --- the server ------------------------------------------------------------------------------------


class MirrorServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, port: int):
        self.root = root.resolve()
        super().__init__(("127.0.0.1", port), MirrorHandler)


class MirrorHandler(BaseHTTPRequestHandler):
    server: MirrorServer

    def log_message(self, format, *args):
        sys.stderr.write("mirror: " + format % args + "\n")

    def _reply(self, status: int, body: bytes, headers: dict[str, str], send_body: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _not_found(self, send_body: bool) -> None:
        self._reply(404, b'{"error": "not found"}', {"Content-Type": "application/json",
                                                    "X-Error-Code": "RepoNotFound"}, send_body)

    def _hub_files(self, repo: str) -> dict[str, Path] | None:
        directory = self.server.root / HUB_DIR / repo
        if repo.count("/") != 1 or not directory.is_dir():
            return None
        return {path.name: path for path in sorted(directory.iterdir()) if path.is_file()}

    def _hub(self, path: str, send_body: bool) -> bool:
        """The hub routes of snapshot_download: revision info, file tree, files by commit."""
        json_type = {"Content-Type": "application/json"}
        info = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
        tree = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)/?", path)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        match = info or tree or resolve
        if not match:
            return False
        files = self._hub_files(match.group(1))
        if files is None or match.group(2) not in ("main", HUB_COMMIT):
            self._not_found(send_body)
        elif info:
            body = {"id": match.group(1), "modelId": match.group(1), "sha": HUB_COMMIT, "private": False,
                    "siblings": [{"rfilename": name} for name in files]}
            self._reply(200, json.dumps(body).encode(), json_type, send_body)
        elif tree:
            body = [{"type": "file", "path": name, "size": file.stat().st_size,
                     "oid": hashlib.sha1(file.read_bytes()).hexdigest()} for name, file in files.items()]
            self._reply(200, json.dumps(body).encode(), json_type, send_body)
        elif resolve.group(3) in files:
            data = files[resolve.group(3)].read_bytes()
            self._reply(200, data, {"Content-Type": "application/octet-stream", "X-Repo-Commit": HUB_COMMIT,
                                    "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, send_body)
        else:
            self._not_found(send_body)
        return True

    def _route(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)  # the query (UD's ?sequence=4...) names nothing here
        if self._hub(path, send_body):
            return
        file = (self.server.root / path.lstrip("/")).resolve()
        if self.server.root not in file.parents or not file.is_file() or HUB_DIR == file.relative_to(self.server.root).parts[0]:
            self._reply(404, b"not found\n", {"Content-Type": "text/plain"}, send_body)
            return
        data = file.read_bytes()
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if match and int(match.group(1)) < len(data):
            start = int(match.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if send_body:
            self.wfile.write(data[start:])

    def do_GET(self):
        self._route(send_body=True)

    def do_HEAD(self):
        self._route(send_body=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="write the mirror's files under DIR")
    build_command.add_argument("dir", type=Path)
    serve = commands.add_parser("serve", help="serve DIR on 127.0.0.1 until interrupted")
    serve.add_argument("dir", type=Path)
    serve.add_argument("--port", type=int, default=8719, help="0: any free port")
    serve.add_argument("--port-file", type=Path, help="write the port here once the server listens")
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.dir.exists():
            parser.error(f"{args.dir} exists; the mirror is built into a new directory")
        build(args.dir)
        print(f"mirror built in {args.dir}")
        return
    if not (args.dir / HUB_DIR).is_dir():
        parser.error(f"{args.dir} holds no mirror; run: {sys.argv[0]} build {args.dir}")
    server = MirrorServer(args.dir, args.port)
    port = server.server_address[1]
    if args.port_file:
        partial = args.port_file.with_name(args.port_file.name + ".tmp")
        partial.write_text(f"{port}\n")
        os.replace(partial, args.port_file)
    print(f"serving {args.dir} on http://127.0.0.1:{port} (HF_ENDPOINT=http://127.0.0.1:{port})", flush=True)
    # SIGINT and SIGTERM end the server cleanly, also where the parent ignores SIGINT (which the
    # child would inherit: then Python raises no KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
