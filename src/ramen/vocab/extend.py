"""A decoder source's BPE extended with foreign tokens: continued BPE over its own segmentation.

The source keeps every token, id and merge. Foreign words (the source's normaliser and
pre-tokenizer applied, so a word carries its leading space as the source sees it) are
segmented by the source's own BPE model; then, as in BPE training, the most frequent adjacent
pair of tokens within words is merged and that merge is appended after the source's merges,
until ``new_tokens`` new vocabulary entries exist. Learning from the source's segmentation,
not from bytes, is what makes the appended merges fire: merges learned from bytes mostly never
apply, because the source's lower-ranked merges have already consumed their pieces.

Each learned merge is applied to the words as the Hugging Face BPE encoder will apply it (the
lowest-ranked applicable merge first, leftmost on ties, source merges cascading after a new
one), so the counts that choose the next merge are those of the text the saved tokenizer
produces. A merge whose result the source already has (the source reaches that string by
another path) is appended without a new entry: it lets the existing token form in more words.
A merge whose result is an added token's string (``<|im_start|>``, ...) is never learned: plain
text must not encode to a control token.

Given text in the source's own language (``keep``), no learned merge applies to a word of it: a
pair that stands side by side in such a word's source segmentation is never learned (nor, where
the tokenizer takes a whole word in its vocabulary as one token, a result spelling such a word).
A word is segmented again only when a merge applies to it, so those words encode exactly as the
source encodes them, and the model meets its English text in the tokens it was trained on.

SentencePiece-style BPE sources (Llama-2, Mistral, Gemma, Phi-3: spaces read as '▁', byte
fallback) take the same road with three differences. A word starts at '▁' (SentencePiece's
words; no source piece holds '▁' inside a word, so no merge crosses one and a text's segmentation
is that of its words), and a learned merge stays within a word. A byte-fallback piece never takes
part in a merge (its string is a name, not text); instead a character the source spells only as
byte pieces (``<0xCE><0xB1>`` for α) can enter the vocabulary as itself, chosen by its count
against the best pair's, its pieces in the record being those bytes. And no tokenizer.model is
exported: the source's lacks the new pieces (see :func:`extend_tokenizer`).

Counting is incremental over word types: a merge revisits only the words that hold its pair.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ramen.data.checkpoint_headers import (BYTE_LEVEL, BYTE_PIECES, SENTENCEPIECE, SPACE, check_extensible_spec,
                                           missing_byte_symbols)
from ramen.data.checkpoint_headers import EXTENSIBLE as SUPPORTED
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines

# The record of which ids are new and what they are made of, saved beside tokenizer.json.
RECORD = "vocab_extension.json"
# The config settings the arguments of an extension come from (rule extend_vocabulary).
NEW_TOKENS = "bpe.extension_tokens"
MIN_COUNT = "bpe.extension_min_count"
KEEP_LINES = "bpe.extension_keep_source_lines"
# The tokenizer_config.json entry that says why an extended SentencePiece source has no tokenizer.model.
NO_SLOW_MODEL = "ramen_no_sentencepiece_model"


@dataclass(frozen=True)
class NewToken:
    """A vocabulary entry the extension added."""

    id: int
    token: str  # as tokenizer.json stores it (the byte-level alphabet, or '▁' for a SentencePiece space)
    merge: tuple[str, ...]  # the appended merge that forms it; () for a character new to the vocabulary
    source_tokens: tuple[str, ...]  # the source tokens it was merged from, in order
    source_ids: tuple[int, ...]
    count: int  # how often the merge applied in the corpus when it was learned


def parse_merges(merges, *, setting: str, where: str) -> tuple[list[tuple[str, str]], bool]:
    """The merges as pairs, and whether tokenizer.json stores them as "a b" strings (older files)."""
    if not isinstance(merges, list):
        raise ConfigError(setting, f"{where}: model.merges is a {type(merges).__name__}, not a list",
                          "use a tokenizer.json saved by the Hugging Face tokenizers library")
    as_strings = bool(merges) and isinstance(merges[0], str)
    pairs = []
    for index, merge in enumerate(merges):
        if as_strings and isinstance(merge, str) and len(merge.split(" ")) == 2:
            left, right = merge.split(" ")
        elif (not as_strings and isinstance(merge, list) and len(merge) == 2
              and all(isinstance(part, str) for part in merge)):
            left, right = merge
        else:
            raise ConfigError(setting, f"{where}: model.merges[{index}] is {merge!r}",
                              "every merge must be one shape: all \"left right\" strings or all "
                              "[left, right] pairs")
        if not left or not right:
            raise ConfigError(setting, f"{where}: model.merges[{index}] {merge!r} has an empty side")
        pairs.append((left, right))
    return pairs, as_strings


# A SentencePiece word: '▁'s and what follows up to the next '▁' (or a text's trailing '▁'s).
SENTENCEPIECE_WORD = re.compile(f"{SPACE}*[^{SPACE}]+|{SPACE}+")


def word_counts(lines: Iterable[str], backend, added: list[str], sentencepiece: bool = False) -> collections.Counter:
    """Pre-tokenized words (byte-level strings, or SentencePiece words) by frequency; added tokens'
    strings cut out as the encoder does."""
    splitter = re.compile("|".join(re.escape(token) for token in sorted(added, key=len, reverse=True))) \
        if added else None
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    counts: collections.Counter = collections.Counter()
    for line, repeats in collections.Counter(lines).items():  # a repeated line is pre-tokenized once
        for part in (splitter.split(line) if splitter else (line,)):
            if not part:
                continue
            text = normalizer.normalize_str(part) if normalizer is not None else part
            for word, _ in (pre_tokenizer.pre_tokenize_str(text) if pre_tokenizer is not None else [(text, None)]):
                for piece in (SENTENCEPIECE_WORD.findall(word) if sentencepiece else (word,)):
                    counts[piece] += repeats
    return counts


def byte_pieces(char: str) -> list[str]:
    """The byte-fallback pieces that spell ``char`` (``<0xCE>``, ``<0xB1>`` for α)."""
    return [BYTE_PIECES[byte] for byte in char.encode("utf-8")]


class ContinuedBPE:
    """Pair counts over word types, kept up to date merge by merge."""

    def __init__(self, words: collections.Counter, source_model, ranks: dict[tuple[str, str], int],
                 vocab: set[str], forbidden: set[str], ignore_merges: bool,
                 blocked: frozenset[tuple[str, str]] = frozenset(), characters: Iterable[str] = (),
                 unmergeable: frozenset[str] = frozenset()):
        """``characters``: those that may enter the vocabulary as themselves (the source spells them as
        byte pieces); ``unmergeable``: tokens never half of a learned pair (byte pieces, the unknown token)."""
        self.ranks = dict(ranks)
        self.vocab = set(vocab)
        self.forbidden = forbidden
        self.blocked = blocked
        self.unmergeable = unmergeable
        self.ignore_merges = ignore_merges
        self.words = list(words)
        self.freq = list(words.values())
        self.segments = [[token.value for token in source_model.tokenize(word)] for word in words]
        self.word_index = {word: index for index, word in enumerate(words)}
        self.pairs: dict[tuple[str, str], int] = collections.defaultdict(int)
        self.where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
        for index, tokens in enumerate(self.segments):
            for pair in zip(tokens, tokens[1:]):
                self.pairs[pair] += self.freq[index]
                self.where[pair].add(index)
        self.heap = [(-count, pair) for pair, count in self.pairs.items()]
        heapq.heapify(self.heap)
        allowed = set(characters)
        self.characters: collections.Counter = collections.Counter()
        self.character_where: dict[str, set[int]] = collections.defaultdict(set)
        for index, word in enumerate(self.words):
            for char in allowed.intersection(word):
                self.characters[char] += word.count(char) * self.freq[index]
                self.character_where[char].add(index)

    def corpus_tokens(self) -> int:
        """Tokens of the corpus as segmented now."""
        return sum(len(tokens) * freq for tokens, freq in zip(self.segments, self.freq))

    def best(self, min_frequency: int) -> tuple[tuple[str, ...], int] | None:
        """The most frequent learnable pair (ties: the smallest strings) or new character (as a
        1-tuple; it wins ties), or None below ``min_frequency``."""
        found = None
        while self.heap:
            negative, pair = self.heap[0]
            if (self.pairs.get(pair, 0) != -negative or pair in self.ranks or pair in self.blocked
                    or pair[0] + pair[1] in self.forbidden or pair[0] in self.unmergeable
                    or pair[1] in self.unmergeable or SPACE in (pair[0] + pair[1]).lstrip(SPACE)):
                heapq.heappop(self.heap)  # stale, already merged, or never learnable
                continue
            found = (pair, -negative)
            break
        if self.characters:
            char, count = max(self.characters.items(), key=lambda item: (item[1], -ord(item[0])))
            if found is None or count >= found[1]:
                found = ((char,), count)
        return found if found is not None and found[1] >= min_frequency else None

    def spell(self, word: str) -> list[str]:
        """``word``'s characters, each not in the vocabulary as its byte pieces (byte fallback)."""
        return [piece for char in word for piece in ((char,) if char in self.vocab else byte_pieces(char))]

    def settle(self, tokens: list[str]) -> list[str]:
        """Apply the lowest-ranked applicable merge, leftmost first, until none applies (the HF BPE encoder)."""
        if self.ignore_merges and len(tokens) > 1 and "".join(tokens) in self.vocab:
            return ["".join(tokens)]
        while len(tokens) > 1:
            best_rank, at = None, -1
            for position in range(len(tokens) - 1):
                rank = self.ranks.get((tokens[position], tokens[position + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, at = rank, position
            if best_rank is None:
                break
            tokens[at:at + 2] = [tokens[at] + tokens[at + 1]]
        return tokens

    def merge(self, pair: tuple[str, ...]) -> bool:
        """Append ``pair`` as the next merge, or add a 1-tuple's character to the vocabulary, and
        resegment the words it touches; True if its result is new."""
        if len(pair) == 1:  # the character's words are spelled anew, the character now whole
            self.vocab.add(pair[0])
            del self.characters[pair[0]]
            self._resegment(self.character_where.pop(pair[0], set()), fresh=True)
            return True
        self.ranks[pair] = len(self.ranks)
        result = pair[0] + pair[1]
        is_new = result not in self.vocab
        self.vocab.add(result)
        touched = set(self.where.get(pair, ()))
        if self.ignore_merges and result in self.word_index:  # the whole word is now one token
            touched.add(self.word_index[result])
        self._resegment(touched)
        return is_new

    def _resegment(self, touched: set[int], fresh: bool = False) -> None:
        """Segment the ``touched`` words again (from their characters when ``fresh``) and update the counts."""
        changed = set()
        for index in touched:
            old = self.segments[index]
            # A new merge ranks after every merge, so settling the current segmentation equals
            # encoding the word from scratch; a new character changes the word's first symbols.
            new = self.settle(self.spell(self.words[index]) if fresh else list(old))
            if new == old:
                continue
            weight = self.freq[index]
            old_pairs = collections.Counter(zip(old, old[1:]))
            new_pairs = collections.Counter(zip(new, new[1:]))
            for key in old_pairs.keys() | new_pairs.keys():
                delta = (new_pairs[key] - old_pairs[key]) * weight
                if delta:
                    self.pairs[key] += delta
                    changed.add(key)
                if key not in new_pairs:
                    self.where[key].discard(index)
                elif key not in old_pairs:
                    self.where[key].add(index)
            self.segments[index] = new
        for key in changed:
            count = self.pairs[key]
            if count > 0:
                heapq.heappush(self.heap, (-count, key))
            else:
                del self.pairs[key]


def kept_words(lines: Iterable[str], backend, added: list[str],
               sentencepiece: bool = False) -> tuple[frozenset[tuple[str, str]], set[str]]:
    """The pairs side by side in the source segmentation of the words of ``lines``, and the words."""
    words = word_counts(lines, backend, added, sentencepiece)
    blocked = set()
    for word in words:
        tokens = [token.value for token in backend.model.tokenize(word)]
        blocked.update(zip(tokens, tokens[1:]))
    return frozenset(blocked), set(words)


def extend_spec(spec: dict, lines: Iterable[str], *, new_tokens: int, min_frequency: int = 2,
                keep: Iterable[str] = (), setting: str = "variants.<variant>.vocabulary",
                where: str = "source tokenizer") -> tuple[dict, list[NewToken], dict]:
    """The tokenizer.json ``spec`` extended by up to ``new_tokens`` entries learned on ``lines``,
    none of which applies to a word of ``keep`` (text in the source's language).

    Returns the new spec, the new tokens in id order and summary figures. ``spec`` is not changed.
    """
    from tokenizers import Tokenizer

    if new_tokens < 1:
        raise ConfigError(NEW_TOKENS, f"must be >= 1, got {new_tokens}")
    if min_frequency < 1:
        raise ConfigError(MIN_COUNT, f"must be >= 1, got {min_frequency}")
    sentencepiece = check_extensible_spec(spec, setting=setting, where=where) == SENTENCEPIECE
    model = spec["model"]
    pairs, as_strings = parse_merges(model.get("merges", []), setting=setting, where=where)
    source_vocab: dict[str, int] = model["vocab"]
    added = {str(token["content"]): int(token["id"]) for token in spec.get("added_tokens") or []}
    next_id = max([*source_vocab.values(), *added.values()]) + 1
    backend = Tokenizer.from_str(json.dumps(spec))
    words = word_counts(lines, backend, list(added), sentencepiece)
    if not words:
        raise InputFormatError(where, None, "no foreign text to learn new tokens from", "check the corpus")
    ignore_merges = bool(model.get("ignore_merges"))
    blocked, kept = kept_words(keep, backend, list(added), sentencepiece)
    # With ignore_merges a word spelled by a vocabulary entry is that one token, merges or not.
    forbidden = set(added) | (kept if ignore_merges else set())
    characters, unmergeable = set(), frozenset()
    if sentencepiece:
        # A character of a kept word stays bytes: the word would change. One whose byte pieces the
        # source lacks has no source rows to start from.
        kept_chars = set().union(*kept) if kept else set()
        characters = {char for word in words for char in word if char not in source_vocab and char not in added
                      and char not in kept_chars and all(piece in source_vocab for piece in byte_pieces(char))}
        unmergeable = frozenset(BYTE_PIECES) | {str(model.get("unk_token"))}
    learner = ContinuedBPE(words, backend.model, {pair: rank for rank, pair in enumerate(pairs)},
                           set(source_vocab) | set(added), forbidden, ignore_merges, blocked, characters, unmergeable)
    tokens_before = learner.corpus_tokens()
    merges: list[tuple[str, str]] = []
    learned: list[tuple[str, tuple[str, str], int]] = []
    built_from: dict[str, tuple[str, str]] = {}
    while len(learned) < new_tokens:
        found = learner.best(min_frequency)
        if found is None:
            break
        pair, count = found
        if len(pair) == 2:
            merges.append(pair)
        if learner.merge(pair):
            learned.append(("".join(pair), pair, count))
            built_from["".join(pair)] = pair
    if not learned:  # the "extended" model would be the source, trained and exported as a transfer
        raise _no_new_token(learner, min_frequency, bool(blocked), setting)

    def pieces(token: str) -> list[str]:
        if token in source_vocab:
            return [token]
        if len(built_from[token]) == 1:  # a new character: its byte-fallback pieces
            return byte_pieces(token)
        left, right = built_from[token]
        return pieces(left) + pieces(right)

    new = [NewToken(id=next_id + offset, token=token, merge=pair if len(pair) == 2 else (),
                    source_tokens=tuple(pieces(token)),
                    source_ids=tuple(source_vocab[piece] for piece in pieces(token)), count=count)
           for offset, (token, pair, count) in enumerate(learned)]
    extended = json.loads(json.dumps(spec))
    # Added tokens outside the model vocabulary (Llama 3 puts them after it) go into it at their ids:
    # on loading, tokenizers renumbers such a token to the model's size, which the new ids now exceed.
    outside = {content: index for content, index in added.items() if content not in source_vocab}
    extended["model"]["vocab"] = {**source_vocab, **outside, **{token.token: token.id for token in new}}
    extended["model"]["merges"] = list(model.get("merges", [])) + [
        f"{left} {right}" if as_strings else [left, right] for left, right in merges]
    characters_added = sum(1 for token in new if not token.merge)
    summary = {"kind": SENTENCEPIECE if sentencepiece else BYTE_LEVEL, "new_tokens": len(new),
               "requested_new_tokens": new_tokens, "appended_merges": len(merges),
               "merges_to_existing_tokens": len(merges) - (len(new) - characters_added),
               "new_characters": characters_added, "source_vocab_size": next_id,
               "vocab_size": next_id + len(new), "word_types": len(words), "words": sum(words.values()),
               "corpus_tokens_before": tokens_before, "corpus_tokens_after": learner.corpus_tokens(),
               "kept_word_types": len(kept), "blocked_pairs": len(blocked),
               # bytes the source has no symbol (or byte piece) for: text holding them encodes no better
               "source_missing_bytes": [f"0x{byte:02x}" for byte in missing_byte_symbols(spec)]}
    return extended, new, summary


def _no_new_token(learner: ContinuedBPE, min_frequency: int, keeps_words: bool, setting: str) -> ConfigError:
    """Why no new token was learned, naming the setting that bounds it."""
    problem = "the extension would add no token to the source's vocabulary"
    kept = f" (pairs within words of the English text that {KEEP_LINES} keeps do not count)" if keeps_words else ""
    found = learner.best(1)
    if found is not None:
        count = found[1]
        return ConfigError(MIN_COUNT, f"{problem}: the most frequent pair of tokens in the foreign text occurs "
                           f"{count} times, fewer than {min_frequency}{kept}",
                           f"lower {MIN_COUNT} to at most {count}, or give more foreign text")
    if keeps_words and any(count > 0 and pair not in learner.ranks for pair, count in learner.pairs.items()):
        return ConfigError(KEEP_LINES, f"{problem}: every pair of tokens in the foreign text is also a pair "
                           "within a word of the English text kept as the source encodes it",
                           f"lower {KEEP_LINES} (0 keeps none), or check that the foreign text is not English")
    return ConfigError(setting, f"{problem}: the source already encodes every word of the foreign text as one "
                       "token", "give more foreign text, or use vocabulary: replace")


def extend_tokenizer(source, corpus: str | os.PathLike | Iterable[str], out_dir: str | os.PathLike, *,
                     new_tokens: int, min_frequency: int = 2, keep: str | os.PathLike | Iterable[str] = (),
                     keep_lines: int | None = None, setting: str = "variants.<variant>.vocabulary") -> dict:
    """Save ``source`` (a tokenizer directory, GGUF source or loaded fast tokenizer) extended on ``corpus``.

    ``corpus`` is a (possibly gzipped) text file or the lines themselves; ``keep`` likewise, text in
    the source's language whose words no new merge may touch (its first ``keep_lines`` lines; 0: none
    is read). ``out_dir`` gets a standard tokenizer directory and ``vocab_extension.json``: the new
    ids, each with its string and its segmentation into source tokens (what an initialiser of the new
    rows reads). Returns that record.

    A SentencePiece source's tokenizer.model is not exported: it lacks the new pieces, and a
    SentencePiece BPE merges by piece score alone, which would join any two adjacent pieces that
    spell a new one, not only its learned merge. tokenizer.json is the tokenizer (transformers 5
    loads it for ``use_fast=False`` too), and tokenizer_config.json says so (:data:`NO_SLOW_MODEL`).
    """
    from tokenizers import Tokenizer

    from ramen.vocab.byte_bpe import fast_tokenizer_like
    from ramen.vocab.tokenizer import load_tokenizer

    where = str(getattr(source, "name_or_path", source))
    if isinstance(source, (str, os.PathLike)):
        source = load_tokenizer(source)
    if not getattr(source, "is_fast", False):
        raise ConfigError(setting, f"{where}: the source tokenizer has no fast (tokenizers) backend",
                          f"vocabulary extension supports {SUPPORTED}")
    lines = read_lines(corpus) if isinstance(corpus, (str, os.PathLike)) else corpus
    kept = read_lines(keep) if isinstance(keep, (str, os.PathLike)) else keep
    if keep_lines is not None:
        kept = itertools.islice(kept, keep_lines)
    spec = json.loads(source.backend_tokenizer.to_str())
    extended, new, summary = extend_spec(spec, lines, new_tokens=new_tokens, min_frequency=min_frequency,
                                         keep=kept, setting=setting, where=where)
    backend = Tokenizer.from_str(json.dumps(extended))
    renumbered = [token for token, index in source.get_vocab().items() if backend.token_to_id(token) != index]
    if renumbered:  # the source's rows would no longer be found by id: a bug worth stopping for
        raise RuntimeError(f"{where}: the extension renumbers source tokens {renumbered[:5]}")
    wrapped = fast_tokenizer_like(backend, source)
    record = {**summary, "new_ids": [token.id for token in new],
              "tokens": [{**asdict(token), "merge": list(token.merge), "source_tokens": list(token.source_tokens),
                          "source_ids": list(token.source_ids)} for token in new]}
    with atomic_path(out_dir) as tmp:
        wrapped.save_pretrained(tmp)
        if record["kind"] == SENTENCEPIECE:
            config_file = tmp / "tokenizer_config.json"
            config = json.loads(config_file.read_text(encoding="utf-8"))
            config[NO_SLOW_MODEL] = (f"tokenizer.model is not written: the extension's new pieces and merges "
                                     f"are in tokenizer.json only (see {RECORD})")
            config_file.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        (tmp / RECORD).write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return record
