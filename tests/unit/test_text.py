"""Tests for sentence splitting, normalisation and corpus preparation."""

from __future__ import annotations

import gzip
import unicodedata
from pathlib import Path

import pytest

from ramen.errors import ConfigError, InputFormatError
from ramen.data.text.corpus import prepare_monolingual, prepare_parallel
from ramen.data.text.keys import evaluation_keys, sentence_key
from ramen.data.text.normalise import normalise_line
from ramen.data.text.scripts import script_ratio
from ramen.data.text.sentences import split_sentences
from ramen.data.text.wikipedia import extract_wikipedia, iter_wikiextractor_documents

REPO = Path(__file__).resolve().parents[2]
WIKI_SAMPLE = REPO / "resources" / "demo" / "en" / "enwiki-sample.xml.bz2"


# --- sentence splitting -------------------------------------------------------


def test_split_english_keeps_abbreviations_initials_and_decimals():
    text = "Mr. Smith paid $3.50 for it. J. S. Bach wrote fugues! Did he? He was world no. 141 then."
    assert split_sentences(text, "en") == [
        "Mr. Smith paid $3.50 for it.",
        "J. S. Bach wrote fugues!",
        "Did he?",
        "He was world no. 141 then.",
    ]


def test_split_english_list_numbers_stay_with_their_item():
    text = ("1. Introduction of the plan. 2. Results follow. See ch. 3. Then stop. "
            "Born in the U.S.A. 4. Alan left. Dr . Who came. Page no . 5 here. 6 . Last item.")
    assert split_sentences(text, "en") == [
        "1. Introduction of the plan.",
        "2. Results follow.",
        "See ch. 3.",  # "ch. 3" is a reference, so "3." ends the sentence
        "Then stop.",
        "Born in the U.S.A. 4.",
        "Alan left.",
        "Dr . Who came.",  # tokenised text: the abbreviation before a spaced period
        "Page no . 5 here.",
        "6 . Last item.",
    ]


def test_split_english_quotes_and_ellipsis():
    assert split_sentences('He said "stop." Then he left... Later, nothing.', "en") == [
        'He said "stop."',
        "Then he left...",
        "Later, nothing.",
    ]


def test_split_english_does_not_split_before_lowercase():
    assert split_sentences("It costs 5 dollars etc. and more. Fine.", "en") == [
        "It costs 5 dollars etc. and more.",
        "Fine.",
    ]


def test_split_french_titles_guillemets_and_spaced_punctuation():
    text = "M. Dupont est arrivé à l'été. « Tu viens ? » demanda-t-il. Très bien ! C'était ça…  Fin."
    assert split_sentences(text, "fr") == [
        "M. Dupont est arrivé à l'été.",
        "« Tu viens ? » demanda-t-il.",
        "Très bien !",
        "C'était ça…",
        "Fin.",
    ]


def test_split_russian_initials():
    text = "А. С. Пушкин родился в Москве. Он был поэтом! Правда? Да."
    assert split_sentences(text, "ru") == [
        "А. С. Пушкин родился в Москве.",
        "Он был поэтом!",
        "Правда?",
        "Да.",
    ]


def test_split_arabic_question_mark():
    text = "ذهبت إلى السوق. هل أنت بخير؟ نعم!"
    assert split_sentences(text, "ar") == ["ذهبت إلى السوق.", "هل أنت بخير؟", "نعم!"]


def test_split_chinese_without_spaces():
    assert split_sentences("我爱你。你好吗？", "zh") == ["我爱你。", "你好吗？"]
    assert split_sentences("他说：“好的。”然后走了！版本3.5很好。", "zh") == [
        "他说：“好的。”",
        "然后走了！",
        "版本3.5很好。",
    ]


def test_split_greek_question_mark_and_abbreviations():
    text = "Πού είναι ο σταθμός; Είναι κοντά, π.χ. στο κέντρο. Ο κ. Παπαδόπουλος ήρθε!"
    assert split_sentences(text, "el") == ["Πού είναι ο σταθμός;", "Είναι κοντά, π.χ. στο κέντρο.",
                                           "Ο κ. Παπαδόπουλος ήρθε!"]


def test_split_hindi_danda_with_and_without_space():
    text = "मैं घर जा रहा हूँ। तुम कहाँ हो?वह ठीक है॥अंत।"
    assert split_sentences(text, "hi") == ["मैं घर जा रहा हूँ।", "तुम कहाँ हो?वह ठीक है॥", "अंत।"]


def test_split_vietnamese_preserves_diacritics_exactly():
    text = "Tôi yêu tiếng Việt. Bạn có khỏe không? TP. Hồ Chí Minh rất đẹp!"
    expected = ["Tôi yêu tiếng Việt.", "Bạn có khỏe không?", "TP. Hồ Chí Minh rất đẹp!"]
    assert split_sentences(text, "vi") == expected
    # Decomposed input comes back composed (NFC), with the same letters.
    decomposed = unicodedata.normalize("NFD", text)
    assert decomposed != text
    assert split_sentences(decomposed, "vi") == expected


