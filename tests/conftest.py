"""Shared fixtures: a tiny BERT source model directory and small generated corpora.

Everything is built in the test session (no downloads) and kept tiny, because the
suite shares a small machine with running workflows.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# French-like material: accented letters in word-internal and word-final positions.
FRENCH_WORDS = (
    "le la les un une des de du et est à où été élève école étude père mère frère sœur "
    "maison jardin forêt fenêtre théâtre château hôpital garçon français leçon reçu "
    "déjà voilà très après naïf noël île où août cœur œuvre être avoir faire aller "
    "petit petite grand grande belle beau nouveau nouvelle vieux vieille rapide lent "
    "mange mangé parle parlé chante chanté regarde regardé aime aimé pense pensé "
    "chat chien oiseau cheval livre table chaise porte rue ville pays monde année "
    "aujourd'hui demain hier toujours jamais souvent ensemble pendant depuis contre"
).split()
PUNCTUATION = [".", ",", "!", "?", ";", ":"]

# Other scripts the normaliser must keep intact (each phrase is used in the multi-script corpus).
OTHER_SCRIPTS = {
    "chinese": "我爱你中国",
    "devanagari": "नमस्ते दुनिया",
    "arabic": "مرحبا بالعالم",
    "cyrillic": "Привет мир",
    "vietnamese": "Tiếng Việt rất đẹp",
}


def _source_vocabulary() -> list[str]:
    # Special tokens away from the front, as in BERT, so id remapping is exercised.
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += letters + list(".,!?;:'-()")
    vocab += ["##" + c for c in letters]
    vocab += ("the a an cat dog is was on in of to and it he she they we you mat house "
              "garden school teacher father mother brother sister red big small old new").split()
    vocab += ["##s", "##ed", "##ing", "##er", "##ly", "##th", "##ch", "##sh", "##ou", "##en"]
    vocab += [f"##{a}{b}" for a in "aeiou" for b in "nrst"]
    vocab += [f"{a}{b}" for a in "bcdfglmnprst" for b in "aeiou"][: 200 - len(vocab)]
    return list(dict.fromkeys(vocab))


def build_source_dir(path: Path) -> Path:
    """A 2-layer BERT masked LM with an uncased WordPiece tokenizer saved side by side."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    import torch
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    vocab = _source_vocabulary()
    ids = {token: index for index, token in enumerate(vocab)}
    backend = Tokenizer(WordPiece(ids, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    backend.decoder = decoders.WordPiece()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=64, pad_token="[PAD]", unk_token="[UNK]",
        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=ids["[PAD]"])
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    with torch.no_grad():  # a non-zero output bias, so tests notice a bias that is lost or swapped
        model.cls.predictions.bias.normal_(0.0, 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def french_lines(count: int, seed: int = 0) -> list[str]:
    """Generated French-like sentences with accents, capitals and punctuation."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [rng.choice(FRENCH_WORDS) for _ in range(rng.randint(3, 12))]
        words[0] = words[0].capitalize()
        if rng.random() < 0.3:
            words.insert(rng.randint(1, len(words)), rng.choice(PUNCTUATION))
        lines.append(" ".join(words) + rng.choice([" .", ".", " !", " ?", ""]))
    return lines


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    # The machine is shared; one intra-op thread also keeps float results reproducible.
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def unseeded_eflomal(tmp_path_factory, monkeypatch) -> Path:
    """An eflomal package first on the path whose binary never reads EFLOMAL_SEED, as PyPI's."""
    import sys

    package = tmp_path_factory.mktemp("site") / "eflomal"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bin" / "eflomal").write_bytes(b"\x7fELF /dev/urandom")
    monkeypatch.delitem(sys.modules, "eflomal", raising=False)
    monkeypatch.syspath_prepend(str(package.parent))
    return package


@pytest.fixture(scope="session")
def tiny_source_dir(tmp_path_factory) -> Path:
    return build_source_dir(tmp_path_factory.mktemp("tiny_source") / "model")


@pytest.fixture(scope="session")
def french_corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "fr.txt"
    path.write_text("\n".join(french_lines(400)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def foreign_tokenizer_dir(tmp_path_factory, tiny_source_dir, french_corpus) -> Path:
    """A French tokenizer trained against the tiny source model (vocabulary capped at its size)."""
    from ramen.vocab.bpe import train_foreign_tokenizer

    work = tmp_path_factory.mktemp("foreign_tokenizer")
    out = work / "tokenizer"
    stats = train_foreign_tokenizer(french_corpus, tiny_source_dir, out, work / "codes", merges=300,
                                    max_vocab_size=None, lowercase=None, min_symbol_count=1)
    assert stats["lowercase"] is True
    return out


# The files whose fixtures run a workflow for many minutes, longest first (CI's `make test` on 2
# cores: the decoder rehearsal's workflow about 20 min, the rehearsal's 18, test_peers.py's 17,
# test_slurm.py about 16 in all, test_workflow.py 12). A worker takes its next file only when it has
# at most two tests left, so these four start together and the rest fill in behind them; a
# rehearsal placed after test_slurm.py waited 16 min for it and ended the suite alone.
# `--dist loadfile` hands files to its workers in collection order when run with
# `--no-loadscope-reorder` (Makefile); by default it sorts them by their number of tests, which
# starts these few-test files last, after the quick unit files.
LONGEST_FIRST = (
    "integration/test_rehearsal_decoder.py",
    "integration/test_rehearsal.py",
    "integration/test_peers.py",
    "integration/test_slurm.py",
    "integration/test_workflow.py",
    "integration/test_slurm_multinode.py",
)


def pytest_collection_modifyitems(items):
    rank = {Path(__file__).parent / name: place for place, name in enumerate(LONGEST_FIRST)}
    # Stable: the other files (wherever they are), and the tests within each file, keep their order.
    items.sort(key=lambda item: rank.get(item.path, len(rank)))
