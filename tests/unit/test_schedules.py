"""Every learning-rate schedule is written once (ramen.training.optimisation) and each loop that
uses one gets exactly the values it got from its own copy before: the reference functions below
are those copies, verbatim, and the comparisons are exact, not approximate."""

import math

import pytest
import torch

from ramen.char2subword import approximate, pretrain
from ramen.nmt.train import NmtTrainSettings
from ramen.training.optimisation import linear_warmup_decay
from ramen.training.schedules import inverse_sqrt, warmup_cosine, warmup_linear_decay
from ramen.training.trainer import TrainSettings

STEPS = [*range(0, 130), 199, 200, 201, 999, 1000, 1001, 3999, 4000, 4001, 10_000, 120_000]
WARMUPS = [1, 2, 3, 7, 10, 100, 1000, 4000]


# --- the copies each loop had ------------------------------------------------------------------

def bilingual_before(step, settings):  # ramen.training.trainer.learning_rate
    if settings.warmup_steps > 0 and step < settings.warmup_steps:
        return settings.init_lr + (settings.peak_lr - settings.init_lr) * step / settings.warmup_steps
    return settings.peak_lr * math.sqrt(max(settings.warmup_steps, 1) / max(step, 1))


def nmt_before(step, settings):  # ramen.nmt.train.inverse_sqrt_lr
    if step < settings.warmup_steps:
        return settings.init_lr + step * (settings.peak_lr - settings.init_lr) / settings.warmup_steps
    return settings.peak_lr * math.sqrt(settings.warmup_steps / max(step, 1))


def char2subword_before(step, warmup, total):  # ramen.char2subword.approximate.warmup_then_cosine
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def fine_tuning_before(optimizer, warmup_ratio, total_steps):  # the fine-tuning loops' linear_warmup_decay
    warmup = int(warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# --- the loops' values now ---------------------------------------------------------------------

@pytest.mark.parametrize("peak, init", [(1e-4, 1e-7), (5e-4, 1e-7), (1e-3, 1e-6), (3e-3, 0.0), (2e-5, 2e-5)])
def test_bilingual_training_rates_are_unchanged(peak, init):
    for warmup in [0, *WARMUPS]:
        settings = TrainSettings(steps=10, batch_size=2, peak_lr=peak, init_lr=init, warmup_steps=warmup)
        assert [settings.learning_rate(step) for step in STEPS] == [bilingual_before(s, settings) for s in STEPS]


@pytest.mark.parametrize("peak, init", [(5e-4, 1e-7), (1e-3, 0.0), (3e-3, 1e-7), (7e-4, 1e-4)])
def test_nmt_rates_are_unchanged(peak, init):
    for warmup in WARMUPS:
        settings = NmtTrainSettings(peak_lr=peak, init_lr=init, warmup_steps=warmup)
        assert [settings.learning_rate(step) for step in STEPS] == [nmt_before(s, settings) for s in STEPS]


def test_nmt_without_warm_up_now_decays_from_the_peak_as_bilingual_training_does():
    # The NMT copy gave a rate of 0 at every step when warmup_steps was 0 (nothing trained); the
    # one schedule starts at the peak and decays, as it always did for bilingual training.
    settings = NmtTrainSettings(peak_lr=1e-3, init_lr=1e-7, warmup_steps=0)
    assert [nmt_before(step, settings) for step in (1, 4, 100)] == [0.0, 0.0, 0.0]
    assert [settings.learning_rate(step) for step in (1, 4, 100)] == [1e-3, 1e-3 / 2, 1e-3 / 10]


def rates(schedule, steps: int) -> list[float]:
    values = []
    for _ in range(steps):
        values.append(schedule.optimizer.param_groups[0]["lr"])
        schedule.optimizer.step()
        schedule.step()
    return values


def optimizer(lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


@pytest.mark.parametrize("lr", [3e-4, 1e-3, 0.01])
def test_char2subword_rates_are_unchanged(lr):
    # Both char2subword loops (approximation and pre-training) multiply their rate by this factor.
    assert approximate.warmup_cosine is pretrain.warmup_cosine is warmup_cosine
    for warmup, total in [(0, 50), (1, 4), (5, 100), (100, 100), (100, 1000), (10, 5)]:
        assert [warmup_cosine(step, warmup, total) for step in STEPS] == \
            [char2subword_before(step, warmup, total) for step in STEPS]
        ours = torch.optim.lr_scheduler.LambdaLR(optimizer(lr), lambda step: warmup_cosine(step, warmup, total))
        theirs = torch.optim.lr_scheduler.LambdaLR(optimizer(lr),
                                                   lambda step: char2subword_before(step, warmup, total))
        assert rates(ours, total + 5) == rates(theirs, total + 5)


@pytest.mark.parametrize("lr", [2e-5, 5e-5, 1e-3])
def test_fine_tuning_rates_are_unchanged(lr):
    for ratio, total in [(0.0, 30), (0.1, 30), (0.1, 1000), (0.06, 517), (0.5, 3), (0.99, 10)]:
        assert rates(linear_warmup_decay(optimizer(lr), ratio, total), total + 3) == \
            rates(fine_tuning_before(optimizer(lr), ratio, total), total + 3)


def test_the_schedules_are_functions_of_plain_numbers():
    assert inverse_sqrt(0, 1e-3, 40, 1e-6) == 1e-6
    assert inverse_sqrt(40, 1e-3, 40, 1e-6) == 1e-3
    assert inverse_sqrt(160, 1e-3, 40) == pytest.approx(5e-4)
    assert warmup_cosine(0, 4, 10) == 0.25 and warmup_cosine(10, 4, 10) == pytest.approx(0.0)
    assert warmup_linear_decay(5, 10, 30) == 0.5 and warmup_linear_decay(20, 10, 30) == 0.5
    assert warmup_linear_decay(40, 10, 30) == 0.0