def test_split_treats_each_line_as_a_paragraph_and_keeps_case():
    assert split_sentences("Première ligne sans point\n\n  DEUXIÈME ligne.  ", "fr") == [
        "Première ligne sans point",
        "DEUXIÈME ligne.",
    ]


def test_split_rejects_unknown_language():
    with pytest.raises(ConfigError, match="lang"):
        split_sentences("Hallo.", "xx")


# --- normalisation --------------------------------------------------------------


def test_normalise_line_nfc_whitespace_controls():
    assert normalise_line("  Cafe\u0301 \t au\u00a0lait\x07 \n") == "Café au lait"
    assert normalise_line("\ufeffÉTÉ") == "ÉTÉ"


def test_sentence_key_ignores_case_edges_spacing_and_quote_style():
    assert sentence_key("« Tu viens ? »") == sentence_key('"tu viens?"') == "tu viens"
    assert sentence_key("Don’t stop.") == sentence_key("don't stop") == "don't stop"
    assert sentence_key("L'ÉTÉ") == sentence_key("l'e\u0301te\u0301")
    assert sentence_key("A cat.") != sentence_key("A dog.")
    assert sentence_key("!!!") == ""


def test_script_ratio():
    assert script_ratio("Tiếng Việt", "vi") == 1.0
    assert script_ratio("Hello мир", "en") == pytest.approx(5 / 8)
    assert script_ratio("Hello мир", "ru") == pytest.approx(3 / 8)
    assert script_ratio("我爱你 abc", "zh") == pytest.approx(0.5)
    assert script_ratio("नमस्ते दुनिया", "hi") == 1.0
    assert script_ratio("مرحبا بالعالم 123", "ar") == 1.0
    assert script_ratio("123 !", "fr") == 0.0
    assert script_ratio("Καλημέρα κόσμε", "el") == 1.0 and script_ratio("Ἀθῆναι ok", "el") == pytest.approx(6 / 8)


# --- monolingual preparation ------------------------------------------------------


def test_prepare_monolingual_filters_dedups_and_excludes(tmp_path):
    text = tmp_path / "corpus.txt.gz"
    with gzip.open(text, "wt", encoding="utf-8") as handle:
        handle.write(
            "Le chat dort. Le chien aboie.\n"
            "\n"
            "le chat dort !\n"  # duplicate by key
            "Court.\n"  # too short
            "Une phrase d'évaluation.\n"  # excluded
            "Ceci est une phrase beaucoup trop longue pour passer le filtre de longueur.\n"
            "Привет, как дела у тебя?\n"  # wrong script
            "Le chien aboie.\n"  # duplicate
            "Il pleut à Paris.\n"
        )
    out = tmp_path / "out" / "mono.txt"
    stats = prepare_monolingual(
        [{"path": str(text), "format": "text"}],
        out,
        lang="fr",
        exclude_keys={sentence_key("Une phrase d’évaluation")},
        min_chars=8,
        max_chars=40,
        max_sentences=None,
        seed=1,
        min_script_ratio=0.5,
    )
    assert out.read_text(encoding="utf-8").splitlines() == [
        "Le chat dort.",
        "Le chien aboie.",
        "Il pleut à Paris.",
    ]
    assert stats == {
        "read": 9,
        "kept": 3,
        "dropped_length": 2,
        "dropped_invisible": 0,
        "dropped_script": 1,
        "dropped_excluded": 1,
        "dropped_duplicate": 2,
        "dropped_sampled": 0,
        "dropped_bytes": 0,
    }


def test_prepare_monolingual_sampling_is_seeded_and_keeps_order(tmp_path):
    source = tmp_path / "lines.txt"
    lines = [f"Sentence number {i} is here." for i in range(200)]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def run(name: str, seed: int) -> list[str]:
        out = tmp_path / name
        stats = prepare_monolingual(
            [{"path": source, "format": "text"}], out, lang="en", exclude_keys=set(),
            min_chars=1, max_chars=100, max_sentences=30, seed=seed,
        )
        assert stats["kept"] == 30 and stats["dropped_sampled"] == 170
        return out.read_text(encoding="utf-8").splitlines()

    first, again, other = run("a.txt", 7), run("b.txt", 7), run("c.txt", 8)
    assert first == again
    assert first != other
    assert len(set(first)) == 30
    assert first == [line for line in lines if line in set(first)]  # original order


