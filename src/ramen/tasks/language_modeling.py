"""Language-model evaluation of causal LMs: bits per byte on held-out text and generated continuations.

Bits per byte is the one LM measure that compares models with different tokenizers: the
summed next-token negative log-likelihood of a text, in bits, divided by the text's UTF-8
bytes. Every token of the text is scored, the first one too: each line is preceded by the
tokenizer's BOS token (its EOS when it has no BOS, as GPT-2 separates documents), which is
context only. Lines are scored independently; the newline between lines is not part of the
text (``context_token`` names another context token by string: the same string for every
tokenizer compared). A line longer than ``max_length`` is scored in windows that overlap by ``max_length -
stride`` tokens of context, each token exactly once.

Generation speed (``decoding_speed``) is measured beside the scores and written apart from them:
bytes of decoded new text per second of greedy decoding, new tokens per second and bytes per
new token, each side on its own language. Timings change from run to run, so they never enter
the scores table, which stays byte-identical between runs of the same models.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ramen.data.sib200 import is_sib200_file, read_sib200
from ramen.errors import ConfigError, InputFormatError
from ramen.io import read_lines, write_tsv
from ramen.glue import check_window

BPB_COLUMNS = ("variant", "lang", "text", "step", "lines", "bytes", "tokens", "tokens_per_line", "bits",
               "bits_per_byte")
GENERATION_COLUMNS = ("variant", "lang", "prompt", "continuation")
SPEED_COLUMNS = ("variant", "lang", "text", "prompts", "repeats", "new_tokens", "bytes", "seconds", "bytes_per_second",
                 "bytes_per_second_min", "bytes_per_second_max", "tokens_per_second", "bytes_per_token", "threads",
                 "device")


@dataclass
class LanguageModelSettings:
    max_length: int = 256      # tokens per window, the context token included
    stride: int = 128          # new tokens scored per further window of a long line
    batch_size: int = 16
    max_lines: int | None = None
    max_new_tokens: int = 32   # generated continuations, and the tokens decoded per prompt when timing
    # Generation speed: the first lines of each language's held-out text, each greedily decoded for
    # exactly max_new_tokens tokens (0: not measured). The config's prompts are few, short and
    # optional; the held-out lines are there for every scored language, the same for every variant,
    # and (Multi30k's test set) translations of each other across languages.
    speed_prompts: int = 16
    # Every prompt is decoded this many times over: the median pass is the figure, the slowest and
    # fastest passes its spread (one pass of a few prompts moved by 10 % from run to run).
    speed_repeats: int = 3
    # False: time the target language only (the English side of an extension is the source's
    # tokenizer, so its speed says little and costs as much again).
    speed_source_language: bool = True
    # The token a line's first token is conditioned on, by string; None: the tokenizer's BOS, else EOS.
    # An instruction-tuned tokenizer's BOS may be a chat marker (SmolLM2: <|im_start|>), after which
    # plain text is unlikely; its document separator (<|endoftext|>) is then the fairer context.
    context_token: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise ConfigError("tasks.language_modeling.settings.max_length", f"must be >= 2, got {self.max_length}")
        check_window(self.max_length, self.stride, "tasks.language_modeling.settings")
        if self.batch_size < 1:
            raise ConfigError("tasks.language_modeling.settings.batch_size", f"must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ConfigError("tasks.language_modeling.settings.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        if self.speed_prompts < 0:
            raise ConfigError("tasks.language_modeling.settings.speed_prompts", f"must be >= 0, got {self.speed_prompts}")
        if self.speed_repeats < 1:
            raise ConfigError("tasks.language_modeling.settings.speed_repeats", f"must be >= 1, got {self.speed_repeats}")


def context_token_id(tokenizer, token: str | None = None) -> int:
    """The token every line is conditioned on: ``token`` (a string of the vocabulary), else BOS, else EOS."""
    if token is not None:
        vocab = tokenizer.get_vocab()
        if token not in vocab:
            raise ConfigError("tasks.language_modeling.settings.context_token",
                              f"{token!r} is not a token of {getattr(tokenizer, 'name_or_path', 'the tokenizer')}",
                              "name one of its special tokens, or null for its BOS")
        return int(vocab[token])
    for role in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, role, None)
        if value is not None:
            return int(value)
    raise ConfigError("tasks.language_modeling.settings.context_token", "the tokenizer has neither a BOS "
                      "nor an EOS token",
                      "name one of its tokens: bits per byte needs a token to condition a line's first token on")


def scoring_windows(length: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored) windows over a sequence of ``length`` tokens whose position 0 is context.

    Window ``[begin, end)`` is fed to the model; it scores the tokens at ``first..end-1``, each
    position 1..length-1 exactly once, with at least ``max_length - stride`` tokens of context
    after the first window.
    """
    windows = []
    scored = 1
    while scored < length:
        end = min(length, max_length if scored == 1 else scored + stride)
        begin = max(0, end - max_length)
        windows.append((begin, end, scored))
        scored = end
    return windows


