"""The scenario schema: frozen pydantic models, unknown keys refused, units parsed to SI.

A scenario names the dataset and partition, the model and width, the device mix
(groups of devices by profile name, each with its end layer and link), the
server, the algorithm and its hyperparameters, evaluation and the seed::

    seed: 0
    dataset: {name: fashion_mnist, fraction: 1.0, partition: {scheme: iid}}
    model: {name: hetero_splitee_resnet, width: 0.25}
    devices:
      pi4: {profile: rpi4, count: 4, end_layer: 3, link: wifi}
    server: {profile: a100}
    algorithm: {name: hetero_splitee_sequential}
    training: {rounds: 5, local_epochs: 1, batch_size: 32,
               optimizer: {name: adam, lr: 1.0e-3}, schedule: {name: cosine}}

The models live by section (:mod:`sflsim.config.dataset`, :mod:`sflsim.config.model`,
:mod:`sflsim.config.deployment`, :mod:`sflsim.config.training`,
:mod:`sflsim.config.evaluation`, :mod:`sflsim.config.scenario`) and by algorithm family
(``sflsim.config.algorithms_*``, registered by :mod:`sflsim.config.algorithms_builtin`);
this module gathers them, and is where they are imported from.
"""

from sflsim.config.algorithms_builtin import (
    CUDA_ALGORITHMS,
    FUSED_CLIENT_ALGORITHMS,
    TIMING_ONLY_ALGORITHMS,
    WHOLE_MODEL_ALGORITHMS,
)
from sflsim.config.dataset import DOMAINNET_DOMAINS, AugmentConfig, DatasetConfig, SyntheticConfig
from sflsim.config.deployment import DeviceGroup, LinkOverride
from sflsim.config.evaluation import EarlyExitConfig
from sflsim.config.model import ModelConfig
from sflsim.config.scenario import WIRE_BYTES
from sflsim.config.training import OptimizerConfig, TrainingConfig

__all__ = [ "CUDA_ALGORITHMS", "DOMAINNET_DOMAINS", "FUSED_CLIENT_ALGORITHMS", "TIMING_ONLY_ALGORITHMS",
    "WHOLE_MODEL_ALGORITHMS", "WIRE_BYTES", "AugmentConfig", "DatasetConfig", "DeviceGroup",
    "EarlyExitConfig",
    "LinkOverride", "ModelConfig", "OptimizerConfig", "SyntheticConfig", "TrainingConfig",
]
