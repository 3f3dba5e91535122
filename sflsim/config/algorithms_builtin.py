"""The built-in algorithms' configurations: registered in one order (the order error
messages and ``sflsim validate --algorithms`` list them in), attributed to
:mod:`sflsim.config.schema`, and which of them has each capability.

Importing this module registers them; :mod:`sflsim.config.schema` and
:mod:`sflsim.config.scenario` import it, so that a scenario always knows them.
"""

from __future__ import annotations

from sflsim.config.algorithms import (
    BUILTIN_MODULE,
    IMPORTING,
    algorithms_with,
    register_algorithm_config,
)
from sflsim.config.algorithms_federated import (
    FedASConfig,
    FedAvgConfig,
    FedBABUConfig,
    FedGHConfig,
    FedMutConfig,
    FedProxConfig,
)
from sflsim.config.algorithms_fedsga import FedSGAConfig
from sflsim.config.algorithms_hetero_splitee import (
    AveragingConfig,
    CentralizedConfig,
    DistributedConfig,
    SequentialConfig,
)
from sflsim.config.algorithms_split_learning import (
    MergeSFLConfig,
    MultiSFLConfig,
    MUSplitFedConfig,
    SplitFedConfig,
)

#: The built-in algorithms' configurations, registered in this order (which error
#: messages and ``sflsim validate --algorithms`` list them in).
BUILTIN_ALGORITHM_CONFIGS = (
    SequentialConfig, AveragingConfig, DistributedConfig, CentralizedConfig, SplitFedConfig,
    FedAvgConfig, FedSGAConfig, MultiSFLConfig, FedGHConfig, FedASConfig, MergeSFLConfig,
    MUSplitFedConfig, FedProxConfig, FedBABUConfig, FedMutConfig)
# attributed to sflsim.config.schema (BUILTIN_MODULE), the module users import them from,
# by which is_builtin() knows them for sflsim's own
IMPORTING.append(BUILTIN_MODULE)
try:
    for _config in BUILTIN_ALGORITHM_CONFIGS:
        register_algorithm_config(_config)
finally:
    IMPORTING.pop()
del _config


#: The built-in algorithms with each capability (:data:`~sflsim.config.algorithms.CAPABILITIES`,
#: declared by their configuration classes), in the order of :data:`BUILTIN_ALGORITHM_CONFIGS`; the checks
#: ask :func:`~sflsim.config.algorithms.algorithms_with`, which adds the registered user
#: algorithms.
#:
#: ``timing_only``: the simulated timeline does not depend on what training computes, so
#: ``training.timing_only`` gives the same events as a trained run (tests compare the
#: traces). Two need a setting for it, checked by
#: :func:`sflsim.config.load.check_timing_only`: MultiSFL's adaptive replay (the replay
#: fraction follows the gradient norms) and FedSGA's sufficiency-guided split (the cuts
#: follow trained values; a trained run's recorded cuts, ``split_schedule``, replace it).
TIMING_ONLY_ALGORITHMS = algorithms_with("timing_only")
#: ``fuse_clients``: the clients' steps (client-side model and exit head on the local
#: loss) can be fused across clients (``training.fuse_clients``).
FUSED_CLIENT_ALGORITHMS = algorithms_with("fuse_clients")
#: ``whole_model``: FedAvg and the algorithms built on it
#: (sflsim.algorithms.fedavg.FedAvg): the whole model trains on the device, so a device
#: group's end layer may be the model's end.
WHOLE_MODEL_ALGORITHMS = algorithms_with("whole_model")
#: ``parallel_clients``: the clients' training steps within a round depend only on the
#: client's own model, optimizer and batches (never on the server or simulated time), so
#: they can be trained ahead of the simulated round (``training.parallel_clients``).
PARALLEL_CLIENT_ALGORITHMS = algorithms_with("parallel_clients")
#: ``parallel_processes``: the clients' local training is FedAvg's whole-model step, which
#: worker processes or Ray actors can repeat (``training.parallel_backend: processes`` or
#: ``ray``).
PARALLEL_PROCESS_ALGORITHMS = algorithms_with("parallel_processes")
#: ``cuda``: every model is built from the backbone, so ``training.device`` moves them
#: all (FedSGA places its prompts, harmonizer, estimator and prototypes there).
CUDA_ALGORITHMS = algorithms_with("cuda")