def test_prepare_monolingual_reads_wikiextractor_directory(tmp_path):
    wiki = tmp_path / "wiki" / "AA"
    wiki.mkdir(parents=True)
    (wiki / "wiki_00").write_text(
        '<doc id="1" url="u" title="Alaska">\nAlaska\n\n'
        "Alaska () is a U.S. state. It is cold.\nGeography.\n"
        "It has many lakes (; ; over 3 million).\n</doc>\n"
        '<doc id="2" url="u" title="Empty">\nEmpty\n\n</doc>\n',
        encoding="utf-8",
    )
    out = tmp_path / "mono.txt"
    stats = prepare_monolingual(
        [{"path": tmp_path / "wiki", "format": "wikiextractor"}], out, lang="en",
        exclude_keys=set(), min_chars=1, max_chars=100, max_sentences=None, seed=0,
    )
    assert out.read_text(encoding="utf-8").splitlines() == [
        "Alaska is a U.S. state.",
        "It is cold.",
        "It has many lakes (over 3 million).",
    ]
    assert stats["read"] == 3  # the empty article and the "Geography." heading are skipped


def test_prepare_monolingual_config_errors_leave_no_output(tmp_path):
    out = tmp_path / "mono.txt"
    source = tmp_path / "a.txt"
    source.write_text("Hello there.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"corpora\.en\[0\]\.format"):
        prepare_monolingual([{"path": source, "format": "html"}], out, lang="en")
    with pytest.raises(ConfigError, match=r"corpora\.en\[0\]\.path"):
        prepare_monolingual([{"path": tmp_path / "missing.txt"}], out, lang="en")
    with pytest.raises(ConfigError, match="not a directory"):
        prepare_monolingual([{"path": source, "format": "wikiextractor"}], out, lang="en")
    assert not out.exists()


# --- parallel preparation ------------------------------------------------------------


def test_prepare_parallel_length_mismatch_names_shorter_file_and_line(tmp_path):
    src = tmp_path / "train.en"
    tgt = tmp_path / "train.fr.gz"
    src.write_text("One.\nTwo.\nThree.\n", encoding="utf-8")
    with gzip.open(tgt, "wt", encoding="utf-8") as handle:
        handle.write("Un.\nDeux.\n")
    out_src, out_tgt = tmp_path / "o.en", tmp_path / "o.fr"
    with pytest.raises(InputFormatError) as caught:
        prepare_parallel(src, tgt, out_src, out_tgt, exclude_keys=set(), max_pairs=None, seed=0,
                         min_chars=1, max_chars=100)
    assert caught.value.path == str(tgt)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{tgt}:3: file ends after 2 lines but {src} has a line 3")
    assert not out_src.exists() and not out_tgt.exists()
    # The other way round names the other file.
    with pytest.raises(InputFormatError) as caught:
        prepare_parallel(tgt, src, out_src, out_tgt)
    assert caught.value.path == str(tgt) and caught.value.line == 3


def test_prepare_parallel_filters_pairs(tmp_path):
    src, tgt = tmp_path / "s.en", tmp_path / "s.fr"
    src.write_text(
        "A dog runs.\n\nA cat sleeps.\nThe test sentence.\n"
        "This line is far too long to be kept here.\nA bird sings.\n",
        encoding="utf-8",
    )
    tgt.write_text(
        "Un chien court.\nVide à gauche.\n\nLa phrase de test.\nCourt.\nUn oiseau  chante.\n",
        encoding="utf-8",
    )
    out_src, out_tgt = tmp_path / "o" / "s.en", tmp_path / "o" / "s.fr"
    stats = prepare_parallel(
        src, tgt, out_src, out_tgt, exclude_keys={sentence_key("la phrase de test")},
        max_pairs=None, seed=0, min_chars=1, max_chars=30,
    )
    assert out_src.read_text(encoding="utf-8").splitlines() == ["A dog runs.", "A bird sings."]
    assert out_tgt.read_text(encoding="utf-8").splitlines() == ["Un chien court.", "Un oiseau chante."]
    assert stats == {"read": 6, "kept": 2, "dropped_empty": 2, "dropped_length": 1,
                     "dropped_excluded": 1, "dropped_duplicate": 0, "dropped_sampled": 0}


def test_prepare_parallel_sampling_keeps_pairs_aligned(tmp_path):
    src, tgt = tmp_path / "s.en", tmp_path / "s.fr"
    src.write_text("".join(f"source {i}\n" for i in range(100)), encoding="utf-8")
    tgt.write_text("".join(f"cible {i}\n" for i in range(100)), encoding="utf-8")
    out_src, out_tgt = tmp_path / "o.en.gz", tmp_path / "o.fr.gz"
    stats = prepare_parallel(src, tgt, out_src, out_tgt, exclude_keys=set(), max_pairs=10, seed=3,
                             min_chars=1, max_chars=100)
    assert stats["kept"] == 10 and stats["dropped_sampled"] == 90
    with gzip.open(out_src, "rt", encoding="utf-8") as a, gzip.open(out_tgt, "rt", encoding="utf-8") as b:
        left, right = a.read().splitlines(), b.read().splitlines()
    numbers = [int(line.split()[1]) for line in left]
    assert numbers == sorted(numbers) and len(set(numbers)) == 10
    assert right == [f"cible {n}" for n in numbers]


def test_prepare_parallel_removes_repeated_pairs_keeping_the_first(tmp_path):
    src, tgt = tmp_path / "s.en", tmp_path / "s.fr"
    src.write_text("A dog runs.\nA cat sleeps.\na dog runs !\nA dog runs.\nA bird sings.\n", encoding="utf-8")
    tgt.write_text(
        "Un chien court.\nUn chat dort.\nUn chien court.\nUn chien qui court.\nUn oiseau chante.\n",
        encoding="utf-8",
    )
    out_src, out_tgt = tmp_path / "o.en", tmp_path / "o.fr"
    stats = prepare_parallel(src, tgt, out_src, out_tgt)
    # Line 3 repeats line 1 (same keys on both sides); line 4 has the same source but another translation.
    assert out_src.read_text(encoding="utf-8").splitlines() == [
        "A dog runs.", "A cat sleeps.", "A dog runs.", "A bird sings."]
    assert out_tgt.read_text(encoding="utf-8").splitlines() == [
        "Un chien court.", "Un chat dort.", "Un chien qui court.", "Un oiseau chante."]
    assert stats["dropped_duplicate"] == 1 and stats["kept"] == 4


def test_prepare_parallel_dedup_then_sampling_is_seeded_and_aligned(tmp_path):
    src, tgt = tmp_path / "s.en", tmp_path / "s.fr"
    src.write_text("".join(f"source {i % 100}\n" for i in range(300)), encoding="utf-8")
    tgt.write_text("".join(f"cible {i % 100}\n" for i in range(300)), encoding="utf-8")
    everything = prepare_parallel(src, tgt, tmp_path / "a.en", tmp_path / "a.fr")
    assert everything["dropped_duplicate"] == 200 and everything["kept"] == 100
    assert (tmp_path / "a.en").read_text().splitlines() == [f"source {i}" for i in range(100)]
    samples = []
    for name in ("b", "c"):
        stats = prepare_parallel(src, tgt, tmp_path / f"{name}.en", tmp_path / f"{name}.fr", max_pairs=30, seed=5)
        assert stats["dropped_duplicate"] == 200 and stats["dropped_sampled"] == 70 and stats["kept"] == 30
        left = (tmp_path / f"{name}.en").read_text().splitlines()
        right = (tmp_path / f"{name}.fr").read_text().splitlines()
        numbers = [int(line.split()[1]) for line in left]
        assert numbers == sorted(set(numbers)) and len(numbers) == 30
        assert right == [f"cible {n}" for n in numbers]
        samples.append(left)
    assert samples[0] == samples[1]


def test_evaluation_keys_read_plain_text_files_one_sentence_per_line(tmp_path):
    path = tmp_path / "test.fr.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("Un chien court.\n...\nDeux hommes marchent.\n")
    assert evaluation_keys([path]) == {sentence_key("Un chien court."), sentence_key("Deux hommes marchent.")}


def test_evaluation_keys_covers_premises_and_hypotheses(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text(
        "premise\thypothesis\tlabel\n« Oui ? »\tNon.\tneutral\n...\tA.\tentailment\n", encoding="utf-8"
    )
    assert evaluation_keys([path]) == {"oui", "non", "a"}


# --- Wikipedia --------------------------------------------------------------------------


def test_iter_wikiextractor_documents_rejects_unclosed_doc(tmp_path):
    (tmp_path / "AA").mkdir()
    (tmp_path / "AA" / "wiki_00").write_text('<doc id="1" title="T">\nT\n\nText.\n', encoding="utf-8")
    with pytest.raises(InputFormatError, match="never closed"):
        list(iter_wikiextractor_documents(tmp_path))
    with pytest.raises(InputFormatError, match="wiki_"):
        list(iter_wikiextractor_documents(tmp_path / "AA" / "nothing"))


@pytest.fixture(scope="module")
def extracted_sample(tmp_path_factory) -> Path:
    # Same session-wide location as in test_demo_data.py: extract once per run.
    # The sample holds no template pages, so skipping template collection
    # changes nothing but the run time.
    out = tmp_path_factory.getbasetemp() / "enwiki-sample-extracted"
    return out if out.is_dir() else extract_wikipedia(WIKI_SAMPLE, out, expand_templates=False)


def test_extract_wikipedia_on_bundled_sample(extracted_sample):
    documents = list(iter_wikiextractor_documents(extracted_sample))
    assert len(documents) > 100
    assert documents[0].startswith("Anarchism is a political philosophy")
    assert not any("<doc" in doc or "</doc>" in doc for doc in documents)
    assert sum(len(doc) for doc in documents) > 1_000_000
    sentences = split_sentences(documents[0], "en")
    assert len(sentences) > 50


def test_extract_wikipedia_rejects_non_dump(tmp_path):
    import bz2

    bogus = tmp_path / "bogus.xml.bz2"
    bogus.write_bytes(bz2.compress(b"<html><body>not a dump</body></html>\n"))
    out = tmp_path / "out"
    with pytest.raises(InputFormatError, match="no article"):
        extract_wikipedia(bogus, out)
    assert not out.exists()


# --- streaming preparation ----------------------------------------------------------------


def test_hash_deduplicator_marks_later_repeats_across_blocks(tmp_path):
    import numpy as np

    from ramen.data.dedup import HashDeduplicator

    rng = np.random.default_rng(0)
    values = rng.integers(0, 50, size=3000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # spread over buckets
    for block_items in (10, 10_000):  # several spills to bucket files / all in memory
        dedup = HashDeduplicator(tmp_path / f"h{block_items}", block_items=block_items)
        for start in range(0, len(values), 7):
            dedup.add(values[start:start + 7].astype("<u8").tobytes())
        seen, expected = set(), []
        for value in values.tolist():
            expected.append(value in seen)
            seen.add(value)
        mask = dedup.repeats()
        assert mask.flags(0, len(values)).tolist() == expected
        assert mask.flags(5, 40).tolist() == expected[5:40] and mask.count() == sum(expected)
        assert not list((tmp_path / f"h{block_items}").glob("bucket-*"))  # bucket files are removed


def test_batch_normalisation_keys_and_script_ratios_match_the_line_functions():
    from ramen.data.text.keys import _sentence_keys
    from ramen.data.text.normalise import _normalise_lines
    from ramen.data.text.scripts import _script_ratios

    lines = [
        "  Cafe\u0301 \t au\u00a0lait\x07 ", "\ufeffÉTÉ", "« Tu viens ? »", "Don’t  stop.", "", "!!!",
        "Привет, мир!", "我爱你。你好吗？", "मैं घर जा रहा हूँ।", "مرحبا بالعالم 123", "Tiếng Việt 𝒜",
        "L'ÉTÉ\u2028suivant", "12 345", "ǅemal ß Straße",
    ]
    normalised = _normalise_lines(lines)
    assert normalised == [normalise_line(line) for line in lines]
    assert _sentence_keys(normalised) == [sentence_key(line) for line in lines]
    for lang in ("en", "fr", "ru", "ar", "zh", "hi", "vi"):
        assert _script_ratios(normalised, lang).tolist() == [script_ratio(line, lang) for line in normalised], lang


@pytest.mark.parametrize("irregular", ["", "ß😀İﬁ𝒜"])
def test_batch_keys_and_ratios_equal_the_line_functions_on_random_text(irregular):
    """The code-unit paths (BMP text whose characters fold to one) and the string paths
    (anything else) agree with :func:`sentence_key` and :func:`script_ratio` line by line."""
    import random

    from ramen.data.text.keys import _sentence_keys
    from ramen.data.text.scripts import LANGUAGES, _script_ratios

    rng = random.Random(7)
    alphabet = list("aAzZÉé .,;!?«»“”‘’`´ʼ()[]¿¡—-'\"ΣςЁё中。！।ệ\u00a0\u0301") + ["e\u0301", "…", "「", "」"]
    alphabet += list("мирعربيहिंदी12")
    alphabet += list(irregular)
    for _ in range(300):
        lines = ["".join(rng.choices(alphabet, k=rng.randint(1, 14))) for _ in range(rng.randint(1, 8))]
        normalised = [line for line in map(normalise_line, lines) if line]
        assert _sentence_keys(normalised) == [sentence_key(line) for line in normalised], normalised
        for lang in LANGUAGES:
            assert _script_ratios(normalised, lang).tolist() == [script_ratio(line, lang) for line in normalised]
    from ramen.data.text.keys import _sentence_keys_of_text

    assert _sentence_keys([]) == _sentence_keys_of_text([]) == []
    edges = ["", "...", "мир a", ""]  # empty lines first and last
    assert _sentence_keys(edges) == ["", "", "мир a", ""]
    assert _script_ratios(edges, "fr").tolist() == [0.0, 0.0, 0.25, 0.0]


FRESH_PROCESS = """
import json, sys
import ramen.data.text.sources
from ramen.data.text.corpus import prepare_monolingual

ramen.data.text.sources._BATCH_BYTES = int(sys.argv[1])
sources, out, kwargs = json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
print(json.dumps(prepare_monolingual(sources, out, **kwargs)))
"""


def prepare_in_fresh_process(sources: list[dict], out: Path, batch_bytes: int, **kwargs) -> dict:
    """prepare_monolingual in a new process, as its job runs it: the worker pool forks, and a fork of
    a test process that has started threads (torch's, tqdm's monitor) can inherit a held lock and hang."""
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(batch_bytes), json.dumps(sources, default=str),
                          str(out), json.dumps(kwargs)], capture_output=True, text=True, timeout=300)
    if run.returncode:
        raise AssertionError(run.stderr[-3000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_prepare_monolingual_same_output_with_several_processes_and_batches(tmp_path):
    source = tmp_path / "corpus.txt"
    rows = []
    for i in range(400):
        rows.append(f"Phrase numéro {i % 150} ici. Une autre phrase {i} là ! Encore {i // 3} ?")
        if i % 50 == 0:
            rows.append("Привет, как дела у тебя сегодня?")
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    outputs = {}
    for processes in (1, 2):
        out = tmp_path / f"out{processes}.txt"
        stats = prepare_in_fresh_process(  # 500 bytes a batch: many work units
            [{"path": source, "format": "text"}], out, 500, lang="fr", min_chars=5, max_chars=200,
            min_script_ratio=0.5, max_sentences=300, max_bytes=6000, seed=4, processes=processes)
        outputs[processes] = (out.read_text(encoding="utf-8"), stats)
    assert outputs[1] == outputs[2]
    text, stats = outputs[1]
    assert stats["dropped_script"] == 8 and stats["kept"] + stats["dropped_bytes"] == 300
    assert stats["dropped_bytes"] > 0 and len(text.encode("utf-8")) <= 6000
    assert stats["read"] == sum(v for k, v in stats.items() if k.startswith(("kept", "dropped")))
    assert len(set(text.splitlines())) == stats["kept"]


@pytest.mark.parametrize("content", [b"ab\ncd\nef\n", b"ab\ncd\nef", b"abcdefgh\n\nx\n", b"a\n", b""])
@pytest.mark.parametrize("batch_bytes", [1, 2, 3, 4, 100])
def test_line_spans_cover_the_file_in_whole_lines(tmp_path, monkeypatch, content, batch_bytes):
    import ramen.data.text.sources
    from ramen.data.text.sources import _line_spans

    monkeypatch.setattr(ramen.data.text.sources, "_BATCH_BYTES", batch_bytes)
    path = tmp_path / "lines.txt"
    path.write_bytes(content)
    spans = list(_line_spans(path))
    pieces = [content[offset:offset + length] for offset, length in spans]
    assert b"".join(pieces) == content
    assert all(piece.endswith(b"\n") for piece in pieces[:-1]) and all(pieces)
    # A span holds its budget and stops at the first line end from there on.
    assert all(len(piece) >= batch_bytes and b"\n" not in piece[batch_bytes - 1:-1] for piece in pieces[:-1])


def test_segments_read_as_one_file_whatever_the_read_size(tmp_path):
    from ramen.data.text.sampling import _Segments

    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"0123456789")
    second.write_bytes(b"abcdefghij")
    segments = [(first, 2, 3), (second, 0, 4), (first, 9, 1), (second, 8, 2)]
    for size in (1, 2, 5, 100, -1):
        with _Segments(segments) as reader:
            data = b"".join(iter(lambda: reader.read(size), b""))
        assert data == b"234abcd9ij", size
    (tmp_path / "b").write_bytes(b"abc")  # shorter than a segment says
    with _Segments(segments) as reader, pytest.raises(OSError, match="shorter than written"):
        reader.read(-1)


@pytest.mark.slow
@pytest.mark.parametrize("max_bytes", [None, 10_000])
def test_work_units_that_keep_nothing_leave_deduplication_aligned(tmp_path, max_bytes):
    source = tmp_path / "corpus.txt"
    french = ["Le chat dort ici.", "Il pleut encore.", "Le chat dort ici.", "Une autre phrase.", "Il pleut encore."]
    # One line per work unit: every Russian unit keeps nothing for French.
    source.write_text("".join(f"Кошка спит здесь.\n{line}\n" for line in french), encoding="utf-8")
    for processes in (1, 2):
        out = tmp_path / f"out{processes}.txt"
        stats = prepare_in_fresh_process([{"path": source, "split": False}], out, 1, lang="fr",  # a line a unit
                                         min_script_ratio=0.5, max_bytes=max_bytes, processes=processes)
        assert out.read_text(encoding="utf-8").splitlines() == ["Le chat dort ici.", "Il pleut encore.",
                                                                 "Une autre phrase."]
        assert (stats["dropped_script"], stats["dropped_duplicate"], stats["kept"]) == (5, 2, 3)


def test_prepare_monolingual_byte_budget_is_seeded_uniform_and_fits(tmp_path):
    source = tmp_path / "lines.txt"
    lines = [f"Phrase numéro {i} " + "mot " * (i % 20) + "fin." for i in range(2000)]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    total = len(source.read_bytes())

    def run(name: str, seed: int, **limits) -> tuple[list[str], dict]:
        out = tmp_path / name
        stats = prepare_monolingual([{"path": source, "format": "text"}], out, lang="fr", seed=seed, **limits)
        text = out.read_text(encoding="utf-8")
        assert stats["kept"] == len(text.splitlines())
        assert stats["read"] == sum(v for k, v in stats.items() if k.startswith(("kept", "dropped")))
        return text.splitlines(), stats

    budget = total // 4
    first, stats = run("a.txt", 1, max_bytes=budget)
    size = sum(len(line.encode("utf-8")) + 1 for line in first)
    # At most the budget, and short of it by less than one more sentence.
    assert budget - 100 < size <= budget
    assert stats["dropped_bytes"] == 2000 - len(first) and stats["dropped_sampled"] == 0
    assert first == [line for line in lines if line in set(first)]  # original order
    assert run("b.txt", 1, max_bytes=budget)[0] == first
    assert run("c.txt", 2, max_bytes=budget)[0] != first
    # Uniform over the corpus, not its beginning: both halves are represented alike.
    positions = [int(line.split()[2]) for line in first]
    assert 0.4 < sum(position < 1000 for position in positions) / len(positions) < 0.6
    # With a sentence budget too, whichever is smaller binds.
    assert run("d.txt", 1, max_sentences=300, max_bytes=total)[1]["kept"] == 300
    both, stats = run("e.txt", 1, max_sentences=1000, max_bytes=budget // 2)
    assert stats["dropped_sampled"] == 1000 and stats["dropped_bytes"] > 0
    assert sum(len(line.encode("utf-8")) + 1 for line in both) <= budget // 2
    assert run("f.txt", 1, max_bytes=total)[0] == lines


@pytest.mark.parametrize("processes", [1, 2])
def test_prepare_monolingual_names_a_file_that_is_not_utf8(tmp_path, processes):
    source = tmp_path / "latin1.txt"
    source.write_bytes("Une phrase correcte.\nUne autre.\nUn été caniculaire.\n".encode("latin-1"))
    out = tmp_path / "out.txt"
    # The line in the file, not the position inside a block of it.
    message = r"latin1\.txt:3: not UTF-8 text: byte 0xe9 at column 4 .*convert"
    if processes == 1:
        with pytest.raises(InputFormatError, match=message):
            prepare_monolingual([{"path": source}], out, lang="fr", processes=processes)
    else:  # the error, raised in a worker, reaches the job's process
        with pytest.raises(AssertionError, match=r"InputFormatError: \S*" + message):
            prepare_in_fresh_process([{"path": source}], out, 1 << 18, lang="fr", processes=processes)
    assert not out.exists()


def test_block_sampling_is_exact_uniform_and_ordered(tmp_path):
    import numpy as np

    from ramen.data.dedup import RepeatMask
    from ramen.data.text.sampling import _write_selected

    candidates = tmp_path / "candidates.txt"
    candidates.write_text("".join(f"{i}\n" for i in range(1000)), encoding="utf-8")
    repeats = np.zeros(1000, dtype=bool)
    repeats[::10] = True  # 900 unique lines
    counts = np.zeros(1000)
    for seed in range(200):
        out = tmp_path / "sample.txt"
        assert _write_selected([candidates], [out], RepeatMask.from_bools(repeats), 90, seed, block=37) == 90
        chosen = [int(line) for line in out.read_text().splitlines()]
        assert len(chosen) == 90 and chosen == sorted(chosen)
        assert not any(repeats[chosen])
        counts[chosen] += 1
    # Each unique line is chosen with probability 0.1: 20 times in 200 draws on average.
    assert counts[~repeats].mean() == pytest.approx(20)
    assert counts[~repeats].std() < 8  # binomial sd ≈ 4.2; a block-biased sampler is far wider
    _write_selected([candidates], [tmp_path / "all.txt"], RepeatMask.from_bools(repeats), 900, 0, block=37)
    assert (tmp_path / "all.txt").read_text().splitlines() == [str(i) for i in range(1000) if i % 10]


@pytest.mark.parametrize(
    "lang, text, kept",
    [
        ("fr", "L'été à Noël, où ça ? « Oui ! » Привет всем друзьям.\nÇA VA TRÈS BIEN.",
         ["L'été à Noël, où ça ?", "« Oui ! »", "ÇA VA TRÈS BIEN."]),
        ("ru", "Москва — столица России. This line is English only. Ёжик в тумане!",
         ["Москва — столица России.", "Ёжик в тумане!"]),
        ("ar", "ذهبت إلى السوق. هل أنت بخير؟ This is English.",
         ["ذهبت إلى السوق.", "هل أنت بخير؟"]),
        ("zh", "我爱北京天安门。今天天气很好！你去哪里？English words only here.",
         ["我爱北京天安门。", "今天天气很好！", "你去哪里？"]),
        ("hi", "मैं घर जा रहा हूँ।वह स्कूल गया॥ This is English.",
         ["मैं घर जा रहा हूँ।", "वह स्कूल गया॥"]),
        ("vi", "Tôi yêu tiếng Việt. Hà Nội là thủ đô! Это русский текст.",
         ["Tôi yêu tiếng Việt.", "Hà Nội là thủ đô!"]),
    ],
)
def test_prepare_monolingual_per_language_split_and_script_filter(tmp_path, lang, text, kept):
    source = tmp_path / "raw.txt"
    source.write_text(text + "\n", encoding="utf-8")
    out = tmp_path / "clean.txt"
    stats = prepare_monolingual([{"path": source, "format": "text"}], out, lang=lang,
                                min_chars=2, max_chars=200, min_script_ratio=0.5)
    # Case, accents and diacritics untouched; sentences in the wrong script dropped.
    assert out.read_text(encoding="utf-8").splitlines() == kept
    assert stats["dropped_script"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_extract_wikipedia_names_a_corrupt_bz2_dump(tmp_path, damage):
    good = WIKI_SAMPLE.read_bytes()
    corrupt = tmp_path / "frwiki-latest-pages-articles.xml.bz2"
    if damage == "corrupt":
        corrupt.write_bytes(good[:4000] + b"\x00" * 200 + good[4200:8000])
    else:  # WikiExtractor alone would wait forever after its reader fails
        corrupt.write_bytes(good[: len(good) // 2])
    out = tmp_path / "extracted"
    with pytest.raises(InputFormatError) as caught:
        extract_wikipedia(corrupt, out, expand_templates=False)
    assert str(caught.value).startswith(f"{corrupt}: corrupt or truncated compressed file")
    assert "download it again" in str(caught.value)
    assert not out.exists()


def test_blocks_already_normalised_skip_line_by_line_work_with_the_same_result():
    from ramen.data.text.normalise import _is_normalised
    from ramen.data.text.sources import _unit_sentences

    clean = "Le chat dort. Il fait beau !\nM. Dupont arrive à 3 h.\n\nПривет, мир. Как дела ?\n«ok» – ’ 。\n"
    assert _is_normalised(clean.encode("utf-8"))
    assert _is_normalised(b"") and _is_normalised(b"a")
    # What normalise_line changes beyond NFC: controls, the BOM, whitespace but the space.
    unnormal = [chr(code) for code in range(0x10000) if chr(code) not in " \n" and not 0xD800 <= code < 0xE000
                and normalise_line(f"a{chr(code)}b") != unicodedata.normalize("NFC", f"a{chr(code)}b")]
    assert len(unnormal) == 83 and {"\t", "\x7f", "\x85", "\u00a0", "\u2028", "\u3000", "\ufeff"} <= set(unnormal)
    for messy in ["  Deux  espaces ici.", "Fin ", " Début", *unnormal]:
        for text in (clean + messy + "\n", messy + "\n" + clean, clean + messy):
            assert not _is_normalised(text.encode("utf-8")), repr(messy)
    for code in range(0x10000):  # nothing else makes a block take the slow path
        if chr(code) not in unnormal and not 0xD800 <= code < 0xE000 and chr(code) != " ":
            assert _is_normalised(f"a{chr(code)}b\n".encode("utf-8")), hex(code)
    for text in (clean, clean + "  Deux\tespaces  ici. Fin\u00a0du texte.\u2028Suite ici.\n"):
        block = text.encode("utf-8")
        assert _unit_sentences(("text", True, (Path("x.txt"), block)), "fr") == split_sentences(text, "fr")
        assert _unit_sentences(("text", False, (Path("x.txt"), block)), "fr") == [
            normalise_line(line) for line in text.split("\n") if line.strip()
        ]
        # Windows and old Mac line ends read as newlines.
        for newline in (b"\r\n", b"\r"):
            for split in (True, False):
                assert (_unit_sentences(("text", split, (Path("x.txt"), block.replace(b"\n", newline))), "fr")
                        == _unit_sentences(("text", split, (Path("x.txt"), block)), "fr"))


def test_a_corpus_that_leaves_no_sentence_fails_instead_of_writing_an_empty_file(tmp_path):
    source = tmp_path / "short.txt"
    source.write_text("Oui.\nNon.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    with pytest.raises(InputFormatError, match=r"short.txt: no fr sentence is left .*dropped: length 2"):
        prepare_monolingual([{"path": source}], out, lang="fr", min_chars=10)
    assert not out.exists()
