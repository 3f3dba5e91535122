"""``dataset.augment``: per-sample crops and flips of training batches from per-client
generators; deterministic, the same when resumed or trained on host threads, never
applied to evaluation or measurements."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from sflsim.algorithms.base import SERVER_ID
from sflsim.config.scenario import Scenario
from sflsim.data.augment import augment_batch
from sflsim.errors import ConfigError
from sflsim.runner import build, run_scenario
from tests.test_resilience import StopAfter, assert_same_tables

PAPER = {"random_crop_padding": 4, "horizontal_flip": True}  # Hetero-SplitEE §IV-A1
WALL = ["wall_time_s"]


def _images(b: int = 64, c: int = 3, h: int = 8, w: int = 8) -> torch.Tensor:
    return torch.randint(1, 256, (b, c, h, w), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(0))


def _windows(x: torch.Tensor, p: int) -> list[torch.Tensor]:
    """Every crop of ``x`` ``(C, H, W)`` zero-padded by ``p``, flipped or not."""
    h, w = x.shape[1:]
    padded = torch.nn.functional.pad(x, (p, p, p, p))
    crops = [padded[:, i:i + h, j:j + w] for i in range(2 * p + 1) for j in range(2 * p + 1)]
    return crops + [c.flip(-1) for c in crops]


def test_every_image_is_one_padded_crop_maybe_flipped():
    x = _images()
    out = augment_batch(x, crop_padding=2, horizontal_flip=True,
                        generator=torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == torch.uint8
    for a, b in zip(out, x):
        assert any(torch.equal(a, win) for win in _windows(b, 2))
    # per sample, not one draw for the batch: many different offsets and both flip states
    shifted = sum(not torch.equal(a, b) and not torch.equal(a, b.flip(-1)) for a, b in zip(out, x))
    assert shifted > 32
    flips = augment_batch(x, crop_padding=0, horizontal_flip=True,
                          generator=torch.Generator().manual_seed(1))
    flipped = [torch.equal(a, b.flip(-1)) for a, b in zip(flips, x)]
    assert all(f or torch.equal(a, b) for f, a, b in zip(flipped, flips, x))
    assert 16 < sum(flipped) < 48
    # the padding is black pixels (0), as torchvision's RandomCrop(padding=4) before Normalize
    assert (out == 0).any() and not (x == 0).any()


def test_the_same_generator_state_gives_the_same_images_and_layout():
    x = _images().contiguous(memory_format=torch.channels_last)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = augment_batch(x, crop_padding=4, horizontal_flip=True, generator=g1)
    b = augment_batch(x, crop_padding=4, horizontal_flip=True, generator=g2)
    assert torch.equal(a, b) and a.is_contiguous(memory_format=torch.channels_last)
    c = augment_batch(x, crop_padding=4, horizontal_flip=True, generator=g1)  # advanced
    assert not torch.equal(a, c)
    assert augment_batch(x, crop_padding=0, horizontal_flip=False, generator=g1) is x


def _augmented(tiny: dict, **training) -> dict:
    tiny["dataset"]["augment"] = dict(PAPER)
    tiny["training"].update(training)
    return tiny


def test_config_default_is_none_and_refuses_negative_padding(tiny):
    assert Scenario.model_validate(tiny).dataset.augment is None
    tiny["dataset"]["augment"] = {"random_crop_padding": -1}
    with pytest.raises((ConfigError, ValueError), match="random_crop_padding"):
        Scenario.model_validate(tiny)


def test_training_batches_are_augmented_measurements_and_evaluation_are_not(tiny):
    tiny["algorithm"] = {"name": "centralized"}
    ctx, alg = build(Scenario.model_validate(_augmented(tiny)))
    assert set(alg.steps.augment_generators) == {SERVER_ID, 0, 1, 2}
    idx = torch.as_tensor(ctx.clients[0].indices[:16])
    plain = ctx.data.train_images(idx)
    x, y = alg.steps.train_batch(idx, 0)
    assert not torch.equal(x, plain) and torch.equal(y, ctx.data.y_train[idx])
    assert x.dtype == torch.float32 and x.shape == plain.shape
    assert torch.equal(alg.steps.train_batch(idx, None)[0], plain)  # a measurement
    # each client (and the server) draws from its own generator
    assert not torch.equal(alg.steps.train_batch(idx, 1)[0], alg.steps.train_batch(idx, SERVER_ID)[0])
    # the untrained models evaluate the same with and without augmentation (round 0)
    runs = [run_scenario(Scenario.model_validate(t)) for t in (tiny, _without(tiny))]
    r0 = [r.rounds[r.rounds["round"] == 0].drop(columns=WALL) for r in runs]
    pd.testing.assert_frame_equal(r0[0], r0[1], check_exact=True)
    r1 = [r.rounds[r.rounds["round"] == 1] for r in runs]
    assert r1[0].server_loss.iloc[0] != r1[1].server_loss.iloc[0]  # training saw other images


def _without(tiny: dict) -> dict:
    import copy

    plain = copy.deepcopy(tiny)
    plain["dataset"].pop("augment")
    return plain


def test_same_seed_same_run_and_training_seed_moves_the_draws(tiny):
    _augmented(tiny, rounds=1)
    a, b = (run_scenario(Scenario.model_validate(tiny)) for _ in range(2))
    pd.testing.assert_frame_equal(a.rounds.drop(columns=WALL), b.rounds.drop(columns=WALL),
                                  check_exact=True)
    ctx, alg = build(Scenario.model_validate(tiny))
    tiny["seeds"] = {"training": 5}
    ctx2, alg2 = build(Scenario.model_validate(tiny))
    assert not torch.equal(alg.steps.augment_generators[0].get_state(),
                           alg2.steps.augment_generators[0].get_state())


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "fedavg", "centralized"])
def test_resumed_run_equals_uninterrupted_run(tiny, tmp_path, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    scenario = Scenario.model_validate(_augmented(tiny, rounds=3))
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "full", tmp_path / "cut")


# host threads: in the isolated tests' one subprocess (see pyproject.toml)
@pytest.mark.isolated(group="host_kernels")
@pytest.mark.parametrize("algorithm", ["fedavg", "hetero_splitee_averaging"])
def test_parallel_clients_give_the_serial_run(tiny, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    _augmented(tiny, rounds=2)
    serial = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["parallel_clients"] = 3
    parallel = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(serial.rounds.drop(columns=WALL),
                                  parallel.rounds.drop(columns=WALL), check_exact=True)
    pd.testing.assert_frame_equal(serial.clients, parallel.clients, check_exact=True)
    assert [x[1:] for x in serial.algorithm.steps.losses] == [x[1:] for x in parallel.algorithm.steps.losses]


@pytest.mark.parametrize("pad, message", [
    (29, "dataset.augment.random_crop_padding: 29 pixels is more than the side of "
         "fashion_mnist's 28x28 images; valid: 0 to 28"),
    (10**9, "dataset.augment.random_crop_padding: 1000000000 is out of range; valid: 0 to 512"),
])
def test_crop_padding_has_an_upper_bound(tiny, tmp_path, pad, message):
    import yaml
    from typer.testing import CliRunner

    from sflsim.cli.main import app

    tiny["dataset"]["augment"] = {"random_crop_padding": pad}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_augmented_batch_has_its_layouts_own_strides(channels, layout):
    """A one-channel batch must not come back as the permuted view (HW, 1, W, 1), which
    counts as contiguous but which torch's AVX2 CPU convolutions mishandle (heap
    corruption in later stages' backward pass)."""
    x = torch.randint(0, 255, (4, channels, 8, 8), dtype=torch.uint8).contiguous(
        memory_format=layout)
    out = augment_batch(x, crop_padding=2, horizontal_flip=True,
                        generator=torch.Generator().manual_seed(0))
    # one channel: a channels-last batch is contiguous too, and comes back contiguous
    expected = torch.contiguous_format if channels == 1 else layout
    assert out.stride() == torch.empty_like(x, memory_format=expected).stride()
