"""Checks on the bundled demo data: provenance notes and evaluation leakage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

from ramen.data.conllu import read_conllu
from ramen.io import read_lines
from ramen.data.nli_data import read_sick, read_xnli_tsv
from ramen.data.text.keys import evaluation_keys, sentence_key
from ramen.data.text.sentences import split_sentences
from ramen.data.text.wikipedia import extract_wikipedia, iter_wikiextractor_documents

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo"
NLI = DEMO / "nli"
UD = DEMO / "ud"
TATOEBA = [DEMO / "parallel" / "tatoeba.fra-eng.en", DEMO / "parallel" / "tatoeba.fra-eng.fr"]
SIB200 = DEMO / "sib200"
SIB200_EVALUATION_FILES = [SIB200 / "eng_Latn.dev.tsv", SIB200 / "eng_Latn.test.tsv", SIB200 / "fra_Latn.test.tsv"]

# Sentences the demo evaluates on. Dev sets select models; the test sets give
# the reported scores; the Tatoeba pairs are retrieval test data.
UD_EVALUATION_FILES = sorted(UD.glob("*-dev*.conllu.gz")) + sorted(UD.glob("*-test*.conllu.gz"))
EVALUATION_FILES = [NLI / "xnli.dev.fr.tsv", NLI / "xnli.test.fr.tsv", NLI / "xnli.test.en.tsv",
                    *UD_EVALUATION_FILES, *TATOEBA, *SIB200_EVALUATION_FILES]
TEST_FILES = [NLI / "xnli.test.fr.tsv", NLI / "xnli.test.en.tsv"]


# The NMT dev and test sets (tasks.nmt): the workflow removes their sentences from the training
# text, so captions repeated in the bundled Multi30k train split never reach a model.
NMT_EVALUATION_FILES = [DEMO / "parallel" / f"multi30k.{split}.{lang}.gz"
                        for split in ("val", "test_2016") for lang in ("en", "fr")]


@pytest.fixture(scope="module")
def evaluation() -> set[str]:
    keys = evaluation_keys(EVALUATION_FILES)
    assert len(keys) > 13000  # the files were read, not silently empty
    return keys


@pytest.fixture(scope="module")
def test_keys() -> set[str]:
    return evaluation_keys(TEST_FILES)


def leaked(sentences: Iterable[str], keys: set[str]) -> list[str]:
    # One-word treebank "sentences" (headings such as "Notes") also occur as Wikipedia headings;
    # they carry no evaluation content, and the workflow drops them from training text anyway.
    return sorted(key for key in {sentence_key(s) for s in sentences} & keys if " " in key)


def lines_and_sentences(lines: Iterable[str], lang: str) -> Iterator[str]:
    # Compare whole lines and their sentences: a document per line may hide one.
    for line in lines:
        yield line
        yield from split_sentences(line, lang)


def test_sources_md_lists_exactly_the_demo_files():
    text = (DEMO / "SOURCES.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))
    present = {
        path.relative_to(DEMO).as_posix()
        for path in DEMO.rglob("*")
        if path.is_file() and path.name != "SOURCES.md"
    }
    assert listed, "no file rows found in SOURCES.md"
    assert sorted(listed - present) == [], "listed in SOURCES.md but missing"
    assert sorted(present - listed) == [], "present in resources/demo but not listed in SOURCES.md"


def test_demo_files_have_expected_sizes():
    en = list(read_lines(DEMO / "parallel" / "multi30k.train.en.gz"))
    fr = list(read_lines(DEMO / "parallel" / "multi30k.train.fr.gz"))
    assert len(en) == len(fr) == 29_000
    assert sum(1 for _ in read_lines(DEMO / "fr" / "sequoia.train.txt")) == 2_184
    assert len(UD_EVALUATION_FILES) == 5
    treebank_sizes = {path.name: sum(1 for _ in read_conllu(path)) for path in UD.glob("*.conllu.gz")}
    assert treebank_sizes == {
        "en_ewt-ud-train.first2000.conllu.gz": 2_000, "en_ewt-ud-dev.first500.conllu.gz": 500,
        "fr_gsd-ud-dev.first400.conllu.gz": 400, "fr_gsd-ud-test.conllu.gz": 416,
        "fr_sequoia-ud-train.conllu.gz": 2_231, "fr_sequoia-ud-dev.conllu.gz": 412,
        "fr_sequoia-ud-test.conllu.gz": 456,
    }
    assert [sum(1 for _ in read_lines(path)) for path in TATOEBA] == [1_000, 1_000]
    assert len(read_xnli_tsv(NLI / "xnli.dev.en.tsv")) == len(read_xnli_tsv(NLI / "xnli.dev.fr.tsv")) == 2_490
    test_en, test_fr = read_xnli_tsv(NLI / "xnli.test.en.tsv"), read_xnli_tsv(NLI / "xnli.test.fr.tsv")
    assert len(test_en) == len(test_fr) == 5_010
    assert len(read_sick(NLI / "SICK.txt")) == 4_439
    total = sum(path.stat().st_size for path in DEMO.rglob("*") if path.is_file())
    assert total < 12 * 2**20


def test_sib200_files_are_its_splits_and_the_test_sets_are_translations():
    from ramen.data.sib200 import read_sib200

    sizes = {path.name: len(read_sib200(path)) for path in SIB200.glob("*.tsv")}
    assert sizes == {"eng_Latn.train.tsv": 701, "eng_Latn.dev.tsv": 99, "eng_Latn.test.tsv": 204,
                     "fra_Latn.test.tsv": 204, "ell_Grek.dev.tsv": 99, "ell_Grek.test.tsv": 204}
    english = read_sib200(SIB200 / "eng_Latn.test.tsv")
    for translation in ("fra_Latn.test.tsv", "ell_Grek.test.tsv"):
        assert [(e.index_id, e.label) for e in english] == [(e.index_id, e.label)
                                                           for e in read_sib200(SIB200 / translation)]
    assert ([e.index_id for e in read_sib200(SIB200 / "eng_Latn.dev.tsv")]
            == [e.index_id for e in read_sib200(SIB200 / "ell_Grek.dev.tsv")])
    train = {e.index_id for e in read_sib200(SIB200 / "eng_Latn.train.tsv")}
    assert not train & {e.index_id for e in english}


def test_greek_training_pairs_are_the_sib200_train_split_line_by_line():
    from ramen.data.sib200 import read_sib200

    english = list(read_lines(DEMO / "parallel" / "flores.train.en"))
    greek = list(read_lines(DEMO / "parallel" / "flores.train.el"))
    assert english == [e.text for e in read_sib200(SIB200 / "eng_Latn.train.tsv")]
    assert len(greek) == len(english) == 701 and all(greek)
    assert sum(any("\u0370" <= c <= "\u03ff" for c in line) for line in greek) == 701


def test_nmt_evaluation_files_are_line_aligned_multi30k_splits():
    sizes = {path.name: sum(1 for _ in read_lines(path)) for path in NMT_EVALUATION_FILES}
    assert sizes == {"multi30k.val.en.gz": 1_014, "multi30k.val.fr.gz": 1_014,
                     "multi30k.test_2016.en.gz": 1_000, "multi30k.test_2016.fr.gz": 1_000}


def test_demo_config_removes_nmt_evaluation_sentences_from_training_text():
    config = yaml.safe_load((DEMO.parents[1] / "config" / "config.yaml").read_text(encoding="utf-8"))
    nmt = config["tasks"]["nmt"]
    listed = {DEMO.parents[1] / path for split in ("dev", "test") for path in nmt[split].values()}
    assert listed == set(NMT_EVALUATION_FILES)
    keys = evaluation_keys(sorted(listed))
    assert len(keys) > 3_900  # plain-text files are read one sentence per line
    train = [s for lang in ("en", "fr") for s in read_lines(DEMO / "parallel" / f"multi30k.train.{lang}.gz")]
    assert leaked(train, keys)  # the raw train split repeats a few captions; prepare_* drops them


@pytest.mark.parametrize(
    "relative",
    ["parallel/multi30k.train.en.gz", "parallel/multi30k.train.fr.gz", "fr/sequoia.train.txt"],
)
def test_no_evaluation_sentence_in_sentence_per_line_text(relative, evaluation):
    assert leaked(read_lines(DEMO / relative), evaluation) == []


def test_no_evaluation_sentence_in_lee_background(evaluation):
    sentences = lines_and_sentences(read_lines(DEMO / "en" / "lee_background.txt"), "en")
    assert leaked(sentences, evaluation) == []


@pytest.fixture(scope="module")
def extracted_wikipedia(tmp_path_factory) -> Path:
    # Same session-wide location as in test_text.py: extract once per run.
    out = tmp_path_factory.getbasetemp() / "enwiki-sample-extracted"
    sample = DEMO / "en" / "enwiki-sample.xml.bz2"
    return out if out.is_dir() else extract_wikipedia(sample, out, expand_templates=False)


def test_no_evaluation_sentence_in_wikipedia_sample(extracted_wikipedia, evaluation):
    documents = iter_wikiextractor_documents(extracted_wikipedia, drop_headings=False)
    sentences = lines_and_sentences((line for doc in documents for line in doc.split("\n")), "en")
    assert leaked(sentences, evaluation) == []


def test_no_evaluation_sentence_in_sick_train(evaluation):
    pairs = read_sick(NLI / "SICK.txt", splits=("TRAIN",))
    assert leaked((s for pair in pairs for s in (pair.premise, pair.hypothesis)), evaluation) == []


def test_no_test_sentence_in_english_xnli_dev(test_keys):
    # xnli.dev.en is NLI training data here, and it is the English original of
    # xnli.dev.fr, which selects models: that overlap is by design and only
    # makes dev scores optimistic. It must still share nothing with the test sets.
    pairs = read_xnli_tsv(NLI / "xnli.dev.en.tsv")
    assert leaked((s for pair in pairs for s in (pair.premise, pair.hypothesis)), test_keys) == []
