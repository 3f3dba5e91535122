"""``dataset.name: image_folder``: the user's own images in torchvision's ImageFolder layout
(tiny fixture: tests/dataset_files.py writes PNGs), its classes, channels and size read
from the files, a run end to end, and one message for each kind of bad folder."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config.scenario import Scenario
from sflsim.data import load_dataset
from sflsim.data.presence import check_dataset_files
from sflsim.errors import ConfigError, DatasetError, DatasetNotFoundError
from sflsim.runner import run_scenario
from tests.dataset_files import write_image_folder


def test_classes_labels_and_pixels_come_from_the_folders(tmp_path):
    written = write_image_folder(tmp_path)
    (tmp_path / "train" / "dog" / "notes.txt").write_text("not an image: ignored")
    d = load_dataset("image_folder", data_root=tmp_path)
    assert (d.num_classes, d.in_channels, d.image_size) == (3, 3, 16)  # native 16x16 kept
    assert d.x_train.shape == (24, 3, 16, 16) and d.x_test.shape == (6, 3, 16, 16)
    assert d.y_train.tolist() == [0] * 8 + [1] * 8 + [2] * 8  # cat, dog, owl: sorted
    assert d.y_test.tolist() == [0, 0, 1, 1, 2, 2]
    assert d.mean == (0.5,) * 3 and d.std == (0.5,) * 3
    held = d.in_memory()
    assert torch.equal(held.x_train, torch.from_numpy(np.stack(written["train"])).permute(0, 3, 1, 2))
    assert torch.equal(held.x_test[5], torch.from_numpy(written["test"][5]).permute(2, 0, 1))


def test_grey_files_give_one_channel_unless_told(tmp_path):
    written = write_image_folder(tmp_path, grey=True)
    d = load_dataset("image_folder", data_root=tmp_path)
    assert d.in_channels == 1 and d.x_train.shape == (24, 1, 16, 16)
    assert torch.equal(d.in_memory().x_train[:, 0], torch.from_numpy(np.stack(written["train"])))
    rgb = load_dataset("image_folder", data_root=tmp_path, channels=3).in_memory()
    assert rgb.in_channels == 3 and torch.equal(rgb.x_train[:, 0], rgb.x_train[:, 2])
    # 16-bit grey is scaled to 8 bits, not clipped at 255
    wide = np.array([[0, 257, 32896, 65535]] * 4, np.uint16)  # 0, 1, 128, 255 in 8 bits
    Image.fromarray(wide).resize((16, 16), Image.NEAREST).save(tmp_path / "test/owl/wide.png")
    d = load_dataset("image_folder", data_root=tmp_path)
    assert d.in_channels == 1
    assert sorted(set(d.in_memory().x_test[-1].flatten().tolist())) == [0, 1, 128, 255]
    # one colour image among grey ones: every image gets three channels
    Image.fromarray(np.full((16, 16, 3), (255, 0, 0), np.uint8)).save(tmp_path / "test/owl/x.png")
    assert load_dataset("image_folder", data_root=tmp_path).in_channels == 3


def test_image_size_resizes_and_is_needed_for_mixed_sizes(tmp_path):
    write_image_folder(tmp_path)
    Image.fromarray(np.zeros((20, 12, 3), np.uint8)).save(tmp_path / "train/dog/big.png")
    with pytest.raises(DatasetError, match=r"dataset.image_size: null keeps the images' own size.*"
                                           r"big.png is 12x20 .*set dataset.image_size"):
        load_dataset("image_folder", data_root=tmp_path)
    d = load_dataset("image_folder", data_root=tmp_path, image_size=8)
    assert d.image_size == 8 and d.in_memory().x_train.shape == (25, 3, 8, 8)


def _bad_folder(root: Path, case: str) -> Path:
    """A folder with one defect; returns what ``dataset.data_root`` points at."""
    if case == "missing":
        return root / "nowhere"
    write_image_folder(root)
    if case == "no test":
        shutil.rmtree(root / "test")
    elif case == "no class folders":
        for c in ("cat", "dog", "owl"):
            shutil.rmtree(root / "train" / c)
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(root / "train" / "loose.png")
    elif case == "empty class":
        for f in (root / "test" / "dog").iterdir():
            f.unlink()
    elif case == "unreadable":
        (root / "train" / "owl" / "03.png").write_bytes(b"\x89PNG not really")
    elif case == "other classes":
        (root / "test" / "owl").rename(root / "test" / "emu")
    elif case == "one class":  # every prediction would be right
        for split in ("train", "test"):
            for c in ("dog", "owl"):
                shutil.rmtree(root / split / c)
    return root


@pytest.mark.parametrize(("case", "error", "expected"), [
    ("missing", DatasetNotFoundError, r"dataset.data_root: .*nowhere does not exist; image_folder "
                                      r"reads <data_root>/train/<class>/<image> and "
                                      r"<data_root>/test/<class>/<image>"),
    ("no test", DatasetNotFoundError, r"dataset.data_root: .* has no test/ folder \(it holds "
                                      r"train/\)"),
    ("no class folders", DatasetError, r"train holds no class folders \(its images \(loose.png\) "
                                       r"must be in class folders\)"),
    ("empty class", DatasetError, r"1 class folder of .*test holds no images: dog; every class"),
    ("unreadable", DatasetError, r"owl/03.png: cannot read the image .*replace or remove it"),
    ("other classes", DatasetError, r"test/ must hold the class folders of train/ \(only in "
                                    r"train/: owl; only in test/: emu\); train/ has 3 classes "
                                    r"\(cat, dog, owl\), test/ has 3 \(cat, dog, emu\)"),
    ("one class", DatasetError, r"train holds one class folder \(cat\); a classifier needs at "
                                r"least 2"),
])
def test_a_bad_folder_is_one_message_naming_the_field(tmp_path, case, error, expected):
    root = _bad_folder(tmp_path, case)
    with pytest.raises(error, match=expected) as err:
        load_dataset("image_folder", data_root=root)
    assert type(err.value) is error


def test_missing_folders_are_told_before_torch_loads(tiny, tmp_path):
    tiny["dataset"] = {"name": "image_folder", "data_root": str(tmp_path)}
    with pytest.raises(DatasetNotFoundError, match=r"has no train/ and no test/ folder \(it is "
                                                   r"empty\)"):
        check_dataset_files(Scenario.model_validate(tiny))


@pytest.mark.parametrize(("dataset", "expected"), [
    ({"name": "image_folder"}, "dataset.data_root is required by image_folder"),
    ({"name": "cifar10", "channels": 1}, "dataset.channels applies only to image_folder"),
    ({"name": "image_folder", "data_root": "x", "channels": 2}, "channels"),
])
def test_options_are_checked_by_the_schema(tiny, dataset, expected):
    tiny["dataset"] = dataset
    with pytest.raises((ConfigError, ValueError), match=expected):
        Scenario.model_validate(tiny)


def test_cli_prints_one_line_for_a_bad_folder(tiny, tmp_path):
    import yaml

    _bad_folder(tmp_path / "data", "other classes")
    tiny["dataset"] = {"name": "image_folder", "data_root": str(tmp_path / "data")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny))
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "s.yaml")])
    assert result.exit_code == USER_ERROR, result.output
    assert "Traceback" not in result.output
    assert "error:" in result.output and "only in test/: emu" in result.output


def test_image_folder_trains_end_to_end(tiny, tmp_path):
    write_image_folder(tmp_path / "data", grey=True)
    scenario = copy.deepcopy(tiny)
    scenario["dataset"] = {"name": "image_folder", "data_root": str(tmp_path / "data"),
                           "partition": {"scheme": "dirichlet", "alpha": 0.5},
                           "augment": {"random_crop_padding": 2, "horizontal_flip": True}}
    scenario["training"]["batch_size"] = 4
    scenario["evaluation"] = {"max_test_samples": 4, "batch_size": 3}
    result = run_scenario(Scenario.model_validate(scenario), tmp_path / "out")
    assert result.summary["status"] == "completed"
    rounds = result.rounds
    assert len(rounds) == 2 and rounds["server_accuracy"].notna().all()
    assert np.isfinite(rounds.loc[rounds["round"] == 1, "server_loss"]).all()
    ctx = result.algorithm.ctx
    assert (ctx.data.num_classes, ctx.data.in_channels, ctx.data.image_size) == (3, 1, 16)
    assert ctx.backbone.num_classes == 3 and ctx.backbone.input_shape[0] == 1
    assert result.scenario.dataset.image_size is None  # scenario.yaml: the images' own size
    # manifest.json says what the files gave
    used = json.loads((tmp_path / "out" / "manifest.json").read_text())["dataset"]
    assert (used["num_classes"], used["channels"], used["image_size"]) == (3, 1, 16)
    assert used["train_samples"] == len(ctx.data.y_train) > 0
