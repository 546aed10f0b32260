"""The gated relative position bias (ramen-bert): buckets, gates, equivalence with BERT at the start,
Auto-class and trust_remote_code round trips of an export, and training of the bias."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, BertConfig, BertForMaskedLM

import ramen
from ramen.modeling.architectures import gated_bert, register_architectures
from ramen.errors import ConfigError
from ramen.modeling.bilingual import BilingualMaskedLM
from ramen.modeling.modeling_ramen_bert import RamenBertForMaskedLM, RamenBertModel, relative_position_bucket
from ramen.objectives import get_objective, objective_params
from ramen.objectives.base import BatchShape, ObjectiveSettings, PairedStreams, RelativePositionSettings
from ramen.training.trainer import TrainSettings, train

from test_objectives import SPECIALS, VOCAB, stream, tiny_model


def tiny_bert(attention: str = "eager") -> BertForMaskedLM:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, attn_implementation=attention)
    return BertForMaskedLM(config).eval()


def inputs():
    ids = torch.randint(5, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padding in the second row
    return ids, mask


# --- buckets ----------------------------------------------------------------------------------------

def test_buckets_split_by_sign_exact_near_then_logarithmic_and_saturate():
    # 16 buckets: 8 per direction, distances 0..3 exact, 4..max_distance logarithmic.
    distances = torch.arange(-200, 201)
    buckets = relative_position_bucket(distances, 16, 32)
    at = dict(zip(distances.tolist(), buckets.tolist()))
    assert [at[-d] for d in range(4)] == [0, 1, 2, 3]  # keys before the query: buckets 0..7
    assert [at[d] for d in range(1, 4)] == [9, 10, 11]  # keys after it: 8..15
    assert all(at[d] == 8 + at[-d] for d in range(1, 201))  # the two directions mirror each other
    ahead = [at[d] for d in range(1, 201)]
    assert ahead == sorted(ahead)  # monotone in the distance
    # 4 + floor(log(d / 4) / log(32 / 4) * 4): wider and wider buckets
    assert at[4] == at[6] == 12 and at[7] == at[11] == 13 and at[12] == at[19] == 14
    assert at[20] == at[32] == at[200] == 15 and at[-32] == at[-200] == 7  # saturated


# --- the gated formula ------------------------------------------------------------------------------

def gated_attention():
    config = gated_bert(tiny_bert(), 8, 16).config
    attention = RamenBertModel(config).encoder.layer[0].attention.self
    query = torch.randn(1, 2, 3, 8, generator=torch.Generator().manual_seed(2))
    d = torch.randn(1, 2, 3, 3, generator=torch.Generator().manual_seed(3))
    return attention, query, d


def set_gates(attention, update: float, reset: float, scale: float) -> torch.Tensor:
    """Gate vectors that saturate: q . u is huge with the sign of ``update`` (q all positive)."""
    with torch.no_grad():
        attention.gate_update.fill_(update)
        attention.gate_reset.fill_(reset)
        attention.gate_scale.fill_(scale)


def test_gates_at_their_extremes_reduce_the_formula():
    attention, query, d = gated_attention()
    query = query.abs() + 0.1
    set_gates(attention, 1e3, 0.0, 5.0)  # g_update -> 1: r = d + d
    torch.testing.assert_close(attention.gated_bias(query, d), 2 * d)
    set_gates(attention, -1e3, 1e3, 5.0)  # g_update -> 0, g_reset -> 1: r = d + s d
    torch.testing.assert_close(attention.gated_bias(query, d), 6 * d)
    set_gates(attention, -1e3, -1e3, 5.0)  # both -> 0: r = d
    torch.testing.assert_close(attention.gated_bias(query, d), d)


def test_gated_bias_matches_the_written_formula_per_head():
    attention, query, d = gated_attention()
    with torch.no_grad():
        attention.gate_update.normal_()
        attention.gate_reset.normal_()
        attention.gate_scale.copy_(torch.tensor([0.5, -2.0]))
    for head in range(2):
        q = query[0, head]
        update = torch.sigmoid(q @ attention.gate_update[head])[:, None]
        reset = torch.sigmoid(q @ attention.gate_reset[head])[:, None]
        reset_bias = attention.gate_scale[head] * reset * d[0, head]
        expected = d[0, head] + update * d[0, head] + (1 - update) * reset_bias
        torch.testing.assert_close(attention.gated_bias(query, d)[0, head], expected)


# --- equivalence, registration and export ------------------------------------------------------------

@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_zero_bias_reproduces_bert_and_a_trained_one_changes_it(attention):
    bert = tiny_bert(attention)
    gated = gated_bert(bert, 8, 16)
    assert gated.config.model_type == "ramen-bert" and gated.config._attn_implementation == attention
    assert gated.get_output_embeddings().weight is gated.get_input_embeddings().weight
    ids, mask = inputs()
    with torch.no_grad():
        plain = bert(input_ids=ids, attention_mask=mask).logits
        same = gated(input_ids=ids, attention_mask=mask).logits
        if attention == "eager":  # identical arithmetic: bias 0 added to the same mask
            assert torch.equal(plain, same)
        else:  # SDPA takes the bias as a float mask instead of a boolean one
            torch.testing.assert_close(plain, same, atol=1e-6, rtol=0)
        gated.bert.encoder.relative_attention_bias.normal_()
        assert not torch.allclose(plain, gated(input_ids=ids, attention_mask=mask).logits, atol=1e-3)


def test_conversion_accepts_only_bert():
    from transformers import RobertaConfig, RobertaForMaskedLM

    roberta = RobertaForMaskedLM(RobertaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=32))
    with pytest.raises(ConfigError, match="relative_position"):
        gated_bert(roberta, 8, 16)


def trained_gated_export(tmp_path, tiny_source_dir):
    """A bilingual model with a non-zero bias, exported by the usual export."""
    from transformers import AutoTokenizer

    from ramen.modeling.bilingual import load_source_mlm
    from ramen.objectives.base import with_gated_relative_position as gated_model

    tokenizer = AutoTokenizer.from_pretrained(tiny_source_dir)
    model = BilingualMaskedLM(load_source_mlm(tiny_source_dir), "en",
                              {"fr": (torch.randn(len(tokenizer), 32), torch.zeros(len(tokenizer)))})
    model = gated_model(model, RelativePositionSettings(gated=True, buckets=8, max_distance=16))
    with torch.no_grad():
        model.mlm.bert.encoder.relative_attention_bias.normal_()
    model.export_language("fr", tokenizer, tmp_path / "fr")
    return model, tmp_path / "fr"


def test_export_loads_through_the_auto_classes_and_carries_its_code(tmp_path, tiny_source_dir):
    model, directory = trained_gated_export(tmp_path, tiny_source_dir)
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "ramen-bert" and config["architectures"] == ["RamenBertForMaskedLM"]
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_ramen_bert.RamenBertForMaskedLM"
    assert config["relative_position_buckets"] == 8 and config["relative_position_max_distance"] == 16
    assert (directory / "modeling_ramen_bert.py").is_file()
    register_architectures()
    assert isinstance(AutoConfig.from_pretrained(directory), type(model.mlm.config))
    loaded = AutoModelForMaskedLM.from_pretrained(directory).eval()
    assert type(loaded) is RamenBertForMaskedLM
    torch.testing.assert_close(loaded.bert.encoder.relative_attention_bias,
                               model.mlm.bert.encoder.relative_attention_bias)
    encoder = AutoModel.from_pretrained(directory, attn_implementation="sdpa", add_pooling_layer=False)
    assert type(encoder) is RamenBertModel  # how XNLI, UD, retrieval and NMT load a side


@pytest.mark.slow
def test_a_process_without_ramen_loads_the_export_with_trust_remote_code(tmp_path, tiny_source_dir):
    _, directory = trained_gated_export(tmp_path, tiny_source_dir)
    ids, mask = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 3, 0, 0]]), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    register_architectures()
    with torch.no_grad():
        expected = AutoModelForMaskedLM.from_pretrained(directory).eval()(input_ids=ids, attention_mask=mask).logits
    # Only the directory that holds the package is hidden: the checkout itself (and its .venv) may
    # well live under a path named ramen.
    package_root = str(Path(ramen.__file__).resolve().parents[1])
    script = textwrap.dedent(f"""
        import os, sys, torch
        sys.path = [p for p in sys.path if os.path.realpath(p or ".") != {package_root!r}]
        sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
        try:
            import ramen
        except ImportError:
            pass
        else:
            raise SystemExit("ramen is importable")
        from transformers import AutoModelForMaskedLM
        model = AutoModelForMaskedLM.from_pretrained({str(directory)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor({ids.tolist()}), attention_mask=torch.tensor({mask.tolist()})).logits
        torch.save({{"logits": logits, "class": type(model).__name__}}, {str(tmp_path / "out.pt")!r})
    """)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", "-c", script], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert out["class"] == "RamenBertForMaskedLM"
    torch.testing.assert_close(out["logits"], expected)


# --- settings and training --------------------------------------------------------------------------

def test_the_option_is_a_param_only_where_it_is_on():
    section = {"focal": {"enabled": False}, "relative_position": {"gated": False, "buckets": 32, "max_distance": 128}}
    assert objective_params("mlm", section) == {"name": "mlm"}  # off, the option changes no run
    assert "relative_position" not in objective_params("trtd", section)  # and so do the other objectives'
    on = {"relative_position": {"gated": True}}
    assert objective_params("mlm", section, on)["relative_position"] == {"gated": True, "buckets": 32,
                                                                         "max_distance": 128}
    assert ObjectiveSettings.from_config(on).relative_position.gated
    with pytest.raises(ConfigError, match="buckets"):
        ObjectiveSettings.from_config({"relative_position": {"buckets": 7}})


@pytest.mark.parametrize("name", ["trtd", "tlm-da"])
def test_training_moves_the_bias_away_from_zero_on_both_kinds_of_batch(tmp_path, name):
    from ramen.objectives.base import with_gated_relative_position as gated_model

    settings = ObjectiveSettings(relative_position=RelativePositionSettings(gated=True, buckets=8, max_distance=16))
    model = gated_model(tiny_model(), settings.relative_position)
    streams = {"en": stream(1, 40, VOCAB["en"]), "fr": stream(2, 30, VOCAB["fr"])}
    pairs = PairedStreams(stream(3, 25, VOCAB["en"]), stream(3, 25, VOCAB["fr"]))
    objective = get_objective(name)(model, streams, SPECIALS, BatchShape(4, 12, 0.15, 0), settings, pairs)
    table = model.mlm.bert.encoder.relative_attention_bias
    assert not table.any()
    # translation pairs (the decomposed attention of tlm-da computes its own logits) reach d too
    sum(objective(objective.step_batches(step=2, micro=0)).values()).backward()
    assert table.grad.abs().sum() > 0
    objective.zero_grad()
    train_settings = TrainSettings(steps=1, batch_size=4, seq_len=12, peak_lr=1e-3, warmup_steps=0, log_every=1,
                                   train=["encoder", "head", "foreign_embeddings"])
    train(objective, train_settings, tmp_path / "ckpt", tmp_path / "m.csv", progress=False)
    assert table.abs().sum() > 0  # one monolingual update


def test_the_ablation_table_lists_the_option_right_after_its_objective(tmp_path):
    from ramen.reports.objectives import ablation_table

    header = "variant\tlang\tsplit\ttask\taccuracy\n"
    paths = []
    for variant, accuracy in (("ramen-trtd-grpb", 0.40), ("ramen-trtd", 0.35), ("ramen-rtd", 0.41), ("ramen", 0.45)):
        paths.append(tmp_path / f"{variant}_fr.tsv")
        paths[-1].write_text(header + f"{variant}\tfr\ttest\txnli\t{accuracy}\n")
    variants = {"ramen-trtd-grpb": {"row": "trtd+grpb", "init": "parallel"},
                "ramen-trtd": {"row": "trtd", "init": "parallel"},
                "ramen-rtd": {"row": "rtd", "init": "parallel"},
                "ramen": {"row": "mlm", "init": "parallel"}}
    columns, rows = ablation_table(variants, paths, [])
    assert "parallel_xnli" in columns
    assert [(r["objective"], r["parallel_xnli"]) for r in rows] == [("mlm", "45.0"), ("rtd", "41.0"),
                                                                    ("trtd", "35.0"), ("trtd+grpb", "40.0")]
