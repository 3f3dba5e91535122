"""Tests of sflsim.data: datasets, the embedded subset and partitioners."""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sflsim.data import DATASETS, DatasetSplit, load_dataset, partition
from sflsim.data.datasets import EMBEDDED_NPZ, FASHION_MNIST_ROOT
from sflsim.data.partition import PARTITIONERS, label_skew, register_partitioner
from sflsim.errors import ConfigError, DatasetError, DatasetNotFoundError

HAVE_DEBIAN_FMNIST = (FASHION_MNIST_ROOT / "train-images-idx3-ubyte.gz").is_file()


@pytest.fixture(scope="module")
def fmnist() -> DatasetSplit:
    return load_dataset("fashion_mnist")


# ---------------------------------------------------------------- embedded subset


def test_embedded_subset_is_balanced_uint8():
    with np.load(EMBEDDED_NPZ) as npz:
        assert npz["x_train"].dtype == np.uint8 and npz["x_train"].shape == (12000, 28, 28)
        assert npz["x_test"].dtype == np.uint8 and npz["x_test"].shape == (2000, 28, 28)
        assert np.array_equal(np.bincount(npz["y_train"]), np.full(10, 1200))
        assert np.array_equal(np.bincount(npz["y_test"]), np.full(10, 200))


@pytest.mark.skipif(not HAVE_DEBIAN_FMNIST, reason="dataset-fashion-mnist not installed")
def test_embedded_subset_matches_source_files():
    from sflsim.data.datasets import _load_idx_folder

    full, _ = _load_idx_folder(FASHION_MNIST_ROOT)
    with np.load(EMBEDDED_NPZ) as npz:
        for split in ("train", "test"):
            src = npz[f"{split}_source_index"]
            assert np.all(np.diff(src) > 0)
            assert np.array_equal(npz[f"x_{split}"], full[f"x_{split}"][src])
            assert np.array_equal(npz[f"y_{split}"], full[f"y_{split}"][src])


# ---------------------------------------------------------------- load_dataset


def test_load_fashion_mnist_shapes_and_normalization(fmnist):
    assert fmnist.name == "fashion_mnist"
    assert fmnist.x_train.shape == (12000, 1, 28, 28) and fmnist.x_train.dtype == torch.uint8
    assert fmnist.x_test.shape == (2000, 1, 28, 28) and fmnist.x_test.dtype == torch.uint8
    assert fmnist.y_train.shape == (12000,) and fmnist.y_train.dtype == torch.int64
    assert fmnist.y_test.dtype == torch.int64
    assert (fmnist.num_classes, fmnist.in_channels, fmnist.image_size) == (10, 1, 28)
    x = fmnist.train_images(torch.arange(12000))
    assert x.dtype == torch.float32 and x.shape == (12000, 1, 28, 28)
    assert abs(x.mean().item()) < 0.05
    assert abs(x.std().item() - 1.0) < 0.05
    pixels = fmnist.test_images(torch.arange(2000)) * 0.3530 + 0.2860  # back to [0, 1]
    assert pixels.min() > -1e-4 and pixels.max() < 1 + 1e-4
    assert torch.allclose(pixels * 255, fmnist.x_test.float(), atol=1e-3)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_normalize_is_the_float32_formula_bit_for_bit(layout):
    """Every pixel value in every channel, in either layout: ``float32((x / 255 - mean) /
    std)``, one float32 operation at a time, as the float32 tensors held before."""
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16).repeat(3, axis=1)
    x = torch.from_numpy(pixels.repeat(2, axis=0)).contiguous(memory_format=layout)
    d = DatasetSplit("cifar10", x, torch.zeros(2, dtype=torch.int64), x,
                     torch.zeros(2, dtype=torch.int64), 10, 3, 16, mean=mean, std=std)
    out = d.normalize(x)
    m = np.array(mean, np.float32).reshape(1, 3, 1, 1)
    s = np.array(std, np.float32).reshape(1, 3, 1, 1)
    expected = (x.numpy().astype(np.float32) / np.float32(255) - m) / s
    assert out.dtype == torch.float32 and np.array_equal(out.numpy(), expected)
    assert out.is_contiguous(memory_format=layout)
    assert torch.equal(d.train_images(torch.tensor([1, 0])), out[[1, 0]])
    with pytest.raises(TypeError, match="uint8"):
        d.normalize(out)


def test_batches_normalise_one_batch_at_a_time(fmnist):
    x, y = fmnist.test_subset(np.array([5, 1, 9, 3, 7]))
    assert x.dtype == torch.uint8 and torch.equal(y, fmnist.y_test[[5, 1, 9, 3, 7]])
    got = list(fmnist.batches(x, y, 2))
    assert [len(b) for b, _ in got] == [2, 2, 1]
    assert torch.equal(torch.cat([b for b, _ in got]),
                       fmnist.test_images(torch.tensor([5, 1, 9, 3, 7])))
    assert torch.equal(torch.cat([t for _, t in got]), y)


