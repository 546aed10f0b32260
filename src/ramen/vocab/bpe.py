"""Foreign subword vocabulary: fastBPE codes turned into a Hugging Face tokenizer.

fastBPE learns the merges (as in the paper); the merges are then loaded into a
`tokenizers` BPE model with the same ``</w>`` end-of-word convention, so the
exported tokenizer segments text exactly as ``fastbpe applybpe`` does and loads
with ``AutoTokenizer.from_pretrained``.

Text is normalised like the source model's tokenizer would (NFC, CJK characters
split, optional lowercasing) but accents are always kept: an uncased English
model strips them, a French vocabulary must not.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines, write_lines
from ramen.vocab.tokenizer import load_tokenizer

END_OF_WORD = "</w>"


def make_normalizer(lowercase: bool) -> normalizers.Normalizer:
    """NFC, control-character cleanup, CJK characters as separate words; accents kept."""
    return normalizers.Sequence(
        [
            normalizers.NFC(),
            normalizers.BertNormalizer(
                clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=lowercase
            ),
        ]
    )


def make_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Whitespace and punctuation splitting, as BERT's basic tokenizer does."""
    return pre_tokenizers.BertPreTokenizer()


def pretokenize_lines(lines: Iterable[str], lowercase: bool) -> Iterator[str]:
    """Yield each line as space-separated pre-tokens: the input fastBPE learns from."""
    normalizer = make_normalizer(lowercase)
    pre_tokenizer = make_pre_tokenizer()
    for line in lines:
        words = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
        yield " ".join(word for word, _ in words)


def find_fastbpe(executable: str = "fastbpe") -> str:
    """Locate the fastBPE command-line tool (next to the running Python first)."""
    beside_python = Path(os.path.dirname(os.sys.executable)) / executable
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(executable)
    if found is None:
        raise ConfigError(
            "bpe",
            f"the fastBPE tool '{executable}' is not on PATH",
            "run `make install` or tools/install_fastbpe.sh .venv/bin",
        )
    return found


def learn_codes(pretokenized_path: str | os.PathLike, merges: int, codes_path: str | os.PathLike,
                fastbpe: str | None = None) -> int:
    """Run ``fastbpe learnbpe``; write the codes atomically and return how many were learned."""
    fastbpe = fastbpe or find_fastbpe()
    with atomic_path(codes_path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            result = subprocess.run(
                [fastbpe, "learnbpe", str(merges), str(pretokenized_path)],
                stdout=out, stderr=subprocess.PIPE, text=True,
            )
        if result.returncode != 0:
            raise ConfigError(
                "bpe.merges",
                f"fastBPE learnbpe failed on {pretokenized_path} with {merges} merges "
                f"(exit {result.returncode}): {result.stderr.strip()[-500:]}",
                "fastBPE crashes on an empty corpus; check the prepared text for this language",
            )
        with open(tmp, encoding="utf-8") as handle:
            codes = handle.read().splitlines()
        # Once no pair is left, fastBPE pads the file with zero-count repeats of one pair;
        # they make `fastbpe applybpe` abort and would demote that merge in the tokenizer.
        learned = next((i for i, line in enumerate(codes) if line.rsplit(" ", 1)[-1] == "0"), len(codes))
        if learned < len(codes):
            write_lines(tmp, codes[:learned])
    return learned


def read_codes(codes_path: str | os.PathLike) -> list[tuple[str, str]]:
    """Read fastBPE codes (``left right count`` per line) in merge order."""
    merges = []
    for number, line in enumerate(read_lines(codes_path), start=1):
        parts = line.split(" ")
        if len(parts) != 3:
            raise InputFormatError(codes_path, number, f"expected 'left right count', got {line!r}",
                                   "the file must come from `fastbpe learnbpe`")
        merges.append((parts[0], parts[1]))
    return merges


def count_symbols(pretokenized_lines: Iterable[str]) -> collections.Counter:
    """Count the initial BPE symbols: word-internal characters and word-final ``c</w>``."""
    words = collections.Counter()
    for line in pretokenized_lines:
        words.update(line.split())
    symbols = collections.Counter()
    for word, count in words.items():
        for char in word[:-1]:
            symbols[char] += count
        symbols[word[-1] + END_OF_WORD] += count
    return symbols


@dataclass
class Vocabulary:
    tokens: list[str]
    merges: list[tuple[str, str]]


def build_vocabulary(symbol_counts: collections.Counter, merges: list[tuple[str, str]],
                     special_tokens: list[str], max_size: int, min_symbol_count: int = 1) -> Vocabulary:
    """Special tokens, then symbols by frequency, then merge results in merge order.

    Truncating to ``max_size`` drops the latest (rarest) merges first, then the
    rarest symbols; a merge is kept only if both its parts are kept, so every
    kept merge can actually fire.
    """
    if max_size <= len(special_tokens):
        raise ConfigError("bpe.max_vocab_size", f"{max_size} leaves no room beyond the special tokens")
    tokens = list(dict.fromkeys(special_tokens))
    known = set(tokens)
    for symbol, count in sorted(symbol_counts.items(), key=lambda item: (-item[1], item[0])):
        if count < min_symbol_count or len(tokens) >= max_size:
            break
        if symbol not in known:
            tokens.append(symbol)
            known.add(symbol)
    kept_merges = []
    for left, right in merges:
        if len(tokens) >= max_size:
            break
        if left not in known or right not in known:
            continue
        kept_merges.append((left, right))
        merged = left + right
        if merged not in known:
            tokens.append(merged)
            known.add(merged)
    return Vocabulary(tokens=tokens, merges=kept_merges)


def special_tokens_of(source_tokenizer) -> dict[str, str]:
    """The source tokenizer's special tokens by role (cls, sep, pad, unk, mask, bos, eos)."""
    roles = {}
    for role in ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token", "bos_token", "eos_token"):
        value = getattr(source_tokenizer, role, None)
        if value:
            roles[role] = str(value)
    for role in ("pad_token", "unk_token", "mask_token"):
        if role not in roles:
            raise ConfigError("source.model", f"the source tokenizer defines no {role}",
                              "RAMEN needs a masked-LM tokenizer with pad, unk and mask tokens")
    return roles


def remap_post_processor(source_backend: Tokenizer, token_to_id: dict[str, int]):
    """The source's [CLS]/[SEP] template, with special-token ids of the new vocabulary."""
    spec = json.loads(source_backend.to_str())["post_processor"]
    if spec is None:
        return None

    def remap(node):
        if isinstance(node, dict):
            if "ids" in node and "tokens" in node:
                return {**node, "ids": [token_to_id[t] for t in node["tokens"]]}
            return {key: remap(value) for key, value in node.items()}
        if isinstance(node, list):
            if len(node) == 2 and isinstance(node[0], str) and isinstance(node[1], int) and node[0] in token_to_id:
                return [node[0], token_to_id[node[0]]]
            return [remap(value) for value in node]
        return node

    remapped = remap(spec)
    probe = Tokenizer(BPE(vocab={"a": 0}, merges=[]))
    payload = json.loads(probe.to_str())
    payload["post_processor"] = remapped
    return Tokenizer.from_str(json.dumps(payload)).post_processor


def build_tokenizer(vocabulary: Vocabulary, roles: dict[str, str], lowercase: bool,
                    source_backend: Tokenizer | None = None) -> Tokenizer:
    """A `tokenizers` BPE tokenizer equivalent to applying the fastBPE codes."""
    token_to_id = {token: index for index, token in enumerate(vocabulary.tokens)}
    model = BPE(vocab=token_to_id, merges=vocabulary.merges, unk_token=roles["unk_token"],
                end_of_word_suffix=END_OF_WORD)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = make_normalizer(lowercase)
    tokenizer.pre_tokenizer = make_pre_tokenizer()
    tokenizer.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
    special = [token for token in vocabulary.tokens if token in set(roles.values())]
    tokenizer.add_special_tokens(special)
    post = remap_post_processor(source_backend, token_to_id) if source_backend is not None else None
    if post is None and "cls_token" in roles and "sep_token" in roles:
        cls, sep = roles["cls_token"], roles["sep_token"]
        post = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, token_to_id[cls]), (sep, token_to_id[sep])],
        )
    if post is not None:
        tokenizer.post_processor = post
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, roles: dict[str, str], model_max_length: int,
                   model_input_names: list[str], out_dir: str | os.PathLike) -> None:
    """Save as a Hugging Face tokenizer directory (loads with AutoTokenizer)."""
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length,
                                      model_input_names=list(model_input_names), **roles)
    with atomic_path(out_dir) as tmp:
        wrapped.save_pretrained(tmp)


