"""The scenario's ``dataset`` section: which data, how much of it, how it is dealt to the
clients (iid, Dirichlet label skew, DomainNet's domains: FedSGA §4.1.1) and augmented
(Hetero-SplitEE §IV-A1); the made-up ``synthetic`` dataset's size.

No data is read here: :mod:`sflsim.data.datasets` loads what these models describe.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN


class PartitionConfig(_Model):
    """How training samples are dealt to clients."""

    model_config = FROZEN
    #: ``iid``, ``dirichlet`` (label skew), or ``domain`` (DomainNet: client i gets
    #: domain i mod D, then Dirichlet label skew within it; FedSGA §4.1.1)
    scheme: Literal["iid", "dirichlet", "domain"] = "iid"
    #: Dirichlet concentration (Hsu et al. 2019); smaller = more label skew.
    alpha: float = Field(0.5, gt=0)


class AugmentConfig(_Model):
    """Training-time augmentation of every training batch (never of evaluation):
    Hetero-SplitEE §IV-A1 is ``{random_crop_padding: 4, horizontal_flip: true}``
    (zero-pad 4 pixels, random crop of the original size, random left-right flip).
    Drawn per sample from a generator per client (:mod:`sflsim.data.augment`)."""

    model_config = FROZEN
    #: Pixels of zero padding on every side before a random crop of the original size;
    #: 0 = no crop; at most the image side (checked once the data is read) and 512.
    random_crop_padding: int = Field(0, ge=0, le=512)
    #: Flip each training image left-right with probability 1/2.
    horizontal_flip: bool = False

    @property
    def active(self) -> bool:
        """Whether it changes any image."""
        return self.random_crop_padding > 0 or self.horizontal_flip


DOMAINNET_DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")


class SyntheticConfig(_Model):
    """The size of the ``synthetic`` dataset, made up when loaded
    (:func:`sflsim.data.datasets.load_dataset`): labels drawn uniformly over the classes
    from the partition seed, every image all zeros (one image held, however many
    samples). It carries no signal: a run that trains on it stays at chance accuracy.
    It is for timing-only runs (``training.timing_only``, ``--no-train``) of fleets
    larger than any dataset, and for pipeline checks. Defaults: Fashion-MNIST's shape."""

    model_config = FROZEN
    #: Training samples (a run needs at least one per client).
    train_samples: int = Field(60_000, ge=1, le=100_000_000)
    #: Test samples.
    test_samples: int = Field(10_000, ge=1, le=100_000_000)
    #: Classes; labels are uniform over ``0 .. classes - 1``.
    classes: int = Field(10, ge=2, le=100_000)
    #: ``[channels, height, width]`` of every image: channels 1 or 3, square, side 8 to 1024.
    image_shape: list[Annotated[int, Field(ge=1, le=1024)]] = [1, 28, 28]

    @field_validator("image_shape")
    @classmethod
    def _check_image_shape(cls, shape: list[int]) -> list[int]:
        if len(shape) != 3:
            raise ValueError("must be [channels, height, width], three numbers")
        channels, height, width = shape
        if channels not in (1, 3):
            raise ValueError("channels must be 1 (grey) or 3 (RGB)")
        if height != width:
            raise ValueError("images must be square: height == width")
        if not 8 <= height <= 1024:
            raise ValueError("the side must be 8 to 1024 pixels")
        return shape