def token_log_likelihoods(model, sequences: Sequence[Sequence[int]], settings: LanguageModelSettings,
                          pad_id: int) -> list[float]:
    """Summed natural-log likelihood of positions 1.. of each sequence (position 0 is context)."""
    pieces: list[tuple[int, list[int], int]] = []  # (sequence, window ids, tokens already seen in it)
    for index, ids in enumerate(sequences):
        for begin, end, first in scoring_windows(len(ids), settings.max_length, settings.stride):
            pieces.append((index, list(ids[begin:end]), first - begin))
    totals = [0.0] * len(sequences)
    device = next(model.parameters()).device
    order = sorted(range(len(pieces)), key=lambda i: len(pieces[i][1]))  # little padding per batch
    with torch.inference_mode():
        for start in range(0, len(order), settings.batch_size):
            batch = [pieces[i] for i in order[start:start + settings.batch_size]]
            width = max(len(ids) for _, ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (_, ids, _) in enumerate(batch):
                input_ids[row, :len(ids)] = torch.tensor(ids)
                mask[row, :len(ids)] = 1
            # Right padding: real tokens keep positions 0.. and never attend to a pad.
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.float()
            log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
            targets = input_ids[:, 1:].to(device)
            picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).cpu()
            for row, (index, ids, skip) in enumerate(batch):
                # Logit j predicts token j+1: tokens skip..len-1 are logits skip-1..len-2.
                totals[index] += float(picked[row, skip - 1:len(ids) - 1].double().sum())
    return totals


def bits_per_byte(model, tokenizer, texts: Sequence[str], settings: LanguageModelSettings | None = None) -> dict:
    """Bits per UTF-8 byte of ``texts`` (lines) under ``model`` with its ``tokenizer``.

    Works for any causal LM whose forward takes ``input_ids`` and ``attention_mask`` and returns
    ``.logits``: the untransferred source with its own tokenizer and every transferred side with
    the foreign one.
    """
    settings = settings or LanguageModelSettings()
    texts = [text for text in texts if text]
    if not texts:
        raise ValueError("no text to score")
    context = context_token_id(tokenizer, settings.context_token)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else context
    sequences = [[context, *tokenizer(text, add_special_tokens=False)["input_ids"]] for text in texts]
    vocab_rows = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else None
    if vocab_rows is not None:
        largest = max(max(ids) for ids in sequences)
        if largest >= vocab_rows:
            # Rules wired to another side's tokenizer, not a setting: name the tokenizer read.
            raise InputFormatError(getattr(tokenizer, "name_or_path", "tokenizer"), None,
                                   f"token id {largest} but the model's output layer has {vocab_rows} rows",
                                   "score each model with the tokenizer of its own language side")
    model.eval()
    nats = sum(token_log_likelihoods(model, sequences, settings, pad_id))
    n_bytes = sum(len(text.encode("utf-8")) for text in texts)
    tokens = sum(len(ids) - 1 for ids in sequences)
    bits = -nats / math.log(2)
    return {"lines": len(texts), "bytes": n_bytes, "tokens": tokens, "tokens_per_line": tokens / len(texts),
            "bits": bits, "bits_per_byte": bits / n_bytes}


