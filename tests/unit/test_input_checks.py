"""Inputs are read before any job: each bad file fails naming the setting, the file and the line."""

import bz2
import gzip
import json
from pathlib import Path

import pytest
import yaml

from ramen.config_errors import config_problem
from ramen.errors import ConfigError, InputFormatError
from ramen.data.input_checks import InputFile, check_inputs, missing_language_settings
from ramen.data.text.scripts import LANGUAGE_SCRIPTS

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
HTML = b"<!DOCTYPE html>\n<html><head><title>Log in</title></head><body>Please log in</body></html>\n"


def check(path, kind, **options):
    return check_inputs([InputFile("the.setting", str(path), kind, options)])


def test_an_html_page_saved_under_an_archive_name_is_reported_as_html(tmp_path):
    for name, kind in (("frwiki.xml.bz2", "wikipedia"), ("corpus.txt.gz", "corpus"), ("corpus.txt", "corpus"),
                       ("wiki.fr.vec", "vectors")):
        (tmp_path / name).write_bytes(HTML)
        with pytest.raises(InputFormatError, match=rf"{name}:1: is an HTML page.*\[config setting 'the.setting'\]"):
            check(tmp_path / name, kind)


def test_a_real_dump_and_a_damaged_one(tmp_path):
    good = tmp_path / "good.xml.bz2"
    good.write_bytes(bz2.compress(b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">\n<page/>\n'))
    assert check(good, "wikipedia") == []
    damaged = tmp_path / "damaged.xml.bz2"
    damaged.write_bytes(good.read_bytes()[:20])
    with pytest.raises(InputFormatError, match="damaged.xml.bz2: cannot be decompressed"):
        check(damaged, "wikipedia")
    not_a_dump = tmp_path / "text.xml.bz2"
    not_a_dump.write_bytes(bz2.compress(b"just text\n"))
    with pytest.raises(InputFormatError, match="not a MediaWiki XML dump"):
        check(not_a_dump, "wikipedia")


def test_empty_or_whitespace_corpora_fail_naming_the_file(tmp_path):
    for name, content in (("empty.txt", b""), ("blank.txt", b" \n\t\n\n")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputFormatError, match=rf"{name}: holds no text"):
            check(tmp_path / name, "corpus")
    with gzip.open(tmp_path / "blank.txt.gz", "wb") as handle:
        handle.write(b"\n\n")
    with pytest.raises(InputFormatError, match="blank.txt.gz: holds no text"):
        check(tmp_path / "blank.txt.gz", "corpus")


def test_a_corpus_of_invisible_characters_holds_no_text(tmp_path):
    """Zero-width and no-break spaces, a byte order mark: such a file passed, as text."""
    invisible = tmp_path / "invisible.txt"
    invisible.write_text("\u200b\u200b\n\u00a0\u3000\u2009\n\ufeff\u2060\u200d \n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"invisible.txt: holds no text .*zero-width.*"
                                               r"\[config setting 'the.setting'\]"):
        check(invisible, "corpus")
    no_ascii = tmp_path / "zh.txt"
    no_ascii.write_text("\u200b北京是中国的首都。\n", encoding="utf-8")
    assert check(no_ascii, "corpus") == []


def test_a_non_utf8_byte_is_named_by_its_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Première ligne ok\n".encode() + "Deuxième ligne\n".encode("latin-1"))
    with pytest.raises(InputFormatError, match=r"latin1.txt:2: not UTF-8 text: byte 0xe8 at column 6"):
        check(path, "corpus")


def test_line_aligned_files_must_have_as_many_lines(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.fr").write_text("un\ndeux\n")
    with pytest.raises(InputFormatError, match="a.en: has 3 lines but its other side .*a.fr has 2"):
        check(tmp_path / "a.en", "lines", aligned_with=str(tmp_path / "a.fr"))


def test_a_bad_nli_file_and_a_broken_treebank_fail_before_training(tmp_path):
    nli = tmp_path / "train.tsv"
    nli.write_text("premise\thypothesis\tlabel\tgenre\nA man.\tA person.\tentailment\tx\nA.\tB.\tmaybe\tx\n")
    with pytest.raises(InputFormatError, match=r"train.tsv:3:.*maybe"):
        check(nli, "nli", source={"format": "xnli"})
    treebank = tmp_path / "train.conllu"
    treebank.write_text("1\ta\ta\tX\t_\t_\t2\tdep\t_\t_\n2\tb\tb\tX\t_\t_\t1\tdep\t_\t_\n\n")
    with pytest.raises(InputFormatError, match="train.conllu:1: .*0 roots"):
        check(treebank, "conllu")


def test_a_truncated_vec_file_is_caught(tmp_path):
    path = tmp_path / "wiki.fr.vec"
    rows = "".join(f"w{i} 0.1 0.2 0.3\n" for i in range(10))
    path.write_text("10 3\n" + rows)
    assert check(path, "vectors") == []
    path.write_text("10 3\n" + rows[: len(rows) // 2])
    with pytest.raises(InputFormatError, match="wiki.fr.vec:.*(truncated|ends)"):
        check(path, "vectors")


def test_files_not_there_yet_are_returned_and_passed_files_are_remembered(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("Une phrase.\n")
    cache = tmp_path / "cache.json"
    missing = InputFile("corpora.fr[1]", str(tmp_path / "later.txt"), "corpus")
    assert check_inputs([InputFile("corpora.fr[0]", str(good), "corpus"), missing], cache) == [missing]
    assert len(json.loads(cache.read_text())) == 1
    # A changed file is checked again.
    good.write_text("")
    with pytest.raises(InputFormatError, match="holds no text"):
        check_inputs([InputFile("corpora.fr[0]", str(good), "corpus")], cache)


def test_a_language_without_its_settings_names_the_missing_key():
    config = {"corpora": {"fr": [{}]}, "tasks": {"xnli": {"test": {"fr": "x"}}}}
    missing_language_settings(config, {"fr": ["corpora.fr", "tasks.xnli.test.fr"]})
    with pytest.raises(ConfigError, match=r"'tasks.xnli.test.de': 'de' is in `languages`"):
        missing_language_settings(config, {"de": ["tasks.xnli.test.de"]})


def test_the_schema_accepts_exactly_the_languages_the_text_pipeline_supports():
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    assert set(schema["definitions"]["language"]["enum"]) == set(LANGUAGE_SCRIPTS)


def test_an_unknown_key_is_one_short_message():
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    assert config_problem(config, SCHEMA) == ""
    config["bpe"]["mergez"] = 3
    message = config_problem(config, SCHEMA)
    assert message.startswith("config setting 'bpe.mergez': unknown key (did you mean 'merges'?); "
                              "allowed keys in bpe: extension_keep_source_lines, extension_min_count, "
                              "extension_tokens, lowercase, max_vocab_size")
    assert "\n" not in message and len(message) < 300
