"""What a source checkpoint is, read from its metadata and file headers only: no weights loaded,
no torch, a fraction of a second even for a large model. The job graph reads every source this
way (ramen.families), so a checkpoint that cannot load fails before the first job.

:func:`read_checkpoint` returns the checkpoint's config (``config.json``, or the GGUF metadata as
one); :func:`check_weights` checks that its weights are there and that their headers lie within
their files: a safetensors file's JSON header and every tensor's data range, a GGUF file's header,
metadata and tensor table and every tensor's data range. :func:`read_tokenizer` returns the special
tokens a tokenizer names and whether they are in its vocabulary.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ramen.data.checkpoints import SourceLocation, locate_source
from ramen.errors import ConfigError

SAFETENSORS = "model.safetensors"
WEIGHT_FILES = (SAFETENSORS, "pytorch_model.bin")  # each also sharded, with a .index.json
SPECIAL_ROLES = ("bos", "eos", "pad", "unk", "sep", "cls", "mask")


@dataclass
class Checkpoint:
    """A source checkpoint's location, its config as a mapping and the file that holds it."""

    location: SourceLocation
    config: dict
    config_file: Path
    gguf_metadata: dict | None = None  # the GGUF key-value pairs (tokenizer.ggml.tokens kept whole)


@dataclass
class TokenizerFiles:
    """A tokenizer's special tokens by role (as its files name them) and its vocabulary."""

    file: Path
    specials: dict[str, str] = field(default_factory=dict)
    vocabulary: set[str] | None = None  # None: not readable without its library (sentencepiece)


def read_checkpoint(path, setting: str = "source.model") -> Checkpoint:
    """The config of the checkpoint at ``path`` (a GGUF file's header and tensor table checked:
    they hold its config); ConfigError naming ``setting`` and the file otherwise."""
    location = locate_source(path, setting)
    if location.gguf_file:
        gguf = location.directory / location.gguf_file
        metadata = read_gguf_header(gguf, setting)
        architecture = metadata.get("general.architecture", "")
        return Checkpoint(location, {"model_type": architecture, "architectures": []}, gguf, metadata)
    config_file = location.directory / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError(setting, f"{config_file} cannot be read as JSON ({error})",
                          "download the model again") from None
    if not isinstance(config, dict):
        raise ConfigError(setting, f"{config_file} is not a JSON object", "download the model again")
    return Checkpoint(location, config, config_file)


def check_weights(checkpoint: Checkpoint, setting: str = "source.model") -> None:
    """Weights beside config.json, every safetensors file's header within the file (a GGUF
    file's were checked as it was read)."""
    if checkpoint.gguf_metadata is not None:
        return
    directory = checkpoint.location.directory
    for name in WEIGHT_FILES:
        index = directory / f"{name}.index.json"
        if (directory / name).is_file():
            files = [directory / name]
        elif index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise ConfigError(setting, f"{index} is not a weight index ({error})",
                                  "download the model again") from None
            files = [directory / shard for shard in shards]
            for shard in files:
                if not shard.is_file():
                    raise ConfigError(setting, f"{index} lists {shard.name}, which is not in {directory}",
                                      "download the model again: a shard is missing")
        else:
            continue
        if name == SAFETENSORS:
            for file in files:
                check_safetensors_header(file, setting)
        return  # a PyTorch .bin file is a pickle: accepted by its existence
    raise ConfigError(setting, f"{directory} holds config.json but no weights ({' or '.join(WEIGHT_FILES)}, or "
                      "sharded with an .index.json)", "download the whole model, weights included")