def new_text(tokenizer, prompt_ids: Sequence[int], new_ids: Sequence[int]) -> str:
    """The text ``new_ids`` add after the prompt, special tokens left out. Decoded after the prompt's
    tokens: a SentencePiece decoder (Llama-2, Mistral) strips the space of a text's first piece, so
    ``▁the`` decoded alone is ``the``, a byte short of what it adds to the text."""
    prompt = tokenizer.decode(list(prompt_ids), skip_special_tokens=True)
    full = tokenizer.decode([*prompt_ids, *new_ids], skip_special_tokens=True)
    # A prompt ending inside a character decodes to U+FFFD that the new bytes may complete: no prefix.
    return full[len(prompt):] if full.startswith(prompt) else tokenizer.decode(list(new_ids), skip_special_tokens=True)


def generate_continuations(model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 32) -> list[str]:
    """Greedy continuations of ``prompts`` (the new text only): deterministic, so reports are stable."""
    model.eval()
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    outputs = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                       max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
            outputs.append(new_text(tokenizer, ids[0].tolist(), generated[0, ids.shape[1]:].tolist()))
    return outputs


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decoding_speed(model, tokenizer, prompts: Sequence[str], new_tokens: int, repeats: int = 1) -> dict:
    """Greedy decoding speed of ``model`` on ``prompts``: bytes of decoded new text per second,
    new tokens per second and bytes per new token.

    Each prompt is decoded alone (batch 1, no padding), for exactly ``new_tokens`` tokens: the
    end-of-sequence token is kept from ending it early (``min_new_tokens``), so every model does
    the same number of decoding steps per prompt. One untimed generate of the first prompt warms
    up first (allocations, lazy initialisation); then only ``generate`` is timed, inside
    ``torch.inference_mode`` with the threads the caller set. All prompts are decoded ``repeats``
    times over (passes); greedy decoding writes the same tokens every pass, so the passes differ
    only in time: ``bytes_per_second`` is the median pass's, ``bytes_per_second_min`` / ``_max``
    the slowest and fastest pass's, ``seconds`` the median pass's. Bytes count the UTF-8 of the text
    each prompt's new tokens add, without special tokens (:func:`new_text`, as the continuations): a
    model that writes special tokens or whitespace gets few bytes per token, and so few bytes per second.
    """
    prompts = [prompt for prompt in prompts if prompt]
    if not prompts:
        raise ValueError("no prompt to decode")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be >= 1, got {new_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    model.eval()
    device = next(model.parameters()).device
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    encoded = [tokenizer(prompt, return_tensors="pt")["input_ids"].to(device) for prompt in prompts]

    def greedy(ids):
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             min_new_tokens=new_tokens, max_new_tokens=new_tokens, eos_token_id=eos,
                             pad_token_id=pad)
        return out[0, ids.shape[1]:]

    passes = []
    with torch.inference_mode():
        greedy(encoded[0])
        _synchronize(device)
        for _ in range(repeats):
            generated, seconds = [], 0.0
            for ids in encoded:
                start = time.perf_counter()
                new = greedy(ids)
                _synchronize(device)
                seconds += time.perf_counter() - start
                generated.append(new.tolist())
            passes.append(seconds)
    tokens = sum(len(ids) for ids in generated)
    n_bytes = sum(len(new_text(tokenizer, prompt[0].tolist(), ids).encode("utf-8"))
                  for prompt, ids in zip(encoded, generated))
    median = sorted(passes)[len(passes) // 2]
    return {"prompts": len(prompts), "repeats": repeats, "new_tokens": tokens, "bytes": n_bytes, "seconds": median,
            "bytes_per_second": n_bytes / median, "bytes_per_second_min": n_bytes / max(passes),
            "bytes_per_second_max": n_bytes / min(passes), "tokens_per_second": tokens / median,
            "bytes_per_token": n_bytes / tokens, "threads": torch.get_num_threads(), "device": device.type}


def load_causal_lm(model_dir: str | os.PathLike):
    """A causal LM directory in float32 (a language side exported by training, or a plain source)."""
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise InputFormatError(model_dir, None, "not a model directory (no config.json)",
                               "pass a directory saved with save_pretrained")
    architectures = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    if architectures and not any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in architectures):
        raise ConfigError("targets.bits_per_byte", f"{model_dir} holds a {architectures[0]}, not a causal LM",
                          "bits per byte scores decoder variants only")
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def evaluate_language_model(model_dir: str | os.PathLike, text_path: str | os.PathLike,
                            settings: LanguageModelSettings, *, tokenizer_dir: str | os.PathLike | None = None,
                            prompts: Sequence[str] = (), speed: bool = False,
                            load_model: Callable[[str | os.PathLike], object] = load_causal_lm) -> dict:
    """Bits per byte of the lines of ``text_path`` and greedy continuations of ``prompts``; with
    ``speed``, also ``result["speed"]``: ``decoding_speed`` on the first ``settings.speed_prompts``
    lines of the text (before any subsampling), None when that is 0.

    ``tokenizer_dir`` defaults to ``model_dir``; ``load_model`` reads the model (a GGUF source
    needs its own loader).
    """
    from ramen.tasks.common import subsample, torch_threads
    from ramen.vocab.tokenizer import load_tokenizer

    if is_sib200_file(text_path):  # FLORES-200 sentences of a SIB-200 file: another domain than the training text
        texts = [example.text for example in read_sib200(text_path)]
    else:
        texts = [line for line in read_lines(text_path) if line.strip()]
    if not texts:
        raise InputFormatError(text_path, None, "no text lines", "give held-out text, one sentence per line")
    speed_prompts = texts[:settings.speed_prompts]
    texts = subsample(texts, settings.max_lines, seed=0)
    tokenizer = load_tokenizer(tokenizer_dir or model_dir)  # a GGUF source too
    with torch_threads(settings.threads):
        model = load_model(model_dir)
        result = bits_per_byte(model, tokenizer, texts, settings)
        result["continuations"] = generate_continuations(model, tokenizer, prompts, settings.max_new_tokens)
        if speed:
            result["speed"] = (decoding_speed(model, tokenizer, speed_prompts, settings.max_new_tokens,
                                              settings.speed_repeats) if speed_prompts else None)
    return result


