"""CoNLL-U reading: multiword tokens and empty nodes skipped, malformed lines named by number."""

import gzip

import pytest

from ramen.data.conllu import read_conllu, sentence_texts, universal_relation
from ramen.errors import InputFormatError

GOOD = """# sent_id = s1
# text = Du vin.
1-2\tDu\t_\t_\t_\t_\t_\t_\t_\t_
1\tde\tde\tADP\t_\t_\t3\tcase\t_\t_
2\tle\tle\tDET\t_\t_\t3\tdet\t_\t_
3\tvin\tvin\tNOUN\t_\t_\t0\troot\t_\t_
3.1\tbu\tboire\tVERB\t_\t_\t_\t_\t3:acl\t_
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

# sent_id = s2
1\tOui\toui\tINTJ\t_\t_\t0\troot\t_\t_
"""


def row(*fields):
    return "\t".join(fields)


def test_reads_words_and_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "t.conllu"
    path.write_text(GOOD, encoding="utf-8")
    first, second = list(read_conllu(path))
    assert first.forms == ("de", "le", "vin", ".")
    assert first.heads == (3, 3, 0, 3)
    assert first.upos == ("ADP", "DET", "NOUN", "PUNCT")
    assert first.deprels == ("case", "det", "root", "punct")
    assert (first.sent_id, first.text, first.line) == ("s1", "Du vin.", 4)
    assert second.forms == ("Oui",) and second.text is None  # no blank line at the end is fine
    assert list(sentence_texts(path)) == ["Du vin.", "Oui"]


def test_reads_gzip(tmp_path):
    path = tmp_path / "t.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(GOOD)
    assert [len(s) for s in read_conllu(path)] == [4, 1]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        (row("2", "le", "le", "DET", "_", "_", "3", "det", "_"), "expected 10 tab-separated fields, found 9"),
        (row("x", "le", "le", "DET", "_", "_", "3", "det", "_", "_"), "invalid word ID 'x'"),
        (row("5", "le", "le", "DET", "_", "_", "3", "det", "_", "_"), "out of order"),
        (row("2", "le", "le", "DET", "_", "_", "-", "det", "_", "_"), "HEAD '-' is not a word number"),
        (row("2", "le", "le", "DET", "_", "_", "9", "det", "_", "_"), "HEAD 9 is beyond"),
        (row("2", "le", "le", "DET", "_", "_", "3", "_", "_", "_"), "empty DEPREL"),
    ],
)
def test_malformed_word_line_fails_with_its_line_number(tmp_path, bad_line, message):
    lines = GOOD.split("\n")
    assert lines[4].startswith("2\tle")
    lines[4] = bad_line  # line 5 of the file
    path = tmp_path / "bad.conllu"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(InputFormatError, match=message) as error:
        list(read_conllu(path))
    assert error.value.line == 5 and error.value.path == str(path)
    assert f"{path}:5:" in str(error.value)


def test_sentence_without_a_single_root_is_rejected(tmp_path):
    path = tmp_path / "roots.conllu"
    path.write_text("\n\n" + row("1", "a", "a", "X", "_", "_", "0", "root", "_", "_") + "\n"
                    + row("2", "b", "b", "X", "_", "_", "0", "root", "_", "_") + "\n\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match="2 roots") as error:
        list(read_conllu(path))
    assert error.value.line == 3


def test_a_sentence_with_one_root_but_a_cycle_is_rejected(tmp_path):
    # Word 1 is the root; words 2 and 3 head each other, so neither reaches it.
    path = tmp_path / "cycle.conllu"
    path.write_text("# sent_id = c\n" + row("1", "a", "a", "X", "_", "_", "0", "root", "_", "_") + "\n"
                    + row("2", "b", "b", "X", "_", "_", "3", "dep", "_", "_") + "\n"
                    + row("3", "c", "c", "X", "_", "_", "2", "dep", "_", "_") + "\n"
                    + row("4", "d", "d", "X", "_", "_", "4", "dep", "_", "_") + "\n\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match="word 2 is in a cycle") as error:
        list(read_conllu(path))
    assert error.value.line == 3
    assert len(list(read_conllu(tmp_path.joinpath("good.conllu").write_text(GOOD) and tmp_path / "good.conllu"))) == 2


def test_universal_relation_strips_subtypes():
    assert universal_relation("obl:mod") == "obl"
    assert universal_relation("acl:relcl") == "acl"
    assert universal_relation("nsubj") == "nsubj"


def test_predictions_replace_head_and_deprel_and_keep_every_other_line(tmp_path):
    from ramen.data.conllu import write_predictions

    gold = tmp_path / "gold.conllu"
    gold.write_text(GOOD, encoding="utf-8")
    out = tmp_path / "pred.conllu"
    assert write_predictions(gold, out, [[2, 0, 2, 2], [0]], [["case", "root", "det", "punct"], ["root"]]) == 2
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == GOOD.splitlines()[:3] and "3.1\tbu\tboire" in lines[6]
    assert [line.split("\t")[6:8] for line in lines if line[:1].isdigit() and "\t" in line
            and line.split("\t")[0].isdigit()] == [["2", "case"], ["0", "root"], ["2", "det"], ["2", "punct"],
                                                   ["0", "root"]]
    assert [s.heads for s in read_conllu(out)] == [(2, 0, 2, 2), (0,)]
    with pytest.raises(InputFormatError, match="2 sentences but 3 were predicted"):
        write_predictions(gold, out, [[2, 0, 2, 2], [0], [0]], [["a"] * 4, ["root"], ["root"]])