def test_fraction_is_class_balanced_and_seeded():
    a = load_dataset("fashion_mnist", fraction=0.05, seed=3)
    b = load_dataset("fashion_mnist", fraction=0.05, seed=3)
    c = load_dataset("fashion_mnist", fraction=0.05, seed=4)
    assert np.array_equal(np.bincount(a.y_train.numpy()), np.full(10, 60))
    assert np.array_equal(np.bincount(a.y_test.numpy()), np.full(10, 10))
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)


def test_test_fraction_shrinks_the_test_split_alone(fmnist):
    a = load_dataset("fashion_mnist", fraction=0.05, seed=3)
    whole = load_dataset("fashion_mnist", fraction=0.05, seed=3, test_fraction=1.0)
    same = load_dataset("fashion_mnist", fraction=0.05, seed=3, test_fraction=0.05)
    # the training subset is drawn first: a test fraction leaves it as it was
    assert torch.equal(whole.x_train, a.x_train) and torch.equal(whole.y_train, a.y_train)
    assert torch.equal(whole.y_test, fmnist.y_test) and torch.equal(whole.x_test, fmnist.x_test)
    assert torch.equal(same.y_test, a.y_test) and torch.equal(same.x_test, a.x_test)
    half = load_dataset("fashion_mnist", fraction=1.0, test_fraction=0.5)
    assert torch.equal(half.y_train, fmnist.y_train)
    assert len(half.y_test) == len(fmnist.y_test) // 2
    with pytest.raises(ConfigError, match="dataset.test_fraction"):
        load_dataset("fashion_mnist", test_fraction=0.0)
    synthetic = load_dataset("synthetic", fraction=0.01, test_fraction=1.0)
    assert len(synthetic.y_test) == 10_000


def test_fraction_tiny_keeps_one_per_class():
    d = load_dataset("fashion_mnist", fraction=1e-6)
    assert np.array_equal(np.bincount(d.y_train.numpy()), np.ones(10))
    assert np.array_equal(np.bincount(d.y_test.numpy()), np.ones(10))


def test_fraction_one_is_unchanged(fmnist):
    d = load_dataset("fashion_mnist", fraction=1.0, seed=99)
    assert torch.equal(d.x_train, fmnist.x_train) and torch.equal(d.y_train, fmnist.y_train)


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, float("nan")])
def test_bad_fraction(fraction):
    with pytest.raises(ConfigError, match="dataset.fraction"):
        load_dataset("fashion_mnist", fraction=fraction)


def test_unknown_dataset_lists_names():
    with pytest.raises(ConfigError) as err:
        load_dataset("mnist")
    for name in DATASETS:
        assert name in str(err.value)


def test_fashion_mnist_full_missing(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("fashion_mnist_full", data_root=tmp_path)
    msg = str(err.value)
    assert str(tmp_path) in msg and "train-images-idx3-ubyte" in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "data_root" in msg


def _write_idx(path: Path, arr: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


def test_fashion_mnist_full_reads_idx_gz_and_plain(tmp_path):
    rng = np.random.default_rng(0)
    x_tr = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    y_tr = np.arange(20, dtype=np.uint8) % 10
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", x_tr, gz=True)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", y_tr, gz=False)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", x_tr[:10], gz=False)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", y_tr[:10], gz=True)
    d = load_dataset("fashion_mnist_full", data_root=str(tmp_path))
    assert d.x_train.shape == (20, 1, 28, 28) and d.x_test.shape == (10, 1, 28, 28)
    assert torch.equal(d.y_train, torch.from_numpy(y_tr.astype(np.int64)))
    assert np.array_equal(d.x_train[:, 0].numpy(), x_tr)


def test_fashion_mnist_full_corrupt_file(tmp_path):
    for name in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        (tmp_path / f"{name}-ubyte.gz").write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(DatasetNotFoundError, match="corrupt"):
        load_dataset("fashion_mnist_full", data_root=tmp_path)


def _idx_folder(root: Path, **changes: np.ndarray) -> Path:
    """The four IDX files of a 20/10-image Fashion-MNIST, with ``changes`` (by key)."""
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
              "y_train": np.arange(20, dtype=np.uint8) % 10,
              "x_test": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
              "y_test": np.arange(10, dtype=np.uint8)}
    arrays.update(changes)
    stems = {"x_train": "train-images-idx3", "y_train": "train-labels-idx1",
             "x_test": "t10k-images-idx3", "y_test": "t10k-labels-idx1"}
    for key, stem in stems.items():
        _write_idx(root / f"{stem}-ubyte.gz", arrays[key], gz=True)
    return root


