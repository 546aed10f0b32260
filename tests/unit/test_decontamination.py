"""Evaluation files edited after the training text was prepared are checked before scoring."""

import numpy as np
import pytest

from ramen.data.decontamination import (
    ContaminationError,
    check_decontaminated,
    key_digests,
    read_digests,
    remove_sentences,
    write_digests,
)
from ramen.data.text.keys import evaluation_keys

HEADER = "premise\thypothesis\tlabel\tgenre\n"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_digests_round_trip_sorted_and_unique(tmp_path):
    digests = key_digests(["b", "a", "b"])
    write_digests(tmp_path / "d.npy", digests)
    assert list(read_digests(tmp_path / "d.npy")) == sorted(set(digests.tolist())) and len(digests) == 2


def test_removing_sentences_keeps_the_others_in_order(tmp_path):
    text = write(tmp_path / "train.txt", "Un chat dort.\nLe chien court !\nIl pleut.\n")
    stats = remove_sentences(text, tmp_path / "out.txt", {"le chien court"})
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "Un chat dort.\nIl pleut.\n"
    assert stats == {"kept": 2, "dropped_evaluation": 1}


def test_a_file_unchanged_since_preparation_is_not_searched_again(tmp_path):
    test = write(tmp_path / "xnli.test.fr.tsv", HEADER + "Il pleut.\tLe ciel est gris.\tneutral\tfiction\n")
    # The text holds the test premise, but the text was prepared against it (its digests are
    # recorded), so only new sentences would be looked up; none are.
    text = write(tmp_path / "train.txt", "Il pleut.\n")
    write_digests(tmp_path / "x.npy", key_digests(evaluation_keys([test])))
    summary = check_decontaminated([test], {"monolingual": text}, {"monolingual": tmp_path / "x.npy"})
    assert summary[str(test)]["texts"]["monolingual"]["new_sentences"] == 0


def test_a_new_evaluation_sentence_found_in_training_text_stops_the_run(tmp_path):
    old = HEADER + "Il pleut.\tLe ciel est gris.\tneutral\tfiction\n"
    test = write(tmp_path / "xnli.test.fr.tsv", old)
    write_digests(tmp_path / "x.npy", key_digests(evaluation_keys([test])))
    text = write(tmp_path / "train.txt", "Un chat dort.\nLe chien court.\n")
    write(test, old + "Le chien court !\tUn animal bouge.\tentailment\tfiction\n")
    with pytest.raises(ContaminationError,
                       match=r"xnli.test.fr.tsv: 1 evaluation sentence.*train.txt.*line 2.*--forcerun \S*x\.npy"):
        check_decontaminated([test], {"monolingual": text}, {"monolingual": tmp_path / "x.npy"})
    # New sentences that the text does not hold pass, and are counted.
    write(test, old + "Il neige.\tIl fait froid.\tentailment\tfiction\n")
    summary = check_decontaminated([test], {"monolingual": text}, {"monolingual": tmp_path / "x.npy"})
    assert summary[str(test)]["texts"]["monolingual"]["new_sentences"] == 2
    assert np.isin(key_digests(["il pleut"]), read_digests(tmp_path / "x.npy")).all()


def test_a_corpus_that_is_all_evaluation_text_names_the_decontamination(tmp_path):
    """It named min_chars, max_chars and min_script_ratio, none of which had dropped a line."""
    from ramen.data.text.corpus import prepare_monolingual, prepare_parallel
    from ramen.errors import InputFormatError

    test = write(tmp_path / "xnli.test.fr.tsv", HEADER + "Le chat dort sur le tapis.\tUn chat dort.\tentailment\tfiction\n")
    corpus = write(tmp_path / "fr.txt", "Le chat dort sur le tapis.\nUn chat dort.\n")
    with pytest.raises(InputFormatError) as failure:
        prepare_monolingual([{"path": str(corpus)}], tmp_path / "out.txt", lang="fr", min_chars=5,
                            exclude_keys=evaluation_keys([test]), excluded_from=[test])
    message = str(failure.value)
    assert message.startswith(f"{corpus}: no fr sentence is left to train on (2 read; dropped: decontamination 2)")
    assert f"decontamination keeps every sentence of the evaluation files under `tasks` ({test})" in message
    assert "set `corpora.fr` to text that is not the evaluation data" in message  # the key to change
    assert "min_chars" not in message
    english = write(tmp_path / "en.txt", "The cat sleeps on the mat.\nA cat sleeps.\n")
    with pytest.raises(InputFormatError, match=r"no sentence pair is left .*dropped: decontamination 2\) "
                                               r"\(decontamination keeps every sentence of the evaluation files") as failure:
        prepare_parallel(english, corpus, tmp_path / "o.en", tmp_path / "o.fr", exclude_keys=evaluation_keys([test]),
                         excluded_from=[test], setting="parallel.fr")
    assert "set `parallel.fr` to text" in str(failure.value)
    assert not (tmp_path / "o.en").exists() and not (tmp_path / "out.txt").exists()