def train_foreign_tokenizer(corpus_path: str | os.PathLike, source_model_dir: str | os.PathLike,
                            out_dir: str | os.PathLike, codes_path: str | os.PathLike, *,
                            merges: int, max_vocab_size: int | None, lowercase: bool | None,
                            min_symbol_count: int = 2, work_dir: str | os.PathLike | None = None) -> dict:
    """Learn BPE on a prepared corpus and save a tokenizer compatible with the source model.

    ``max_vocab_size`` defaults to the source vocabulary size (the paper keeps the
    foreign vocabulary no larger than the English one); ``lowercase`` defaults to
    the source tokenizer's casing.
    """
    source = load_tokenizer(source_model_dir)
    roles = special_tokens_of(source)
    if lowercase is None:
        lowercase = source_is_uncased(source)
    if max_vocab_size is None:
        max_vocab_size = len(source)
    work_dir = Path(work_dir or Path(codes_path).parent)
    work_dir.mkdir(parents=True, exist_ok=True)
    pretokenized = work_dir / "pretokenized.txt"
    write_lines(pretokenized, pretokenize_lines(read_lines(corpus_path), lowercase))
    learned = learn_codes(pretokenized, merges, codes_path)
    symbols = count_symbols(read_lines(pretokenized))
    vocabulary = build_vocabulary(symbols, read_codes(codes_path), list(dict.fromkeys(roles.values())),
                                  max_vocab_size, min_symbol_count)
    tokenizer = build_tokenizer(vocabulary, roles, lowercase, getattr(source, "backend_tokenizer", None))
    save_tokenizer(tokenizer, roles, source.model_max_length, source.model_input_names, out_dir)
    return {"merges_learned": learned, "merges_kept": len(vocabulary.merges),
            "vocab_size": len(vocabulary.tokens), "symbols": len(symbols), "lowercase": lowercase}


def source_is_uncased(tokenizer) -> bool:
    """True when the tokenizer maps 'A' and 'a' to the same tokens."""
    return tokenizer.tokenize("Abc XYZ") == tokenizer.tokenize("abc xyz")