def test_out_of_range_label_is_refused_at_load_time(tmp_path):
    labels = np.arange(20, dtype=np.uint8) % 10
    labels[[7, 12]] = 200
    _idx_folder(tmp_path, y_train=labels)
    with pytest.raises(DatasetError) as err:
        load_dataset("fashion_mnist_full", data_root=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "train-labels-idx1-ubyte.gz") in msg
    assert "label 200 at index 7 is outside [0, 10) (2 such labels)" in msg


@pytest.mark.parametrize(("changes", "expected"), [
    ({"x_test": np.zeros((10, 28, 27), np.uint8)}, r"t10k-images-idx3-ubyte.gz: test images "
                                                   r"must have shape \(28, 28\) each, got \(28, 27\)"),
    ({"y_test": np.zeros(9, np.uint8)}, r"test images .* and labels .* differ in count \(10 vs 9\)"),
    ({"y_train": np.zeros((20, 2), np.uint8)}, r"train-labels-idx1-ubyte.gz: train labels must be "
                                               r"a 1-D array of integers"),
    ({"x_train": np.zeros((0, 28, 28), np.uint8), "y_train": np.zeros(0, np.uint8)},
     r"train-images-idx3-ubyte.gz: the train split holds no images"),
])
def test_every_inconsistency_names_the_file(tmp_path, changes, expected):
    _idx_folder(tmp_path, **changes)
    with pytest.raises(DatasetError, match=expected):
        load_dataset("fashion_mnist_full", data_root=tmp_path)


def test_bad_data_file_is_one_line_and_exit_2(tmp_path, tiny):
    import yaml
    from typer.testing import CliRunner

    from sflsim.cli.main import app

    labels = np.arange(20, dtype=np.uint8) % 10
    labels[3] = 200
    (tmp_path / "data").mkdir()
    _idx_folder(tmp_path / "data", y_train=labels)
    tiny["dataset"] = {"name": "fashion_mnist_full", "data_root": str(tmp_path / "data")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "label 200 at index 3 is outside [0, 10)" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "o").exists()


