"""The NMT stages the workflow runs: data, plain model, BERT-fused models, evaluation table."""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ramen.errors import ConfigError
from ramen.io import atomic_path, read_lines
from ramen.nmt.data import EncodedText, FrozenBert, NmtTokenizer, check_aligned, encode_corpus, learn_vocabulary
from ramen.nmt.evaluate import bleu_with_signature, set_threads, translate
from ramen.nmt.model import NmtModelConfig, TransformerNmt, warm_start
from ramen.nmt.search import SearchSettings
from ramen.nmt.train import NmtTrainSettings, ParallelData, fingerprint, load_model, save_model, train
from ramen.glue import settings_from

log = logging.getLogger(__name__)

# The NmtModelConfig fields the config sets; the vocabulary comes from the data, BERT fusion from the arm.
MODEL_SETTINGS = ("layers", "dim", "ffn_dim", "heads", "dropout", "max_positions")
# Each fused arm: the full model, or one part of it switched off (Table 6 of the paper).
ARMS = {
    "fused": {},
    "no-dropnet": {"drop_net": 0.0},
    "no-bert-enc": {"bert_encoder_attention": False},
    "no-bert-dec": {"bert_decoder_attention": False},
}
ARM_DESCRIPTIONS = {
    "plain": "Transformer without BERT (also the warm start of every fused model)",
    "fused": "BERT-fused, drop-net",
    "no-dropnet": "BERT-fused, drop-net off (p_net = 0)",
    "no-bert-enc": "BERT-fused without BERT-encoder attention",
    "no-bert-dec": "BERT-fused without BERT-decoder attention",
}
SPLITS = ("train", "dev", "test")


def arm_overrides(arm: str, p_net: float) -> dict:
    if arm not in ARMS:
        raise ConfigError("tasks.nmt.settings.ablations", f"unknown arm '{arm}'", f"choose from {sorted(ARMS)}")
    return {"drop_net": p_net, **ARMS[arm]}