class DatasetConfig(_Model):
    """Which data, where its files are, how much of it, how it is dealt and augmented
    (:mod:`sflsim.data.datasets` has the table of datasets)."""

    model_config = FROZEN
    #: ``synthetic``: blank images with random labels (no signal: trained runs stay at
    #: chance accuracy), sized by ``synthetic``, for timing-only runs and pipeline checks.
    #: ``image_folder``: the user's own images, ``train/<class>/<image>`` and
    #: ``test/<class>/<image>`` under ``data_root`` (:mod:`sflsim.data.image_folder`).
    name: Literal["fashion_mnist", "fashion_mnist_full", "cifar10", "cifar100", "stl10",
                  "tiny_imagenet", "domainnet", "image_folder", "synthetic"] = "fashion_mnist"
    #: Folder with user-supplied dataset files (not used by the embedded ``fashion_mnist``;
    #: required by ``image_folder``).
    data_root: str | None = None
    #: Class-balanced fraction of the training and test data to use, in (0, 1].
    fraction: float = Field(1.0, gt=0, le=1)
    #: Class-balanced fraction of the test data, in (0, 1]; null = ``fraction``. 1 evaluates
    #: on the whole test split while ``fraction`` shrinks the training data (evaluation is
    #: cheap next to training, and 400 test images leave about ±2.5 points of sampling noise).
    test_fraction: float | None = Field(None, gt=0, le=1)
    partition: PartitionConfig = PartitionConfig()
    #: Augmentation of training batches; none by default.
    augment: AugmentConfig | None = None
    #: Let torchvision download missing files into ``data_root`` (cifar10, cifar100, stl10).
    download: bool = False
    #: DomainNet's domains to use, in this order (domain ids follow it); null = all six.
    domains: list[Literal["clipart", "infograph", "painting", "quickdraw", "real",
                          "sketch"]] | None = None
    #: Side in pixels images are resized to (tiny_imagenet, domainnet: null = 64;
    #: image_folder: null = the images' own side, when all are square and of one size).
    image_size: int | None = Field(None, ge=8, le=1024)
    #: Channels of ``image_folder``'s images: 1 (grey) or 3 (RGB); null = grey when every
    #: image is grey, else RGB. Other datasets have fixed channels.
    channels: Literal[1, 3] | None = None
    #: Where images read from files (tiny_imagenet, domainnet, image_folder) are held: ``memory``
    #: (decoded once, uint8), ``disk`` (decoded a batch at a time), ``auto`` (memory when
    #: the run's memory estimate fits with them there). Never changes results.
    storage: Literal["auto", "memory", "disk"] = "auto"
    #: Size of ``name: synthetic`` (null = Fashion-MNIST's: 60,000 / 10,000 samples, 10
    #: classes, ``[1, 28, 28]``); for that dataset only.
    synthetic: SyntheticConfig | None = None

    #: Classes of each dataset (kept equal to :mod:`sflsim.data.datasets` by a test; no
    #: data is read here); ``synthetic``: its default, which ``synthetic.classes`` sets
    #: (:attr:`num_classes`); ``image_folder``: None, known once its folders are read.
    NUM_CLASSES: ClassVar[dict[str, int | None]] = {
        "fashion_mnist": 10, "fashion_mnist_full": 10, "cifar10": 10, "cifar100": 100,
        "stl10": 10, "tiny_imagenet": 200, "domainnet": 345, "image_folder": None,
        "synthetic": 10}
    #: Datasets ``image_size`` applies to, and its default for them (None: the images' own).
    RESIZABLE: ClassVar[dict[str, int | None]] = {"tiny_imagenet": 64, "domainnet": 64,
                                                  "image_folder": None}
    DOWNLOADABLE: ClassVar[tuple[str, ...]] = ("cifar10", "cifar100", "stl10")

    @property
    def num_classes(self) -> int | None:
        """Classes of this dataset (``synthetic.classes`` for ``synthetic``); None for
        ``image_folder``, whose classes are its folders (the loaded
        :class:`~sflsim.data.split.DatasetSplit` has them)."""
        if self.name == "synthetic" and self.synthetic is not None:
            return self.synthetic.classes
        return self.NUM_CLASSES[self.name]

    @model_validator(mode="after")
    def _check_dataset_options(self) -> DatasetConfig:
        if self.name == "image_folder" and self.data_root is None:
            raise ValueError("dataset.data_root is required by image_folder: the folder that "
                             "holds train/<class>/<image> and test/<class>/<image>")
        if self.channels is not None and self.name != "image_folder":
            raise ValueError(f"dataset.channels applies only to image_folder, not to "
                             f"{self.name}, whose images have fixed channels: remove it")
        if self.image_size is not None and self.name not in self.RESIZABLE:
            raise ValueError(f"dataset.image_size ({self.image_size}) applies only to "
                             f"{', '.join(self.RESIZABLE)} (images read from files), not to "
                             f"{self.name}: remove it")
        if self.domains is not None:
            if self.name != "domainnet":
                raise ValueError(f"dataset.domains applies only to domainnet, not to "
                                 f"{self.name}: remove it")
            if not self.domains or len(set(self.domains)) != len(self.domains):
                raise ValueError(f"dataset.domains: {self.domains} must name distinct domains, "
                                 f"at least one; valid: {', '.join(DOMAINNET_DOMAINS)}")
        if self.download and self.name not in self.DOWNLOADABLE:
            raise ValueError(f"dataset.download: true is available for "
                             f"{', '.join(self.DOWNLOADABLE)} only, not {self.name}; get its "
                             f"files as the README's dataset table says")
        if self.storage == "disk" and self.name not in self.RESIZABLE:
            raise ValueError(f"dataset.storage: disk applies only to datasets read from image "
                             f"files ({', '.join(self.RESIZABLE)}); {self.name} is read into "
                             f"memory: use auto or memory")
        if self.synthetic is not None and self.name != "synthetic":
            raise ValueError(f"dataset.synthetic applies only to name: synthetic, not to "
                             f"{self.name}: remove it")
        if self.partition.scheme == "domain" and self.name != "domainnet":
            raise ValueError(f"dataset.partition.scheme: domain needs a dataset with domains "
                             f"(domainnet), not {self.name}; use iid or dirichlet")
        return self
