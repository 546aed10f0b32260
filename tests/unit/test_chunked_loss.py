"""The causal loss computed a chunk of positions at a time (BilingualCausalLM.next_token_loss): the
same loss and gradients as the whole vocabulary's logits at once, for every vocabulary layout, and
no more than one chunk's logits ever held."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ramen.modeling import causal
from ramen.modeling.causal import IGNORE_INDEX, BilingualCausalLM, CausalBatch, ForeignTables
from ramen.modeling.sources import output_layer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_causal import tiny_causal_lm  # noqa: E402
from tiny_decoder import tiny_family  # noqa: E402

SOURCE_ROWS, FOREIGN_ROWS, NEW_ROWS = 90, 70, 30
CHUNK = 7  # positions per chunk in these tests: several chunks, the last one short
BUDGET = causal.LOGIT_CHUNK_BYTES  # before the fixture shrinks it


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    # Bytes for CHUNK positions of the largest vocabulary here, so every test runs several chunks.
    monkeypatch.setattr(causal, "LOGIT_CHUNK_BYTES", 4 * CHUNK * (SOURCE_ROWS + NEW_ROWS))


def random_tables(rows: int, like: ForeignTables, seed: int) -> ForeignTables:
    generator = torch.Generator().manual_seed(seed)
    hidden = like.embeddings.shape[1]

    def draw(shape):
        return torch.randn(shape, generator=generator) * 0.5

    return ForeignTables(draw((rows, hidden)), None if like.output is None else draw((rows, hidden)),
                         None if like.bias is None else draw((rows,)))


def source_of(name: str):
    if name in ("gemma2", "gemma3"):
        return tiny_family(name, SOURCE_ROWS, softcap=0.3)
    return tiny_causal_lm(name, SOURCE_ROWS)


def replaced(name: str) -> BilingualCausalLM:
    source_lm = source_of(name)
    output, bias, tied = output_layer(source_lm)
    like = ForeignTables(source_lm.get_input_embeddings().weight, None if tied else output, bias)
    return BilingualCausalLM(source_lm, "en", {"xx": random_tables(FOREIGN_ROWS, like, seed=1)})


def extended(name: str, untie: bool = False) -> BilingualCausalLM:
    source_lm = source_of(name)
    output_rows, output_bias, tied = output_layer(source_lm)
    rows = source_lm.get_input_embeddings().weight.detach()[:SOURCE_ROWS]
    output = None if tied and not untie else (rows if tied else output_rows.detach()[:SOURCE_ROWS])
    bias = None if output_bias is None else output_bias.detach()[:SOURCE_ROWS]
    new = random_tables(NEW_ROWS, ForeignTables(rows, output, bias), seed=2)
    tables = ForeignTables(*(None if old is None else torch.cat([old, added]) for old, added in
                             ((rows, new.embeddings), (output, new.output), (bias, new.bias))))
    return BilingualCausalLM.extended(source_lm, tables, SOURCE_ROWS)


def batches_of(model: BilingualCausalLM, length: int = 12, count: int = 3) -> dict[str, CausalBatch]:
    generator = torch.Generator().manual_seed(3)
    batches = {}
    for lang in model.languages:
        ids = torch.randint(3, model.vocabulary_size(lang), (count, length + 1), generator=generator)
        labels = ids[:, 1:].clone()
        labels[0, -4:] = IGNORE_INDEX  # a padded window end: its positions predict nothing
        mask = (labels != IGNORE_INDEX).long()
        batches[lang] = CausalBatch(ids[:, :-1], mask, labels)
    return batches


def whole_vocabulary_losses(model: BilingualCausalLM, batches) -> dict[str, torch.Tensor]:
    """Today's loss before chunking: every target's logits over the whole vocabulary at once."""
    losses = {}
    for lang, states in model.hidden_states(batches).items():
        labels = batches[lang].labels
        positions = labels != IGNORE_INDEX
        losses[lang] = F.cross_entropy(model.logits(lang, states[positions]).float(), labels[positions])
    return losses


def losses_and_gradients(model: BilingualCausalLM, compute) -> tuple[dict, dict]:
    model.zero_grad(set_to_none=True)
    losses = compute(model, batches_of(model))
    sum(losses.values()).backward()
    gradients = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
    return {lang: loss.detach() for lang, loss in losses.items()}, gradients


MODELS = {
    "replace-tied": lambda: replaced("llama-tied"),
    "replace-untied-bias": lambda: replaced("phi-bias"),
    "replace-softcap": lambda: replaced("gemma2"),
    "extend-tied": lambda: extended("llama-tied"),
    "extend-untied-bias": lambda: extended("phi-bias"),
    "extend-untied-from-tied": lambda: extended("llama-tied", untie=True),
    "extend-softcap": lambda: extended("gemma3"),
}


@pytest.mark.parametrize("layout", MODELS)
def test_chunked_loss_and_gradients_are_the_whole_vocabulary_s(layout):
    model = MODELS[layout]()
    targets = {lang: batch.targets() for lang, batch in batches_of(model).items()}
    assert all(count > 2 * CHUNK and count % CHUNK for count in targets.values())  # several chunks, one short
    chunked, chunked_gradients = losses_and_gradients(model, lambda model, batches: model(batches))
    whole, whole_gradients = losses_and_gradients(model, whole_vocabulary_losses)
    assert chunked.keys() == whole.keys() and chunked_gradients.keys() == whole_gradients.keys()
    for lang in whole:
        torch.testing.assert_close(chunked[lang], whole[lang], rtol=1e-6, atol=1e-6)
    for name in whole_gradients:
        torch.testing.assert_close(chunked_gradients[name], whole_gradients[name], rtol=1e-5, atol=1e-6, msg=name)
    with torch.no_grad():  # evaluation: no checkpointing, the same loss
        evaluated = model(batches_of(model))
    for lang in whole:
        torch.testing.assert_close(evaluated[lang], whole[lang], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["replace-untied-bias", "extend-softcap"])
def test_under_autocast_the_chunked_loss_is_as_close_to_fp32_as_the_whole_vocabulary_s(layout):
    """bf16 matmuls (CPU autocast): the chunked loss and gradients are off fp32's by no more than the
    whole vocabulary's under autocast are (a small cap bends bf16 logits a lot: ~10% of a gradient)."""
    model = MODELS[layout]()

    def under_autocast(compute):
        def run(model, batches):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return compute(model, batches)
        return run

    exact, exact_gradients = losses_and_gradients(model, whole_vocabulary_losses)
    chunked, chunked_gradients = losses_and_gradients(model, under_autocast(lambda model, batches: model(batches)))
    whole, whole_gradients = losses_and_gradients(model, under_autocast(whole_vocabulary_losses))

    def off(values, name):
        return float((values[name] - exact_gradients[name]).abs().max() / exact_gradients[name].abs().max())

    for lang in exact:
        assert abs(chunked[lang] - exact[lang]) <= 1.5 * abs(whole[lang] - exact[lang]) + 1e-4
    for name in exact_gradients:
        assert off(chunked_gradients, name) <= 1.5 * off(whole_gradients, name) + 1e-3, name


