"""Datasets on disk in each supported format (tiny fixtures: tests/dataset_files.py), downloads
(patched: nothing is fetched), half-extracted folders, the ``domain`` partition, and
images kept on disk (decoded per batch) against images in memory."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from sflsim.config.scenario import Scenario
from sflsim.data import label_skew, load_dataset, partition
from sflsim.data.images import DiskImages
from sflsim.errors import ConfigError, DatasetError, DatasetNotFoundError
from sflsim.memory import LIMIT_ENV, estimate_memory
from sflsim.metrics.results import read_run_table
from sflsim.runner import build, build_backbone, load_data, run_scenario
from tests.dataset_files import (
    write_cifar10,
    write_domainnet,
    write_stl10,
    write_tiny_imagenet,
)

WALL = ["wall_time_s"]


# ----- the formats load -----------------------------------------------------------------

def test_stl10_binary_loads_as_nchw(tmp_path, tv_checks):
    _, train = write_stl10(tmp_path)
    d = load_dataset("stl10", data_root=tmp_path)
    assert d.x_train.shape == (12, 3, 96, 96) and d.x_train.dtype == torch.uint8
    assert d.x_test.shape == (6, 3, 96, 96)
    assert torch.equal(d.x_train, torch.from_numpy(train))
    assert d.y_train.tolist() == [k % 10 for k in range(12)]  # 1-based on disk
    assert (d.num_classes, d.in_channels, d.image_size) == (10, 3, 96)


def test_stl10_label_out_of_range_names_the_file(tmp_path, tv_checks):
    labels = (np.arange(12) % 10 + 1).astype(np.uint8)
    labels[4] = 11
    write_stl10(tmp_path, labels=labels)
    with pytest.raises(DatasetError, match=r"train_y.bin: train label 10 at index 4 is outside"):
        load_dataset("stl10", data_root=tmp_path)


def test_stl10_missing_names_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("stl10", data_root=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "stl10_binary") in msg and "train_X.bin" in msg
    assert "stanford.edu/~acoates/stl10" in msg and "dataset.download: true" in msg


def test_tiny_imagenet_lists_then_decodes(tmp_path):
    write_tiny_imagenet(tmp_path)
    d = load_dataset("tiny_imagenet", data_root=tmp_path)
    assert isinstance(d.x_train, DiskImages) and d.on_disk
    assert len(d.y_train) == 200 and d.y_train.tolist() == list(range(200))
    assert d.y_test.tolist() == [(7 * i) % 200 for i in range(6)]
    assert (d.num_classes, d.in_channels, d.image_size) == (200, 3, 64)
    held = d.in_memory()
    assert held.x_test.shape == (6, 3, 64, 64) and held.x_test.dtype == torch.uint8
    grey = held.x_test[0]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])
    assert torch.equal(held.x_train[[3, 1]], d.x_train[torch.tensor([3, 1])])
    # resized on request
    small = load_dataset("tiny_imagenet", data_root=tmp_path, image_size=32)
    assert small.in_memory().x_train.shape == (200, 3, 32, 32)


def test_domainnet_lists_domains_and_resizes(tmp_path):
    write_domainnet(tmp_path)
    d = load_dataset("domainnet", data_root=tmp_path, domains=["sketch", "clipart"],
                     image_size=24)
    assert d.domain_names == ("sketch", "clipart")
    assert len(d.y_train) == 24 and d.domain_train.tolist() == [0] * 12 + [1] * 12
    assert d.domain_test.tolist() == [0] * 3 + [1] * 3
    assert sorted(set(d.y_train.tolist())) == [0, 5, 344]
    assert (d.num_classes, d.image_size) == (345, 24)
    assert d.in_memory().x_train.shape == (24, 3, 24, 24)
    # a fraction keeps every (domain, class) pair
    part = load_dataset("domainnet", data_root=tmp_path, domains=["sketch", "clipart"],
                        fraction=0.25, seed=1)
    assert len(part.y_train) == 6 and sorted(part.domain_train.tolist()) == [0] * 3 + [1] * 3


# ----- downloads (patched) ---------------------------------------------------------------

def test_cifar_download_when_missing_calls_torchvision_with_the_root(tmp_path, monkeypatch,
                                                                     tv_checks):
    import torchvision.datasets.cifar as tv_cifar

    calls = []

    def fake_download(url, download_root, **kwargs):
        calls.append((url, Path(download_root)))
        write_cifar10(Path(download_root))

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", fake_download)
    d = load_dataset("cifar10", data_root=tmp_path / "new", download=True)
    assert calls == [(tv_cifar.CIFAR10.url, tmp_path / "new")]
    assert d.x_train.shape == (20, 3, 32, 32)
    load_dataset("cifar10", data_root=tmp_path / "new", download=True)  # present: no download
    assert len(calls) == 1


def test_failed_download_is_one_error_with_the_layout_and_url(tmp_path, monkeypatch, tv_checks):
    import urllib.error

    import torchvision.datasets.cifar as tv_cifar

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("cifar100", data_root=tmp_path, download=True)
    msg = str(err.value)
    assert "could not be downloaded" in msg and "name resolution" in msg
    assert "cifar-100-python" in msg and "cs.toronto.edu/~kriz/cifar.html" in msg
    # the folders the download made for data_root are gone again (nothing was fetched)
    with pytest.raises(DatasetNotFoundError, match="could not be downloaded"):
        load_dataset("cifar10", data_root=tmp_path / "new" / "data", download=True)
    assert not (tmp_path / "new").exists()


def test_validate_never_downloads(tmp_path, monkeypatch, tiny):
    """``sflsim validate`` with ``download: true`` checks the scenario and says the files
    are not there yet; only ``sflsim run`` downloads them."""
    import torchvision.datasets.cifar as tv_cifar
    import yaml
    from typer.testing import CliRunner

    from sflsim.cli.main import app

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive",
                        lambda *a, **k: pytest.fail("validate downloaded"))
    tiny["dataset"] = {"name": "cifar10", "data_root": str(tmp_path / "data"), "download": True,
                       "partition": {"scheme": "iid"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "not downloaded" in result.output and "sflsim run" in result.output
    assert not (tmp_path / "data").exists()


def test_download_false_never_downloads(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive",
                        lambda *a, **k: pytest.fail("downloaded"))
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        load_dataset("cifar10", data_root=tmp_path)


# ----- half-extracted and corrupt folders: one error naming the file ---------------------

def test_tiny_imagenet_missing_wnids(tmp_path):
    base = write_tiny_imagenet(tmp_path)
    (base / "wnids.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"wnids.txt is missing.*tiny-imagenet-200.zip"):
        load_dataset("tiny_imagenet", data_root=tmp_path)
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        load_dataset("tiny_imagenet", data_root=tmp_path / "elsewhere")


def test_tiny_imagenet_annotation_naming_a_missing_image(tmp_path):
    base = write_tiny_imagenet(tmp_path)
    (base / "val" / "images" / "val_3.JPEG").unlink()
    with pytest.raises(DatasetError, match=r"val_annotations.txt:4: image .*val_3.JPEG does not "
                                           r"exist"):
        load_dataset("tiny_imagenet", data_root=tmp_path)


def test_unreadable_jpeg_is_named_when_decoded(tmp_path):
    base = write_tiny_imagenet(tmp_path)
    bad = base / "train" / "n00000003" / "images" / "n00000003_0.JPEG"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    d = load_dataset("tiny_imagenet", data_root=tmp_path)
    with pytest.raises(DatasetError, match=f"{bad}: cannot decode the image"):
        d.in_memory()


@pytest.mark.parametrize(("line", "expected"), [
    ("clipart/class_000/x.jpg", r"clipart_train.txt:2: expected '<domain>/<class>/<image> "
                                r"<label>', got 'clipart/class_000/x.jpg'"),
    ("clipart/class_000/x.jpg seven", r"clipart_train.txt:2: expected"),
    ("clipart/class_000/clipart_train_000_0.jpg 345", r"clipart_train.txt:2: label 345 is "
                                                      r"outside \[0, 345\)"),
    ("clipart/class_000/missing.jpg 0", r"clipart_train.txt:2: image .*missing.jpg does not "
                                        r"exist"),
])
def test_domainnet_bad_list_lines(tmp_path, line, expected):
    write_domainnet(tmp_path)
    lst = tmp_path / "clipart_train.txt"
    lines = lst.read_text().splitlines()
    lines[1] = line
    lst.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=expected):
        load_dataset("domainnet", data_root=tmp_path, domains=["clipart", "sketch"])


def test_domainnet_missing_list_names_the_layout(tmp_path):
    write_domainnet(tmp_path)
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("domainnet", data_root=tmp_path)  # all six: painting etc. are missing
    msg = str(err.value)
    assert "infograph_train.txt is missing" in msg and "ai.bu.edu/M3SDA" in msg
    assert "<data_root>/infograph/<class>/<image>" in msg


@pytest.mark.parametrize(("data", "field"), [
    ({"name": "cifar10", "image_size": 64}, "image_size"),
    ({"name": "cifar10", "domains": ["real"]}, "domains"),
    ({"name": "tiny_imagenet", "download": True}, "download"),
    ({"name": "cifar10", "partition": {"scheme": "domain", "alpha": 0.5}}, "scheme: domain"),
    ({"name": "cifar10", "storage": "disk"}, "storage"),
    ({"name": "domainnet", "domains": ["real", "real"]}, "distinct"),
])
def test_options_a_dataset_does_not_have_are_refused(tiny, data, field):
    tiny["dataset"] = data
    with pytest.raises((ConfigError, ValueError), match=field):
        Scenario.model_validate(tiny)


# ----- the domain partition ---------------------------------------------------------------

def test_domain_partition_gives_each_client_one_domain_and_label_skew():
    rng = np.random.default_rng(0)
    domains = np.repeat(np.arange(3), 600)
    labels = rng.integers(0, 10, domains.size)
    for alpha, low, high in ((0.1, 0.3, 1.0), (100.0, 0.0, 0.1)):  # 2-3 clients a domain
        parts = partition(labels, 7, scheme="domain", alpha=alpha, rng=np.random.default_rng(1),
                          domains=domains)
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(domains.size))
        for i, p in enumerate(parts):
            assert p.size >= 1 and set(domains[p]) == {i % 3}  # client i -> domain i mod 3
        skews = [label_skew(labels[domains == d], [np.searchsorted(
            np.flatnonzero(domains == d), p) for i, p in enumerate(parts) if i % 3 == d], 10)
            for d in range(3)]
        assert all(low <= s <= high for s in skews), (alpha, skews)


def test_domain_partition_errors():
    labels, domains = np.zeros(30, np.int64), np.repeat(np.arange(3), 10)
    with pytest.raises(ConfigError, match="needs a dataset whose samples have domains"):
        partition(labels, 4, scheme="domain", rng=np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"3 domains .* only 2 clients"):
        partition(labels, 2, scheme="domain", rng=np.random.default_rng(0), domains=domains)


# ----- end to end: every format trains and evaluates --------------------------------------

def _scenario(tiny: dict, dataset: dict, **training) -> Scenario:
    tiny = copy.deepcopy(tiny)
    tiny["dataset"] = dataset
    tiny["training"].update(training)
    tiny["evaluation"] = {"max_test_samples": 4, "batch_size": 3,
                          "early_exit": {"samples_per_client": 2, "tau_step": 1.0}}
    return Scenario.model_validate(tiny)


def _check_run(result, n_clients: int = 3) -> None:
    assert result.summary["status"] == "completed"
    rounds = result.rounds
    assert rounds["server_accuracy"].notna().all() and len(rounds) == 2
    assert np.isfinite(rounds.loc[rounds["round"] == 1, "server_loss"]).all()
    assert len(result.clients) == n_clients


def test_cifar10_runs_end_to_end(tiny, tmp_path, tv_checks):
    write_cifar10(tmp_path)
    _check_run(run_scenario(_scenario(tiny, {"name": "cifar10", "data_root": str(tmp_path),
                                              "augment": {"random_crop_padding": 4,
                                                          "horizontal_flip": True}})))


def test_stl10_runs_end_to_end(tiny, tmp_path, tv_checks):
    write_stl10(tmp_path)
    _check_run(run_scenario(_scenario(tiny, {"name": "stl10", "data_root": str(tmp_path)},
                                      batch_size=4)))


def test_tiny_imagenet_runs_end_to_end(tiny, tmp_path):
    write_tiny_imagenet(tmp_path)
    result = run_scenario(_scenario(tiny, {"name": "tiny_imagenet", "data_root": str(tmp_path),
                                           "image_size": 32}, batch_size=64))
    _check_run(result)
    assert result.scenario.dataset.image_size == 32
    assert (result.clients["domain"] == "").all()


def test_domainnet_runs_end_to_end_with_the_domain_partition(tiny, tmp_path):
    write_domainnet(tmp_path)
    dataset = {"name": "domainnet", "data_root": str(tmp_path), "domains": ["clipart", "sketch"],
               "image_size": 40, "partition": {"scheme": "domain", "alpha": 0.5}}
    result = run_scenario(_scenario(tiny, dataset, batch_size=4), tmp_path / "out")
    _check_run(result)
    assert result.clients["domain"].tolist() == ["clipart", "sketch", "clipart"]
    written = read_run_table(tmp_path / "out", "clients", ["domain"])
    assert written["domain"].tolist() == ["clipart", "sketch", "clipart"]
    assert result.scenario.dataset.image_size == 40


# ----- images on disk (decoded per batch) give the run of images in memory ----------------

def test_images_on_disk_give_the_same_run_as_in_memory(tiny, tmp_path):
    write_domainnet(tmp_path)
    dataset = {"name": "domainnet", "data_root": str(tmp_path), "domains": ["clipart", "sketch"],
               "image_size": 16, "augment": {"random_crop_padding": 2, "horizontal_flip": True}}
    runs = {}
    for storage in ("memory", "disk"):
        scenario = _scenario(tiny, {**dataset, "storage": storage}, rounds=2, batch_size=4)
        ctx, _ = build(scenario)
        assert ctx.data.on_disk == (storage == "disk")
        runs[storage] = run_scenario(scenario)
    a, b = runs["memory"], runs["disk"]
    pd.testing.assert_frame_equal(a.rounds.drop(columns=WALL), b.rounds.drop(columns=WALL),
                                  check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    pd.testing.assert_frame_equal(a.early_exit, b.early_exit, check_exact=True)


def test_auto_storage_follows_the_memory_estimate(tiny, tmp_path, monkeypatch):
    write_domainnet(tmp_path)
    scenario = _scenario(tiny, {"name": "domainnet", "data_root": str(tmp_path),
                                "domains": ["clipart", "sketch"], "image_size": 64})
    data = load_data(scenario)
    backbone = build_backbone(scenario, data, 0)
    held = estimate_memory(scenario, backbone, data, on_disk=False)
    lazy = estimate_memory(scenario, backbone, data, on_disk=True)
    assert held.contributors["dataset"] == (24 + 6) * (8 + 3 * 64 * 64) + 4 * (3 * 64 * 64 + 8)
    assert lazy.total_bytes < held.total_bytes
    monkeypatch.setenv(LIMIT_ENV, str(held.total_bytes))
    assert not build(scenario)[0].data.on_disk  # fits in memory: decoded once
    monkeypatch.setenv(LIMIT_ENV, str(held.total_bytes - 1))
    ctx, _ = build(scenario)
    assert ctx.data.on_disk  # one byte short: decoded per batch
    monkeypatch.setenv(LIMIT_ENV, str(lazy.total_bytes - 1))
    with pytest.raises(ConfigError, match="memory: this run needs"):
        build(scenario)
    # storage: memory is refused before anything is decoded when it cannot fit
    forced = scenario.model_copy(update={"dataset": scenario.dataset.model_copy(
        update={"storage": "memory"})})
    monkeypatch.setenv(LIMIT_ENV, str(held.total_bytes - 1))
    monkeypatch.setattr(DiskImages, "decode_all", lambda self: pytest.fail("decoded"))
    with pytest.raises(ConfigError, match="memory: this run needs"):
        build(forced)


def test_a_dataset_too_large_for_memory_is_told_to_stay_on_disk():
    from sflsim.memory import MemoryEstimate, check_fits

    with pytest.raises(ConfigError, match=r"largest part is dataset: .*dataset.storage: disk"):
        check_fits(MemoryEstimate({"dataset": 88 * 2**30, "backbone": 2**20}), 24 * 2**30)


def test_resume_may_switch_storage_and_equals_the_uninterrupted_run(tiny, tmp_path):
    from tests.test_resilience import StopAfter, assert_same_tables

    write_domainnet(tmp_path)
    dataset = {"name": "domainnet", "data_root": str(tmp_path), "domains": ["clipart", "sketch"],
               "image_size": 16, "augment": {"random_crop_padding": 2, "horizontal_flip": True},
               "storage": "memory"}
    scenario = _scenario(tiny, dataset, rounds=3, batch_size=4)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    on_disk = _scenario(tiny, {**dataset, "storage": "disk"}, rounds=3, batch_size=4)
    resumed = run_scenario(on_disk, tmp_path / "cut", resume=True)
    assert resumed.algorithm.ctx.data.on_disk
    assert_same_tables(tmp_path / "full", tmp_path / "cut")