@pytest.mark.skipif(not HAVE_DEBIAN_FMNIST, reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_full_debian():
    d = load_dataset("fashion_mnist_full", fraction=0.01)
    assert d.x_train.shape == (600, 1, 28, 28) and d.x_test.shape == (100, 1, 28, 28)


@pytest.mark.parametrize(("name", "folder"),
                         [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")])
def test_cifar_missing(tmp_path, name, folder):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, data_root=tmp_path)
    msg = str(err.value)
    assert folder in msg and str(tmp_path) in msg and "cs.toronto.edu/~kriz/cifar.html" in msg
    assert "does not exist" in msg


def test_cifar_corrupt_folder(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(DatasetNotFoundError, match="incomplete or corrupt"):
        load_dataset("cifar10", data_root=tmp_path)


def test_cifar10_conversion(tmp_path, monkeypatch):
    """Fake CIFAR-10 pickles (torchvision's md5 checks patched out) load as NCHW."""
    tv_cifar = pytest.importorskip("torchvision.datasets.cifar")
    monkeypatch.setattr(tv_cifar.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for fname in names:
        batch = {"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
                 "labels": [0, 1, 2, 9]}
        (folder / fname).write_bytes(pickle.dumps(batch))
    meta = {"label_names": [f"c{i}" for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    d = load_dataset("cifar10", data_root=tmp_path)
    assert d.x_train.shape == (20, 3, 32, 32) and d.x_test.shape == (4, 3, 32, 32)
    assert (d.num_classes, d.in_channels, d.image_size) == (10, 3, 32)
    raw = pickle.loads((folder / "test_batch").read_bytes())["data"].reshape(4, 3, 32, 32)
    assert d.x_test.dtype == torch.uint8 and np.array_equal(d.x_test.numpy(), raw)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    back = ((d.test_images(torch.arange(4)) * std + mean) * 255).round().numpy().astype(np.uint8)
    assert np.array_equal(back, raw)
    assert d.y_test.tolist() == [0, 1, 2, 9]
    # a label past the classes is refused, naming the file and the index within it
    batch = pickle.loads((folder / "test_batch").read_bytes())
    batch["labels"] = [0, 1, 10, 9]
    (folder / "test_batch").write_bytes(pickle.dumps(batch))
    with pytest.raises(DatasetError, match=r"cifar-10-batches-py/test_batch: test label 10 at "
                                           r"index 2 is outside \[0, 10\)"):
        load_dataset("cifar10", data_root=tmp_path)
    batch["labels"] = [0, 1, 2, 9]
    (folder / "test_batch").write_bytes(pickle.dumps(batch))
    # the training split joins five files: the file and the index within it are named
    third = pickle.loads((folder / "data_batch_3").read_bytes())
    third["labels"] = [0, 1, 2, -1]
    (folder / "data_batch_3").write_bytes(pickle.dumps(third))
    with pytest.raises(DatasetError, match=r"cifar-10-batches-py/data_batch_3: train label -1 "
                                           r"at index 3 \(index 11 of the train split\)"):
        load_dataset("cifar10", data_root=tmp_path)


# ---------------------------------------------------------------- partition


def _check_invariants(parts, n, num_clients, min_samples=0):
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0) and p.size >= min_samples
    allidx = np.concatenate(parts)
    assert allidx.size == n and np.array_equal(np.sort(allidx), np.arange(n))


LABELS = np.repeat(np.arange(10), 120)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
@pytest.mark.parametrize("num_clients", [1, 7, 30])
def test_partition_invariants(scheme, num_clients):
    parts = partition(LABELS, num_clients, scheme=scheme, alpha=0.3,
                      rng=np.random.default_rng(1))
    _check_invariants(parts, LABELS.size, num_clients, min_samples=1)


def test_iid_sizes_even():
    sizes = [p.size for p in partition(LABELS, 7, rng=np.random.default_rng(0))]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_partition_seeded(scheme):
    def run(seed):
        return partition(LABELS, 10, scheme=scheme, alpha=0.5, rng=np.random.default_rng(seed))

    a, b, c = run(5), run(5), run(6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_dirichlet_skew_grows_as_alpha_falls():
    def skew(alpha):
        return np.mean([
            label_skew(LABELS, partition(LABELS, 20, scheme="dirichlet", alpha=alpha,
                                         rng=np.random.default_rng(s)), 10)
            for s in range(5)
        ])

    s01, s1, s100 = skew(0.1), skew(1.0), skew(100.0)
    assert s01 > s1 > s100
    iid = label_skew(LABELS, partition(LABELS, 20, rng=np.random.default_rng(0)), 10)
    assert iid < 0.25 and s100 < 0.25 and s01 > 0.5


def test_min_samples_rule():
    for seed in range(5):
        parts = partition(LABELS, 50, scheme="dirichlet", alpha=0.01, min_samples=20,
                          rng=np.random.default_rng(seed))
        _check_invariants(parts, LABELS.size, 50, min_samples=20)


def test_min_samples_zero_allows_empty_clients():
    parts = partition(LABELS, 50, scheme="dirichlet", alpha=0.01, min_samples=0,
                      rng=np.random.default_rng(0))
    _check_invariants(parts, LABELS.size, 50)
    assert min(p.size for p in parts) == 0


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_alpha(alpha):
    with pytest.raises(ConfigError, match=r"dataset\.partition\.alpha.*must be > 0"):
        partition(LABELS, 5, scheme="dirichlet", alpha=alpha, rng=np.random.default_rng(0))


def test_too_many_clients():
    with pytest.raises(ConfigError, match=r"more clients \(11\) than samples \(10\)"):
        partition(np.arange(10) % 2, 11, rng=np.random.default_rng(0))
    with pytest.raises(ConfigError, match="10 clients with at least 2 samples"):
        partition(np.arange(10) % 2, 10, min_samples=2, rng=np.random.default_rng(0))


def test_unknown_scheme_and_duplicate_registration():
    with pytest.raises(ConfigError, match="iid, dirichlet"):
        partition(LABELS, 5, scheme="shards", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="already registered"):
        register_partitioner("iid")(lambda *a, **k: [])
    assert set(PARTITIONERS) >= {"iid", "dirichlet"}


def test_label_skew_extremes():
    labels = np.repeat(np.arange(4), 5)
    one_class_each = [np.flatnonzero(labels == c) for c in range(4)]
    assert label_skew(labels, one_class_each, 4) == pytest.approx(0.75)
    assert label_skew(labels, [np.arange(20)], 4) == pytest.approx(0.0)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labels=st.lists(st.integers(0, 4), min_size=1, max_size=60),
    num_clients=st.integers(1, 12),
    scheme=st.sampled_from(["iid", "dirichlet"]),
    alpha=st.floats(0.001, 50.0),
    min_samples=st.integers(0, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_partition_property(labels, num_clients, scheme, alpha, min_samples, seed):
    labels = np.array(labels)
    rng = np.random.default_rng(seed)
    if num_clients * min_samples > labels.size:
        with pytest.raises(ConfigError):
            partition(labels, num_clients, scheme=scheme, alpha=alpha,
                      min_samples=min_samples, rng=rng)
        return
    parts = partition(labels, num_clients, scheme=scheme, alpha=alpha,
                      min_samples=min_samples, rng=rng)
    _check_invariants(parts, labels.size, num_clients, min_samples=min_samples)
    assert 0.0 <= label_skew(labels, parts, 5) <= 1.0