def evaluate_sides(english_dir: str | os.PathLike, foreign_dir: str | os.PathLike,
                   texts: Mapping[str, str | os.PathLike | Sequence[str | os.PathLike]],
                   prompts: Mapping[str, Sequence[str]], settings: LanguageModelSettings, *, variant: str,
                   source_lang: str, load_model: Callable[[str | os.PathLike], object] = load_causal_lm
                   ) -> tuple[list[dict], list[dict], list[dict]]:
    """Bits per byte, continuations and generation speed of a variant's two sides: each language's
    held-out texts (``texts``: one file or several, e.g. in-domain and FLORES) and prompts read by
    its own side, the source language's by the English side (the retention check), every other
    language's by the foreign side. Speed is timed once per language, on its first file (the source
    language's only with ``settings.speed_source_language``).
    Returns (score rows, continuation rows, speed rows)."""
    scores, continuations, speeds = [], [], []
    last: dict[str, object] = {}  # the side read last: each side is loaded once for all its texts

    def load_side(directory):
        if str(directory) not in last:
            last.clear()
            last[str(directory)] = load_model(directory)
        return last[str(directory)]

    for lang, paths in texts.items():
        side = english_dir if lang == source_lang else foreign_dir
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        for index, path in enumerate(paths):
            lang_prompts = list(prompts.get(lang, ())) if index == 0 else []  # generated once per language
            timed_here = index == 0 and (lang != source_lang or settings.speed_source_language)
            result = evaluate_language_model(side, path, settings, prompts=lang_prompts, speed=timed_here,
                                             load_model=load_side)
            generated = result.pop("continuations")
            timed = result.pop("speed", None)
            scores.append({"variant": variant, "lang": lang, "text": Path(path).name, "step": "", **result})
            continuations += [{"variant": variant, "lang": lang, "prompt": prompt, "continuation": text}
                              for prompt, text in zip(lang_prompts, generated)]
            if timed is not None:
                speeds.append({"variant": variant, "lang": lang, "text": Path(path).name, **timed})
    return scores, continuations, speeds


def write_bits_per_byte(path: str | os.PathLike, rows) -> int:
    return write_tsv(path, rows, BPB_COLUMNS)


def write_continuations(path: str | os.PathLike, rows) -> int:
    return write_tsv(path, rows, GENERATION_COLUMNS)


def write_speed(path: str | os.PathLike, rows) -> int:
    return write_tsv(path, rows, SPEED_COLUMNS)