class LargestLogits(TorchDispatchMode):
    """The most rows of any new tensor an op makes whose last dimension is a vocabulary's size."""

    def __init__(self, vocabularies):
        super().__init__()
        self.vocabularies, self.rows = set(vocabularies), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(ret.alias_info is not None for ret in func._schema.returns):  # a view (the output rows transposed)
            return out
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dim() == 2 and tensor.shape[-1] in self.vocabularies:
                self.rows = max(self.rows, tensor.shape[0])
        return out


@pytest.mark.parametrize("layout", ["replace-untied-bias", "extend-softcap"])
def test_no_more_than_one_chunk_of_logits_is_made_or_kept_for_backward(layout):
    """Forward keeps no vocabulary-sized tensor for backward (each chunk's gradients are made in
    forward), and neither pass makes logits of more than one chunk's positions; the whole
    vocabulary's loss does both."""
    model = MODELS[layout]()
    batches = batches_of(model)
    vocabularies = {model.vocabulary_size(lang) for lang in model.languages}
    hidden = model.config.hidden_size

    def measured(compute):
        saved = []

        def pack(tensor):
            saved.append(tuple(tensor.shape))
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
                LargestLogits(vocabularies) as largest:
            sum(compute(model, batches).values()).backward()
        # Vocabulary-sized tensors saved for backward, the output rows themselves aside.
        logits = [shape for shape in saved if shape[-1:] != (hidden,) and any(size in vocabularies for size in shape)
                  and len(shape) == 2]
        return logits, largest.rows

    kept, rows = measured(lambda model, batches: model(batches))
    assert kept == [] and rows == max(causal.logit_chunk(size) for size in vocabularies) < 20
    kept, rows = measured(whole_vocabulary_losses)
    assert kept and rows == max(batch.targets() for batch in batches.values())


