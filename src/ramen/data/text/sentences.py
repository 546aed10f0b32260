"""Sentence splitting by punctuation rules per language, a whole batch of paragraphs in one regex pass."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from .normalise import _normalise_lines
from .scripts import _check_lang, _class_of


# Terminal punctuation per language.
_TERMINALS: dict[str, str] = {
    "en": ".!?…", "fr": ".!?…", "ru": ".!?…", "vi": ".!?…",
    "ar": ".!?…؟",
    "hi": ".!?…।॥",
    "zh": "。！？!?",
    # Greek asks with ';' (or its own U+037E, which NFKC turns into ';').
    "el": ".!?…;\u037e",
}
# These end a sentence even when no space follows (Chinese has no spaces;
# Hindi text often glues the next word to the danda).
_ALWAYS_END: dict[str, str] = {"zh": "。！？", "hi": "।॥"}
# Closing quotes/brackets that belong to the sentence they follow. French puts
# a space before a closing guillemet, hence the second alternative.
_CLOSERS = "\"'”’»)]}」』）〕】"
_TERMINAL_RE: dict[str, re.Pattern[str]] = {
    lang: re.compile(
        f"[{re.escape(terms)}]+(?:[{re.escape(_CLOSERS)}]|[ \u00a0\u202f][»”])*"
    )
    for lang, terms in _TERMINALS.items()
}
# A period after one of these does not end a sentence (case-sensitive).
_ABBREVIATIONS: dict[str, frozenset[str]] = {
    "en": frozenset("Mr Mrs Ms Dr Prof Sr Jr St Mt Messrs Gen Col Lt Sgt Capt Gov Sen Rep Rev vs cf".split()),
    "fr": frozenset("M MM Mme Mmes Mlle Mlles Dr Pr Me Mgr St Ste cf env av apr".split()),
    "ru": frozenset("им ул проф акад ген св тов".split()),
    "vi": frozenset("TP Tp GS PGS TS ThS BS KS".split()),
    "ar": frozenset(),
    "hi": frozenset("डॉ प्रो".split()),
    "zh": frozenset(),
    "el": frozenset("κ κα Δρ καθ βλ π.χ σελ".split()),
}
# Before a number these are abbreviations too, in any case ("world no. 141", "p. 12", "т. 2").
_NUMBER_ABBREVIATIONS = frozenset("no nos nr n n° № p pp vol fig art ch с стр т рис".split())
_OPENERS = "([{«“‘\"'"


@functools.cache
def _class_where(test: str) -> str:
    """Regex class body of every code point for which ``str.<test>`` (e.g. ``islower``) is true."""
    method = getattr(str, test)
    # Every cased letter is in the first two planes; looking no further keeps this fast.
    return _class_of(code for code in range(0x20000) if method(chr(code)))


def _after_any(words: Iterable[str], before: str, after: str, *, negative: bool = True) -> str:
    """Lookbehinds for: a ``before`` character, one of ``words``, then ``after``, ending here.

    ``re`` lookbehinds need a fixed width, so there is one per word length:
    negative ones are all required (none of the words), positive ones are
    alternatives (any of them).
    """
    by_length: dict[int, list[str]] = {}
    for word in sorted(words):
        by_length.setdefault(len(word), []).append(re.escape(word))
    kind = "!" if negative else "="
    looks = [f"(?<{kind}{before}(?:{'|'.join(group)}){after})" for _, group in sorted(by_length.items())]
    return "".join(looks) if negative else f"(?:{'|'.join(looks)})"


@functools.cache
def _boundary_pattern(lang: str) -> re.Pattern[str]:
    """A regex whose :meth:`~re.Pattern.split` cuts normalised paragraphs (joined by newlines) into sentences.

    It matches a sentence's final punctuation (captured, so ``split`` keeps it)
    and the space after it. Every rule of :func:`split_sentences` is a
    lookaround, so a whole block of text is split in one C-level pass instead
    of a Python test at each period: this is most of the cleaning's speed.
    Each match starts with a terminal character, which lets the engine skip
    ahead to the next one.
    """
    esc = re.escape
    terms, always = _TERMINALS[lang], _ALWAYS_END.get(lang, "")
    closers = f"(?:[{esc(_CLOSERS)}]| [»”])*+"
    lower, upper = _class_where("islower"), _class_where("isupper")
    # A space then a word not starting in lowercase, or the paragraph's end.
    ends = f"(?= [^{lower}\n]|\n|\\Z)"
    word_start = f"[\\s{esc(_OPENERS + always)}]"
    initial_start = f"[\\s{esc(_OPENERS + always)}.\\-]"
    # "1. Introduction": a number alone before its period, at the paragraph's start or
    # after a sentence end (not after "no. 3." or "U.S.A. 4.", where no sentence ended).
    sentence_ends = [f"[{esc(terms)}]", f"[{esc(terms)}][{esc(_CLOSERS)}]", f"[{esc(terms)}] [»”]"]
    list_number = ""
    for digits in (f"\\d{{{k}}}{period}" for k in (1, 2, 3, 4) for period in (r"\.", r" \.")):
        list_number += (
            f"(?<!\n{digits})" + (f"(?<![{esc(always)}]{digits})" if always else "")
            + "(?:" + "".join(f"(?<!{end} {digits})" for end in sentence_ends) + "|"
            + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", f")\\. {digits}", negative=False)
            + f"|(?<={initial_start}[{upper}]\\. {digits}))"
        )
    lone_period = (
        f"(?<=\\.)(?![{esc(terms)}])(?={closers}{ends})"
        # "Mr. Smith", tokenised "Mr . Smith"
        + _after_any(_ABBREVIATIONS[lang], word_start, r"\.") + _after_any(_ABBREVIATIONS[lang], word_start, r" \.")
        # initials: "J. S. Bach", "U.S. Army", "J.-C."
        + f"(?<!{initial_start}[{upper}]\\.)(?<!{initial_start}[{upper}] \\.)"
        # "no. 141", "p. 12", "т. 2"
        + f"(?:(?!{closers} \\d)|" + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", r")\.")
        + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", r") \.") + ")"
        # The list-number tests only matter after a digit or a space: skip them elsewhere.
        + f"(?:(?<![\\d ]\\.)|{list_number})" + closers
    )
    # Any other run of terminals ("!", "?!", "..."), which a period alone does not start.
    other = f"(?:(?<!\\.)|(?=[{esc(terms)}]))[{esc(terms)}]*+{closers}{ends}"
    alternatives = [lone_period, other]
    if always:  # a run holding one of these ends a sentence wherever it is
        not_always = "".join(char for char in terms if char not in always)
        alternatives.insert(
            0, f"(?:(?<=[{esc(always)}])|(?=[{esc(not_always)}]*+[{esc(always)}]))[{esc(terms)}]*+{closers}"
        )
    return re.compile(f"([{esc(terms)}](?:{'|'.join(alternatives)})) ?")


def _split_normalised(paragraphs: list[str], lang: str) -> list[str]:
    """The sentences of paragraphs normalised by :func:`normalise_line` (none containing a newline)."""
    parts = _boundary_pattern(lang).split("\n" + "\n".join(paragraphs))
    # parts = [text, end, text, end, ..., text]: glue each sentence to its end, one per line.
    text = "\n".join(map(str.__add__, parts[0:-1:2], parts[1::2])) + "\n" + parts[-1]
    return [sentence for sentence in text.split("\n") if sentence]


def split_sentences(text: str, lang: str) -> list[str]:
    """Split ``text`` into sentences with simple punctuation rules.

    Each line of ``text`` is a paragraph, and a sentence never crosses a line
    break. Sentences end at ``. ! ? …`` followed by a space (plus ``؟`` for
    ar); in zh at ``。！？`` with or without a following space; in hi at the
    danda ``।`` / ``॥``. A period after a common abbreviation or a single
    capital letter (an initial), or before a lowercase word, does not end a
    sentence. Sentences are NFC-normalised with whitespace collapsed; case
    and diacritics are untouched.
    """
    _check_lang(lang)
    return _split_normalised([line for line in _normalise_lines(text.splitlines()) if line], lang)