def prepare_data(files: Mapping[str, Mapping[str, str]], source_lang: str, foreign_lang: str, merges: int,
                 out_dir: str | os.PathLike) -> dict:
    """Joint BPE learned on the training pair, and every split of both languages encoded.

    ``files[split][lang]`` are text paths, one sentence per line.
    """
    for split in SPLITS:
        check_aligned(files[split][source_lang], files[split][foreign_lang])
    with atomic_path(out_dir) as tmp:
        stats = learn_vocabulary(files["train"][source_lang], files["train"][foreign_lang], source_lang,
                                 foreign_lang, merges, tmp / "vocab")
        tokenizer = NmtTokenizer(tmp / "vocab")
        for split in SPLITS:
            for lang in (source_lang, foreign_lang):
                encoded = encode_corpus(tokenizer, files[split][lang], lang)
                encoded.save(tmp / f"{split}.{lang}.npz")
                stats[f"{split}.{lang}.sentences"] = len(encoded)
                stats[f"{split}.{lang}.tokens"] = int(encoded.lengths().sum())
        (tmp / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats


def load_split(data_dir, split: str, source_lang: str, target_lang: str, bert: FrozenBert | None = None,
               bert_text: str | None = None) -> ParallelData:
    data_dir = Path(data_dir)
    return ParallelData(
        source=EncodedText.load(data_dir / f"{split}.{source_lang}.npz"),
        target=EncodedText.load(data_dir / f"{split}.{target_lang}.npz"),
        bert=bert.encode_corpus(bert_text) if bert is not None else None,
    )


def model_config(settings: Mapping, tokenizer: NmtTokenizer) -> NmtModelConfig:
    """The model sizes of tasks.nmt.settings.model, with the vocabulary of the prepared data."""
    for name in settings:
        if name not in MODEL_SETTINGS:
            raise ConfigError(f"tasks.nmt.settings.model.{name}", "unknown setting", f"valid keys: {', '.join(MODEL_SETTINGS)}")
    return settings_from(NmtModelConfig, {**settings, "vocab_size": len(tokenizer), "pad_id": tokenizer.pad_id},
                         "tasks.nmt.settings.model")


def train_plain(data_dir, source_lang: str, target_lang: str, model_settings: Mapping, train_settings: Mapping,
                out_dir, checkpoint_dir, metrics_path, threads: int = 1, device: str = "cpu") -> None:
    set_threads(threads)
    settings = settings_from(NmtTrainSettings, dict(train_settings), "tasks.nmt.settings.plain")
    tokenizer = NmtTokenizer(Path(data_dir) / "vocab")
    torch.manual_seed(settings.seed)
    model = TransformerNmt(model_config(model_settings, tokenizer))
    run = Path(checkpoint_dir) / fingerprint(settings, model.config, [Path(data_dir) / "vocab" / "codes"])
    train(model, load_split(data_dir, "train", source_lang, target_lang),
          load_split(data_dir, "dev", source_lang, target_lang), None, settings, run, metrics_path,
          tokenizer.bos_id, device)
    save_model(model, out_dir, {"source_lang": source_lang, "target_lang": target_lang})


def train_fused(data_dir, source_lang: str, target_lang: str, plain_dir, bert_dir, bert_text: Mapping[str, str],
                arm: str, p_net: float, train_settings: Mapping, out_dir, checkpoint_dir, metrics_path,
                threads: int = 1, device: str = "cpu") -> None:
    """Warm-start a fused model from the plain one and train it; only the NMT model learns."""
    set_threads(threads)
    settings = settings_from(NmtTrainSettings, dict(train_settings), "tasks.nmt.settings.fused")
    tokenizer = NmtTokenizer(Path(data_dir) / "vocab")
    plain, meta = load_model(plain_dir)
    bert = FrozenBert(bert_dir, device)
    torch.manual_seed(settings.seed)
    config = NmtModelConfig(**{**plain.config.to_dict(), "bert_dim": bert.dim, **arm_overrides(arm, p_net)})
    model = TransformerNmt(config)
    loaded = warm_start(model, plain.state_dict())
    log.info("warm start: %d tensors from %s; new: %s", len(loaded), plain_dir,
             sorted({name.split(".bert_attn.")[0] for name in model.state_dict() if ".bert_attn." in name}))
    train(model, load_split(data_dir, "train", source_lang, target_lang, bert, bert_text["train"]),
          load_split(data_dir, "dev", source_lang, target_lang, bert, bert_text["dev"]), bert, settings,
          Path(checkpoint_dir) / fingerprint(settings, config, [Path(plain_dir) / "model.safetensors",
                                                          *Path(bert_dir).glob("*.safetensors")]),
          metrics_path, tokenizer.bos_id, device)
    save_model(model, out_dir, {**{k: meta[k] for k in ("source_lang", "target_lang")}, "arm": arm,
                                "bert": str(bert_dir)})


TABLE_COLUMNS = ["variant", "src", "tgt", "model", "description", "split", "bleu", "sentences", "decode_s",
                 "time_vs_plain", "beam", "length_penalty", "bert", "train_steps", "final_dev_loss", "sacrebleu"]


def final_dev_loss(metrics_path) -> str:
    with open(metrics_path, newline="") as handle:
        losses = [row["dev_loss"] for row in csv.DictReader(handle) if row["dev_loss"]]
    return losses[-1] if losses else ""


def evaluate(variant: str, data_dir, source_lang: str, target_lang: str, models: Mapping[str, str],
             metrics: Mapping[str, str], bert_dir, source_text, reference_text, search_settings: Mapping,
             batch_size: int, out_tsv, translations_dir, threads: int = 1, device: str = "cpu") -> list[dict]:
    """Translate the test set with every model, one after another with the same threads and batches.

    ``models`` maps a row name (``plain`` or a fused arm) to its directory. The
    fused models' time includes the BERT forward pass over the source.
    """
    set_threads(threads)
    search = settings_from(SearchSettings, dict(search_settings), "tasks.nmt.settings.search")
    tokenizer = NmtTokenizer(Path(data_dir) / "vocab")
    source = EncodedText.load(Path(data_dir) / f"test.{source_lang}.npz")
    references = list(read_lines(reference_text))
    bert = bert_source = None
    rows, plain_seconds = [], None
    Path(translations_dir).mkdir(parents=True, exist_ok=True)
    for name, directory in models.items():
        model, meta = load_model(directory)
        if model.config.bert_dim is not None and bert is None:
            bert = FrozenBert(bert_dir, device)
            bert_source = bert.encode_corpus(source_text)
        fused = model.config.bert_dim is not None
        result = translate(model, tokenizer, source, target_lang, search, batch_size,
                           bert if fused else None, bert_source if fused else None, device)
        with atomic_path(Path(translations_dir) / f"{name}.{target_lang}") as tmp:
            tmp.write_text("".join(line + "\n" for line in result.hypotheses), encoding="utf-8")
        if name == "plain":
            plain_seconds = result.seconds
        with open(metrics[name], newline="") as handle:
            steps = max(int(row["step"]) for row in csv.DictReader(handle))
        bleu, signature = bleu_with_signature(result.hypotheses, references)
        rows.append({
            "variant": variant, "src": source_lang, "tgt": target_lang, "model": name,
            "description": ARM_DESCRIPTIONS.get(name, name), "split": "test",
            "bleu": round(bleu, 2), "sentences": len(references),
            "decode_s": round(result.seconds, 2),
            "time_vs_plain": round(result.seconds / plain_seconds, 3) if plain_seconds else "",
            "beam": search.beam, "length_penalty": search.length_penalty,
            "bert": str(bert_dir) if fused else "", "train_steps": steps,
            "final_dev_loss": final_dev_loss(metrics[name]), "sacrebleu": signature,
        })
        log.info("%s: %s", name, rows[-1])
    with atomic_path(out_tsv) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=TABLE_COLUMNS, delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)
    return rows


SUMMARY_COLUMNS = ["variant", "src", "tgt", "model", "description", "bleu", "bleu_vs_plain", "decode_s",
                   "time_vs_plain", "sentences", "train_steps"]


def summarise(tables: list[str], out_tsv) -> list[dict]:
    """One table of every direction's rows, with each model's BLEU difference to its plain Transformer."""
    rows = []
    for path in tables:
        with open(path, newline="", encoding="utf-8") as handle:
            table = list(csv.DictReader(handle, delimiter="\t"))
        plain = next((row for row in table if row["model"] == "plain"), None)
        for row in table:
            difference = round(float(row["bleu"]) - float(plain["bleu"]), 2) if plain else ""
            rows.append({**{key: row.get(key, "") for key in SUMMARY_COLUMNS}, "bleu_vs_plain": difference})
    with atomic_path(out_tsv) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS, delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)
    return rows