def check_safetensors_header(path: Path, setting: str) -> dict:
    """A safetensors file's header (8-byte length, then JSON) and every tensor's data range lie
    within the file; returns the header."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise _damaged(setting, path, f"is {size} bytes long, shorter than a safetensors header")
        length = struct.unpack("<Q", head)[0]
        if length > size - 8:
            raise _damaged(setting, path, f"declares a {length}-byte header but the file is {size} bytes")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError) as error:
            raise _damaged(setting, path, f"has a header that is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise _damaged(setting, path, "has a header that is not a JSON object")
    data = size - 8 - length
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = tensor["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise _damaged(setting, path, f"has no data offsets for tensor '{name}'") from None
        if not 0 <= start <= end <= data:
            raise _damaged(setting, path, f"ends before the data of tensor '{name}' (bytes {start}-{end} of a "
                           f"{data}-byte data section)")
    return header


def _damaged(setting: str, path: Path, problem: str) -> ConfigError:
    return ConfigError(setting, f"{path} {problem}", "the file is damaged or truncated; download it again")


# GGUF metadata value types (ggml's gguf.h): scalar struct formats; 8 is a string, 9 an array.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_KEEP_ARRAYS = ("tokenizer.ggml.tokens",)  # the one array the checks read; others are skipped


class _Reader:
    """Reads a GGUF header from a memory map; a read past the end of the file is a truncation
    naming the file."""

    def __init__(self, buffer, path: Path, setting: str):
        self.buffer, self.size, self.position, self.path, self.setting = buffer, len(buffer), 0, path, setting

    def _need(self, count: int) -> None:
        if count > self.size - self.position:
            raise _damaged(self.setting, self.path, f"ends inside its header (at byte {self.position} of "
                           f"{self.size})")

    def take(self, count: int) -> bytes:
        self._need(count)
        self.position += count
        return self.buffer[self.position - count:self.position]

    def number(self, fmt: str):
        size = struct.calcsize(fmt)
        self._need(size)
        self.position += size
        return struct.unpack_from("<" + fmt, self.buffer, self.position - size)[0]

    def string(self) -> str:
        return bytes(self.take(self.number("Q"))).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self._need(8)
        length = struct.unpack_from("<Q", self.buffer, self.position)[0]
        self.position += 8
        self._need(length)
        self.position += length

    def value(self, kind: int, keep: bool = True):
        if kind in _GGUF_SCALARS:
            return self.number(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return self.string()
        if kind == _GGUF_ARRAY:
            item, count = self.number("I"), self.number("Q")
            if not keep and item in _GGUF_SCALARS:
                self.take(count * struct.calcsize(_GGUF_SCALARS[item]))
                return count
            if not keep and item == _GGUF_STRING:
                for _ in range(count):
                    self.skip_string()
                return count
            return [self.value(item, keep) for _ in range(count)]
        raise _damaged(self.setting, self.path, f"has a metadata value of unknown type {kind}")


def read_gguf_header(path: Path, setting: str = "source.model") -> dict:
    """A GGUF file's metadata, having checked its magic, version, tensor table and that every
    tensor's data lies within the file (tensor data itself is not read)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # numpy only, no torch

    size = path.stat().st_size
    if size < 4:
        raise _damaged(setting, path, f"is {size} bytes long, shorter than a GGUF header")
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        reader = _Reader(memoryview(buffer), path, setting)
        try:
            magic = bytes(reader.take(4))
            if magic != b"GGUF":
                raise _damaged(setting, path, f"is not a GGUF file (it starts with {magic!r})")
            version = reader.number("I")
            if version not in (2, 3):
                raise ConfigError(setting, f"{path} is GGUF version {version}; versions 2 and 3 are read",
                                  "convert the model with a current llama.cpp")
            tensors, entries = reader.number("Q"), reader.number("Q")
            metadata = {}
            for _ in range(entries):
                key = reader.string()
                metadata[key] = reader.value(reader.number("I"), keep=key in _KEEP_ARRAYS)
            table = []
            for _ in range(tensors):
                name = reader.string()
                dims = [reader.number("Q") for _ in range(reader.number("I"))]
                table.append((name, dims, reader.number("I"), reader.number("Q")))
            end_of_table = reader.position
        finally:
            reader.buffer.release()
    alignment = metadata.get("general.alignment", 32) or 32
    start = -(-end_of_table // alignment) * alignment
    for name, dims, kind, offset in table:
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise _damaged(setting, path, f"gives tensor '{name}' an unknown type {kind}") from None
        count = 1
        for dim in dims:
            count *= dim
        end = start + offset + count // block * block_bytes
        if end > size:
            raise _damaged(setting, path, f"ends before the data of tensor '{name}' (its data would end at byte "
                           f"{end}; the file has {size})")
    return metadata


def read_tokenizer(checkpoint: Checkpoint, setting: str = "source.model") -> TokenizerFiles:
    """The checkpoint's tokenizer as its files describe it: special tokens by role, and the
    vocabulary. ConfigError naming the file when it cannot be read."""
    if checkpoint.gguf_metadata is not None:
        return _gguf_tokenizer(checkpoint, setting)
    directory = checkpoint.location.directory
    specials, tokenizer_class = _named_specials(directory, setting)
    fast = directory / "tokenizer.json"
    if fast.is_file():
        from tokenizers import Tokenizer  # Rust, no torch

        try:
            backend = Tokenizer.from_file(str(fast))
        except Exception as error:  # the library raises a bare Exception for a bad file
            raise ConfigError(setting, f"{fast} does not load as a tokenizer ({error})",
                              "download the model again") from None
        vocabulary = set(backend.get_vocab(with_added_tokens=True))
        return TokenizerFiles(fast, _with_defaults(specials, tokenizer_class, vocabulary), vocabulary)
    for name in ("vocab.txt", "vocab.json"):
        file = directory / name
        if file.is_file():
            try:
                text = file.read_text(encoding="utf-8")
                vocabulary = set(json.loads(text)) if name.endswith(".json") else set(text.splitlines())
            except (OSError, UnicodeDecodeError, ValueError) as error:
                raise ConfigError(setting, f"{file} cannot be read ({error})", "download the model again") from None
            added = directory / "added_tokens.json"
            if added.is_file():
                vocabulary |= set(json.loads(added.read_text(encoding="utf-8")))
            return TokenizerFiles(file, _with_defaults(specials, tokenizer_class, vocabulary), vocabulary)
    sentencepiece = directory / "tokenizer.model"
    if sentencepiece.is_file():
        return TokenizerFiles(sentencepiece, specials, None)
    raise ConfigError(setting, f"{directory} holds no tokenizer (tokenizer.json, vocab.txt, vocab.json or "
                      "tokenizer.model)", "download the whole model, its tokenizer included")


def _named_specials(directory: Path, setting: str) -> tuple[dict[str, str], str | None]:
    """Special tokens by role from tokenizer_config.json and special_tokens_map.json, and the class."""
    specials, tokenizer_class = {}, None
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        file = directory / name
        if not file.is_file():
            continue
        try:
            values = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ConfigError(setting, f"{file} cannot be read as JSON ({error})", "download the model again") \
                from None
        tokenizer_class = values.get("tokenizer_class", tokenizer_class)
        for role in SPECIAL_ROLES:
            token = values.get(f"{role}_token")
            if isinstance(token, dict):
                token = token.get("content")
            if isinstance(token, str):
                specials[role] = token
    return specials, tokenizer_class


# A model-specific tokenizer class fills in the special tokens its files leave out; the generic
# ones (PreTrainedTokenizerFast, TokenizersBackend) have none of their own.
_GENERIC_CLASSES = (None, "PreTrainedTokenizerFast", "TokenizersBackend")
_CLASS_DEFAULTS = {"[MASK]": ("[PAD]", "[UNK]"), "<mask>": ("<pad>", "<unk>")}


def _with_defaults(specials: dict, tokenizer_class: str | None, vocabulary: set[str]) -> dict:
    if tokenizer_class in _GENERIC_CLASSES or "mask" in specials:
        return specials
    for mask, (pad, unk) in _CLASS_DEFAULTS.items():
        if mask in vocabulary:
            return {"pad": pad, "unk": unk, "mask": mask, **specials}
    return specials


def _gguf_tokenizer(checkpoint: Checkpoint, setting: str) -> TokenizerFiles:
    metadata = checkpoint.gguf_metadata
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ConfigError(setting, f"{checkpoint.config_file} holds no tokenizer (tokenizer.ggml.tokens)",
                          "use a GGUF file converted with its tokenizer")
    specials = {}
    for role in SPECIAL_ROLES:
        token_id = metadata.get(f"tokenizer.ggml.{'padding' if role == 'pad' else 'unknown' if role == 'unk' else role}"
                                "_token_id")
        if isinstance(token_id, int) and 0 <= token_id < len(tokens):
            specials[role] = tokens[token_id]
    return TokenizerFiles(checkpoint.config_file, specials, set(tokens))


# --- the tokenizers a vocabulary extension (ramen.vocab.extend) continues ----------------------

BYTE_LEVEL_BPE = ("byte-level BPE tokenizers (a tokenizer.json with a BPE model and a ByteLevel pre-tokenizer, as "
                  "GPT-2, Llama-3, Qwen2 and SmolLM use)")
SENTENCEPIECE_BPE = ("SentencePiece-style BPE tokenizers with byte fallback (a BPE model with byte_fallback that "
                     "reads spaces as '▁', as Llama-2, Mistral, Gemma, Phi-3 and TinyLlama use)")
EXTENSIBLE = f"{BYTE_LEVEL_BPE} and {SENTENCEPIECE_BPE}"
# The two kinds check_extensible_spec tells apart.
BYTE_LEVEL, SENTENCEPIECE = "byte-level", "sentencepiece"
SPACE = "▁"  # SentencePiece's space: a word starts with it, and no piece holds it inside a word
BYTE_PIECES = tuple(f"<0x{byte:02X}>" for byte in range(256))  # SentencePiece's byte-fallback pieces


def refuse_extension(setting: str, where: str, problem: str) -> ConfigError:
    return ConfigError(setting, f"{where}: {problem}",
                       f"vocabulary extension supports {EXTENSIBLE}; use 'replace' for this source")


def _pre_tokenizer_types(node) -> list[str]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [kind for child in node.get("pretokenizers", []) for kind in _pre_tokenizer_types(child)]
    return [str(node.get("type"))]


def _writes_spaces_as_metaspace(node) -> bool:
    """True for a normaliser that turns spaces into '▁' (Replace) or prepends one (Prepend)."""
    if not node:
        return False
    if node.get("type") == "Sequence":
        return any(_writes_spaces_as_metaspace(child) for child in node.get("normalizers", []))
    if node.get("type") == "Replace":
        return node.get("content") == SPACE and (node.get("pattern") or {}).get("String") == " "
    return node.get("type") == "Prepend" and node.get("prepend") == SPACE


UNIGRAM_REASON = ("a Unigram model chooses among segmentations by piece probabilities and has no merges to "
                  "continue after")


def check_extensible_spec(spec: dict, *, setting: str, where: str) -> str:
    """The kind of a tokenizer.json an extension continues (:data:`BYTE_LEVEL` or :data:`SENTENCEPIECE`);
    ConfigError naming ``setting`` and what the tokenizer is otherwise."""
    model = spec.get("model") or {}
    kind = model.get("type")
    if kind != "BPE":
        reason = f": {UNIGRAM_REASON}" if kind == "Unigram" else ""
        raise refuse_extension(setting, where, f"the source tokenizer is a {kind} model, not BPE{reason}")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise refuse_extension(setting, where, "the source BPE marks word continuations or ends "
                               "(continuing_subword_prefix / end_of_word_suffix)")
    pre = _pre_tokenizer_types(spec.get("pre_tokenizer"))
    metaspace = "Metaspace" in pre or _writes_spaces_as_metaspace(spec.get("normalizer"))
    if "ByteLevel" in pre:
        if model.get("byte_fallback") or metaspace:
            raise refuse_extension(setting, where, "the source tokenizer is a SentencePiece-style BPE (byte fallback "
                                   "or '▁' for spaces) with a ByteLevel pre-tokenizer as well: its words and pieces "
                                   "follow neither convention")
        return BYTE_LEVEL
    if not metaspace:
        if model.get("byte_fallback"):
            raise refuse_extension(setting, where, "the source tokenizer is a BPE with byte fallback that does not "
                                   "read spaces as '▁' (no Metaspace pre-tokenizer, no Replace normaliser): its word "
                                   "boundaries are unknown")
        raise refuse_extension(setting, where, f"the source tokenizer's pre-tokenizer is {pre or 'none'}, not "
                               "ByteLevel or Metaspace")
    if not model.get("byte_fallback"):
        raise refuse_extension(setting, where, "the source tokenizer is a SentencePiece-style BPE without "
                               "byte_fallback: a character outside its vocabulary becomes its unknown token, so the "
                               "source model never read it and a new token holding it has no source pieces to "
                               "start its row from")
    inside = [piece for piece in model.get("vocab") or {} if SPACE in piece.lstrip(SPACE)]
    if inside:
        raise refuse_extension(setting, where, f"the source vocabulary has pieces with '▁' inside ({inside[:3]}): "
                               "a SentencePiece word starts at '▁', and these cross words")
    return SENTENCEPIECE


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as one printable character (used by every byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


# Each byte-level symbol and the byte it stands for.
BYTE_CHARACTERS: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}
# A byte-level BPE's first entries, one per byte. Here, torch-free, so that the memory plan
# (ramen.training.memory) and the BPE trainer (ramen.vocab.byte_bpe) share it.
BYTE_ALPHABET = len(BYTE_CHARACTERS)


def missing_byte_symbols(spec: dict) -> list[int]:
    """The bytes whose symbol (byte-level) or byte-fallback piece (SentencePiece, ``<0x41>``) a
    tokenizer.json's BPE vocabulary lacks. Real byte-level sources lack some (SmolLM2: 21, control
    bytes and bytes no UTF-8 text holds): the source cannot encode text holding them, and an
    extension keeps exactly the source's coverage."""
    vocabulary = (spec.get("model") or {}).get("vocab", {})
    if "ByteLevel" not in _pre_tokenizer_types(spec.get("pre_tokenizer")):
        return [byte for byte, piece in enumerate(BYTE_PIECES) if piece not in vocabulary]
    return sorted(byte for char, byte in BYTE_CHARACTERS.items() if char not in vocabulary)


# GGUF tokenizer types (tokenizer.ggml.model) an extension continues: transformers converts both to a
# tokenizer.json, 'llama' (SentencePiece) as a BPE with byte fallback and Metaspace.
GGUF_EXTENSIBLE = {"gpt2": BYTE_LEVEL, "llama": SENTENCEPIECE}


def check_extensible_tokenizer(checkpoint: Checkpoint, setting: str) -> None:
    """ConfigError naming ``setting`` and the file when the source's tokenizer is not one an extension
    continues (:data:`EXTENSIBLE`), read from tokenizer.json or the GGUF metadata
    (``tokenizer.ggml.model``: ``gpt2`` or ``llama``)."""
    if checkpoint.gguf_metadata is not None:
        metadata = checkpoint.gguf_metadata
        model = metadata.get("tokenizer.ggml.model")
        if model not in GGUF_EXTENSIBLE:
            reason = f": {UNIGRAM_REASON}" if model == "t5" else ""
            raise refuse_extension(setting, str(checkpoint.config_file),
                                   f"the GGUF tokenizer (tokenizer.ggml.model) is '{model}', not byte-level BPE "
                                   f"('gpt2') or SentencePiece BPE ('llama'){reason}")
        tokens = metadata.get("tokenizer.ggml.tokens")
        if model == "llama" and isinstance(tokens, list) and not set(BYTE_PIECES) <= set(tokens):
            raise refuse_extension(setting, str(checkpoint.config_file),
                                   "the GGUF SentencePiece tokenizer (tokenizer.ggml.model 'llama') lacks byte pieces "
                                   "(<0x00> ... <0xFF>): without byte fallback a character outside its vocabulary "
                                   "becomes its unknown token")
        return
    fast = checkpoint.location.directory / "tokenizer.json"
    if not fast.is_file():
        raise refuse_extension(setting, str(checkpoint.location.directory), "there is no tokenizer.json")
    try:
        spec = json.loads(fast.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError(setting, f"{fast} cannot be read as JSON ({error})", "download the model again") from None
    check_extensible_spec(spec, setting=setting, where=str(fast))
