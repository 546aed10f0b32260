"""fast_align runner (with a stand-in binary on PATH) and grow-diag-final-and symmetrisation."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ramen.alignment.aligners import align_with_fast_align
from ramen.alignment.parallel import count_links, grow_diag_final_and, read_links, translation_probabilities
from ramen.errors import ConfigError

# Behaves like fast_align on the command line the runner uses: reads `src ||| tgt` lines from -i and
# writes Pharaoh links for them; forward = the diagonal, reverse (-r) adds the last foreign word to
# the last English word. It refuses other options, so the invocation itself is checked.
FAKE_FAST_ALIGN = textwrap.dedent(
    """\
    #!{python}
    import sys
    args = sys.argv[1:]
    reverse = "-r" in args
    if [a for a in args if a != "-r"][:1] != ["-i"] or sorted(args[2:]) != sorted(["-d", "-o", "-v"] + (["-r"] if reverse else [])):
        sys.exit("usage: fast_align -i file -d -o -v [-r]; got " + " ".join(args))
    with open(args[1], encoding="utf-8") as corpus:
        for line in corpus:
            src, tgt = line.rstrip("\\n").split(" ||| ")
            n_src, n_tgt = len(src.split()), len(tgt.split())
            links = ["%d-%d" % (i, i) for i in range(min(n_src, n_tgt))]
            if reverse and n_src > n_tgt > 0:
                links.append("%d-%d" % (n_src - 1, n_tgt - 1))
            print(" ".join(links))
    print("fake fast_align done", file=sys.stderr)
    """
)


@pytest.fixture
def fake_fast_align(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "fast_align"
    script.write_text(FAKE_FAST_ALIGN.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return script


def _ids(tmp_path):
    foreign = tmp_path / "ids.fr"
    english = tmp_path / "ids.en"
    foreign.write_text("5 6 7\n8 9\n5 6 7 8\n")
    english.write_text("1 2\n3 4\n1 2 3\n")
    return foreign, english


def test_fast_align_runner_writes_both_directions(tmp_path, fake_fast_align):
    foreign, english = _ids(tmp_path)
    forward, reverse = tmp_path / "links.forward", tmp_path / "links.reverse"
    align_with_fast_align(foreign, english, forward, reverse, threads=1)
    assert list(read_links(forward)) == [[(0, 0), (1, 1)], [(0, 0), (1, 1)], [(0, 0), (1, 1), (2, 2)]]
    assert list(read_links(reverse)) == [[(0, 0), (1, 1), (2, 1)], [(0, 0), (1, 1)], [(0, 0), (1, 1), (2, 2), (3, 2)]]
    counts = count_links(foreign, english, (forward, reverse), 10, 5, symmetrisation="grow-diag-final-and")
    # Sentence 1: the reverse-only link 2-1 joins (foreign word 2 is unaligned, next to 1-1).
    assert counts[7, 2] == 1 and counts[5, 1] == 2 and counts[8, 3] == 2
    alpha = translation_probabilities(counts, min_prob=0.0)
    assert alpha[7].toarray().ravel()[[2, 3]].tolist() == [0.5, 0.5]


def test_fast_align_failure_and_absence_are_reported(tmp_path, fake_fast_align, monkeypatch):
    foreign, english = _ids(tmp_path)
    fake_fast_align.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('corrupt corpus')\n")
    with pytest.raises(RuntimeError, match="corrupt corpus"):
        align_with_fast_align(foreign, english, tmp_path / "f", tmp_path / "r")
    assert not (tmp_path / "f").exists()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="alignment.aligner.*envs/fast_align.yaml"):
        align_with_fast_align(foreign, english, tmp_path / "f", tmp_path / "r")


def test_grow_diag_final_and_by_hand():
    forward = {(0, 0), (1, 1), (2, 1), (4, 0)}
    reverse = {(0, 0), (1, 1), (1, 2), (3, 3)}
    # Grown: 2-1 and 1-2 touch 1-1 and bring unaligned words. Final-and: 3-3 joins (both words
    # unaligned); 4-0 does not (English word 0 is already aligned), though grow-diag-final would add it.
    assert grow_diag_final_and(forward, reverse, 5) == {(0, 0), (1, 1), (2, 1), (1, 2), (3, 3)}
    assert grow_diag_final_and(set(), {(0, 1)}, 2) == {(0, 1)}
    assert grow_diag_final_and({(0, 0)}, {(0, 0)}, 1) == {(0, 0)}


def test_union_and_intersection_counts(tmp_path):
    foreign, english = _ids(tmp_path)
    forward, reverse = tmp_path / "fwd", tmp_path / "rev"
    forward.write_text("0-0 1-1\n0-1\n\n")
    reverse.write_text("0-0 2-1\n0-1 1-0\n0-0\n")
    union = count_links(foreign, english, (forward, reverse), 10, 5, symmetrisation="union")
    both = count_links(foreign, english, (forward, reverse), 10, 5, symmetrisation="intersection")
    assert union[5, 1] == 2 and union[6, 2] == 1 and union[7, 2] == 1 and union[9, 3] == 1 and union.sum() == 6
    assert both[5, 1] == 1 and both[8, 4] == 1 and both.sum() == 2
