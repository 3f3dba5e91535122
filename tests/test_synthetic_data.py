"""The ``synthetic`` dataset: blank images held once, seeded uniform labels, its fields checked."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from sflsim.config import validate_scenario
from sflsim.config.schema import DatasetConfig
from sflsim.data import load_dataset
from sflsim.errors import ConfigError
from sflsim.plots.result_files import num_classes
from sflsim.runner import run_scenario


def synthetic(tiny: dict, **fields) -> dict:
    tiny["dataset"] = {"name": "synthetic", "synthetic": fields, "partition": {"scheme": "iid"}}
    return tiny


def test_timing_only_fleet_of_3000_clients(tiny, tmp_path):
    tiny = synthetic(tiny, train_samples=3_000, test_samples=100)
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.5}
    tiny["devices"] = {"weak": {"profile": "rpi4", "count": 1_500, "end_layer": 3,
                                "link": "wifi"},
                       "mid": {"profile": "jetson_nano", "count": 1_500, "end_layer": 4,
                               "link": "lte"}}
    tiny["training"]["timing_only"] = True
    result = run_scenario(validate_scenario(tiny), tmp_path / "run")
    assert len(result.clients) == 3_000
    assert result.summary["sim_time_s"] > 0


def test_a_million_samples_hold_one_image():
    data = load_dataset("synthetic", synthetic={"train_samples": 1_000_000,
                                                "test_samples": 1_000})
    assert data.x_train.shape == (1_000_000, 1, 28, 28)
    assert data.x_train.untyped_storage().nbytes() == 28 * 28
    assert data.x_test.untyped_storage().nbytes() == 28 * 28
    batch = data.train_images(torch.tensor([0, 123_456, 999_999]))
    assert batch.shape == (3, 1, 28, 28) and batch.dtype == torch.float32
    assert not batch.any()  # zeros normalised with (0, 1) stay zeros
    x, y = data.test_subset(torch.arange(10))
    assert [len(b) for b, _ in data.batches(x, y, 4)] == [4, 4, 2]


def test_defaults_are_fashion_mnist_shaped_and_options_apply():
    data = load_dataset("synthetic")
    assert (len(data.y_train), len(data.y_test), data.num_classes) == (60_000, 10_000, 10)
    assert (data.in_channels, data.image_size, data.mean, data.std) == (1, 28, (0.0,), (1.0,))
    rgb = load_dataset("synthetic", synthetic={"classes": 5, "image_shape": [3, 32, 32],
                                               "train_samples": 5_000, "test_samples": 50})
    assert rgb.x_train.shape == (5_000, 3, 32, 32) and rgb.num_classes == 5
    assert rgb.mean == (0.0,) * 3 and rgb.std == (1.0,) * 3
    assert set(rgb.y_train.tolist()) == set(range(5))
    assert DatasetConfig(name="synthetic", synthetic={"classes": 5}).num_classes == 5
    assert DatasetConfig(name="synthetic").num_classes == 10


def test_fraction_keeps_a_class_balanced_subset():
    full = load_dataset("synthetic", synthetic={"train_samples": 10_000, "test_samples": 1_000})
    part = load_dataset("synthetic", synthetic={"train_samples": 10_000, "test_samples": 1_000},
                        fraction=0.1)
    counts = torch.bincount(full.y_train, minlength=10)
    kept = torch.bincount(part.y_train, minlength=10)
    assert kept.tolist() == [max(1, round(0.1 * c)) for c in counts.tolist()]
    assert part.x_train.shape[0] == len(part.y_train)
    assert part.x_train.untyped_storage().nbytes() == 28 * 28


def test_labels_follow_the_seed():
    def labels(seed):
        return load_dataset("synthetic", seed=seed,
                            synthetic={"train_samples": 500, "test_samples": 50})

    a, b, c = labels(1), labels(1), labels(2)
    assert torch.equal(a.y_train, b.y_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_train, c.y_train)
    assert a.y_train.dtype == torch.int64 and 0 <= a.y_train.min() <= a.y_train.max() < 10


def test_a_trained_round_runs_at_chance(tiny, tmp_path):
    scenario = validate_scenario(synthetic(tiny, train_samples=240, test_samples=40))
    result = run_scenario(scenario, tmp_path / "run")
    assert result.summary["rounds_completed"] == 1
    # every image is the same, so every prediction is one class: its share of the test set
    y_test = load_dataset("synthetic", seed=scenario.stream_seeds.partition,
                          synthetic={"train_samples": 240, "test_samples": 40}).y_test
    chance = torch.bincount(y_test).max().item() / len(y_test)
    for key in ("final_server_accuracy", "final_client_accuracy"):
        assert math.isfinite(result.summary[key]) and result.summary[key] <= chance + 1e-9
    assert num_classes(tmp_path / "run") == 10


def test_the_plots_read_the_classes_of_a_synthetic_run(tmp_path):
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(
        {"dataset": {"name": "synthetic", "synthetic": {"classes": 7}}}))
    assert num_classes(tmp_path) == 7


@pytest.mark.parametrize(("fields", "named"), [
    ({"train_samples": 0}, "dataset.synthetic.train_samples"),
    ({"test_samples": -1}, "dataset.synthetic.test_samples"),
    ({"classes": 1}, "dataset.synthetic.classes"),
    ({"image_shape": [2, 28, 28]}, "dataset.synthetic.image_shape"),
    ({"image_shape": [1, 4, 4]}, "dataset.synthetic.image_shape"),
    ({"image_shape": [3, 32, 16]}, "dataset.synthetic.image_shape"),
    ({"image_shape": [28, 28]}, "dataset.synthetic.image_shape"),
    ({"samples": 10}, "dataset.synthetic.samples"),
])
def test_bad_fields_are_named(tiny, fields, named):
    with pytest.raises(ConfigError) as err:
        validate_scenario(synthetic(tiny, **fields))
    message = str(err.value)
    assert named in message and "problems" not in message
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_dataset("synthetic", synthetic=fields)


def test_a_synthetic_block_for_another_dataset_is_refused(tiny):
    tiny["dataset"]["synthetic"] = {"train_samples": 100}
    with pytest.raises(ConfigError, match=r"dataset\.synthetic applies only to name: synthetic"):
        validate_scenario(tiny)
    with pytest.raises(ConfigError, match=r"dataset\.synthetic"):
        load_dataset("fashion_mnist", synthetic={"train_samples": 100})


def test_too_many_clients_names_train_samples(tiny, tmp_path):
    tiny = synthetic(tiny, train_samples=2)
    with pytest.raises(ConfigError, match=r"dataset\.synthetic\.train_samples"):
        run_scenario(validate_scenario(tiny), tmp_path / "run")