def test_the_chunk_is_the_byte_budget_s_positions(monkeypatch):
    monkeypatch.setattr(causal, "LOGIT_CHUNK_BYTES", BUDGET)
    assert causal.logit_chunk(144_000) == 233
    assert causal.logit_chunk(32_000) == 1048
    assert causal.logit_chunk(10 ** 9) == 1  # never no position at all


def test_the_memory_plan_chunks_as_the_loss_does():
    from ramen.training import memory

    assert memory.LOGIT_CHUNK_BYTES == BUDGET == 128 * 2 ** 20


def peak_bytes(step) -> int:
    """The most bytes the CPU allocator held while ``step`` ran, above what it held before."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((event for event in prof.profiler.kineto_results.events() if event.name() == "[memory]"),
                    key=lambda event: event.start_ns())
    held = top = 0
    for event in events:
        held += event.nbytes()
        top = max(top, held)
    return top


def test_the_plan_s_logits_part_bounds_what_the_chunked_loss_holds(monkeypatch):
    """The loss and backward of a step's targets hold no more than the plan's ``logits`` part
    (fp32, on the CPU), nor much less; the whole vocabulary's logits at once held more."""
    from ramen.training import memory
    from ramen.training.memory import SourceShape, plan_job
    from ramen.training.settings import TrainSettings

    from tiny_decoder import tiny_llama

    vocab, rows, length = 2000, 4, 32
    monkeypatch.setattr(causal, "LOGIT_CHUNK_BYTES", 4 * 20 * vocab)  # 20 positions a chunk, the plan's too
    monkeypatch.setattr(memory, "LOGIT_CHUNK_BYTES", causal.LOGIT_CHUNK_BYTES)
    model = BilingualCausalLM(tiny_llama(vocab, tie=False, hidden=16), "en").train()
    settings = TrainSettings(steps=1, batch_size=rows, seq_len=length, warmup_steps=1, log_every=1, threads=1)
    plan = plan_job(SourceShape.from_config(model.lm.config.to_dict()), settings, foreign_rows=None, device="cpu")
    hidden = torch.randn(rows * length, 16, requires_grad=True)
    labels = torch.randint(0, vocab, (rows * length,), generator=torch.Generator().manual_seed(0))
    gradients = 4 * (vocab * 16 + hidden.numel())  # the output rows' and the states': other parts of the plan

    def held(loss_of):
        model.zero_grad(set_to_none=True)
        hidden.grad = None
        return peak_bytes(lambda: loss_of().backward()) - gradients

    chunked = held(lambda: model.next_token_loss("en", hidden, labels))
    whole = held(lambda: F.cross_entropy(model.logits("en", hidden), labels))
    print(f"held: chunked {chunked}, whole {whole}, planned {plan.parts['logits']}")
    assert plan.parts["logits"] / 2 <= chunked <= plan.parts["logits"] < whole
