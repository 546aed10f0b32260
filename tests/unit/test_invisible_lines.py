"""Lines made only of zero-width characters and spaces are no text: a tokenizer trained on them
learns merges of U+200B/U+200D as new tokens. prepare_monolingual drops them and says how many."""

from __future__ import annotations

import pytest

from ramen.data.text.corpus import prepare_monolingual


def test_lines_of_zero_width_characters_are_dropped_with_a_warning_counting_them(tmp_path):
    invisible = ["\u200b", "\u200b\u200d", " \u200c \u2060 ", "\ufeff\u200b", "\u200d\u200d\u200d"]
    real = ["Le chat dort.", "Il pleut\u200b à Paris.", "Le chien aboie."]
    text = tmp_path / "fr.txt"
    text.write_text("\n".join([real[0], *invisible[:3], real[1], *invisible[3:], real[2]]) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    with pytest.warns(UserWarning, match=r"^corpora\.fr: dropped 5 lines made only of zero-width characters"):
        stats = prepare_monolingual([{"path": str(text), "format": "text", "split": False}], out, lang="fr")
    # A zero-width character inside real text is the text's own: that line stays as it is.
    assert out.read_text(encoding="utf-8").splitlines() == real
    assert stats["dropped_invisible"] == 5 and stats["kept"] == 3 and stats["read"] == 8
