"""Algorithms of one's own: ``algorithm.module``, the ``sflsim.algorithms`` entry points,
the shipped example (``examples/fedavgm.py``), the listing and every refusal."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from sflsim.algorithms import base
from sflsim.cli.main import app
from sflsim.config import algorithms as registry
from sflsim.config import load_scenario, user_algorithms, validate_scenario
from sflsim.config.algorithms import AlgorithmConfig, register_algorithm_config
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "fedavgm.yaml"

#: a user's module: a FedAvg variant named NAME with one field; CAPS its capabilities
METHOD = '''
from typing import ClassVar, Literal

from pydantic import Field

from sflsim.algorithms import AlgorithmConfig, register_algorithm, register_algorithm_config
from sflsim.algorithms.fedavg import FedAvg


@register_algorithm_config
class {cls}(AlgorithmConfig):
    name: Literal["{name}"]
    strength: float = Field(0.5, ge=0, le=1)
    capabilities: ClassVar[frozenset[str]] = frozenset({caps})


@register_algorithm("{algorithm}")
class Method(FedAvg):
    pass
'''


def method(name: str, *, algorithm: str | None = None, caps: str = "", cls: str = "Config") -> str:
    return METHOD.format(name=name, algorithm=algorithm or name, caps=caps or "()", cls=cls)


@pytest.fixture(autouse=True)
def registries(tmp_path: Path):
    """Leave the registries and ``sys.modules`` as they were: what a test's modules
    register (and the modules themselves) is forgotten afterwards."""
    saved = (dict(registry.ALGORITHM_CONFIGS), dict(registry.CONFIG_MODULES),
             dict(base.ALGORITHMS), dict(user_algorithms._ENTRY_POINT_MODULES),
             dict(user_algorithms._LOADED))
    yield
    for target, before in zip((registry.ALGORITHM_CONFIGS, registry.CONFIG_MODULES, base.ALGORITHMS,
                               user_algorithms._ENTRY_POINT_MODULES, user_algorithms._LOADED), saved):
        target.clear()
        target.update(before)
    registry._adapter.cache_clear()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file.startswith((str(tmp_path), str(EXAMPLES))):
            del sys.modules[name]


def scenario(algorithm: dict, **training: object) -> dict:
    """A two-client FedAvg-sized scenario with ``algorithm``."""
    return {"dataset": {"name": "fashion_mnist", "fraction": 0.02},
            "model": {"name": "small_cnn", "width": 0.25},
            "devices": {"pi": {"profile": "rpi4", "count": 2, "end_layer": 1, "link": "wifi"}},
            "algorithm": algorithm,
            "training": {"rounds": 1, "batch_size": 32, **training},
            "evaluation": {"early_exit": {"enabled": False}}}


def refusal(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_scenario(data, where="s.yaml")
    return str(info.value)


# ----------------------------------------------------------------- the shipped example


def test_the_example_runs_from_a_clean_folder(tmp_path, monkeypatch):
    """``PYTHONPATH=examples sflsim run examples/fedavgm.yaml -o out`` from another folder:
    it trains above chance (10 classes) and times the server's momentum update."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))  # what PYTHONPATH=examples does
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "-o", "out", "-q", "--threads", "1"])
    assert result.exit_code == 0, result.output
    rounds = pd.read_csv(tmp_path / "out" / "rounds.csv")
    assert list(rounds["round"]) == [0, 1, 2]
    assert rounds["server_accuracy"].iloc[-1] > 0.25  # chance: 0.1
    events = pd.read_parquet(tmp_path / "out" / "events.parquet")
    update = events[events["activity"] == "server_update"]
    assert list(update["round"]) == [1, 2] and (update["actor"] == "server").all()
    assert (update["flops"] > 0).all()


def test_server_momentum_takes_effect_from_the_second_round(monkeypatch):
    """FedAvgM with momentum 0 is FedAvg; with momentum 0.9 its first round is FedAvg's
    (v = delta) and the second moves the model elsewhere (v = beta delta_1 + delta_2)."""
    from sflsim.runner import run_scenario

    monkeypatch.syspath_prepend(str(EXAMPLES))

    def run(*overrides: str):
        result = run_scenario(load_scenario(EXAMPLE, list(overrides)))
        return result.rounds, torch.cat([p.flatten() for p in
                                         result.algorithm.global_model.parameters()])

    fedavg_rounds, fedavg = run("algorithm.name=fedavg")
    _, plain = run("algorithm.server_momentum=0")
    momentum_rounds, momentum = run("algorithm.server_momentum=0.9")
    assert torch.allclose(plain, fedavg, atol=1e-6)
    assert abs(momentum_rounds.server_accuracy[1] - fedavg_rounds.server_accuracy[1]) <= 0.01
    assert (momentum - fedavg).abs().max() > 1e-3


def test_an_algorithm_runs_as_its_capabilities_say_not_as_its_methods_look(monkeypatch):
    """FedAvgM inherits every FedAvg method but declares no ``array_booking``: its
    timing-only rounds run client by client, in a SimPy process each, and give the events
    FedAvg's array booking gives (its server update aside)."""
    from sflsim.runner import run_scenario

    monkeypatch.syspath_prepend(str(EXAMPLES))
    runs = {}
    for name in ("fedavg", "fedavgm"):
        result = run_scenario(load_scenario(EXAMPLE, [f"algorithm.name={name}",
                                                      "training.timing_only=true"]))
        assert result.algorithm.books_rounds() is (name == "fedavg")
        events = pd.DataFrame(result.events)
        runs[name] = events[events["activity"] != "server_update"].reset_index(drop=True)
    clients = ["actor", "activity", "client_id", "round", "payload_bytes", "flops"]
    first = runs["fedavg"]["round"] == 1  # round 2 starts later after FedAvgM's update
    assert runs["fedavgm"].loc[first, clients].equals(runs["fedavg"].loc[first, clients])
    assert np.allclose(runs["fedavgm"].loc[first, ["start_s", "end_s"]],
                       runs["fedavg"].loc[first, ["start_s", "end_s"]], rtol=0, atol=1e-9)


def test_the_example_module_is_short():
    assert len((EXAMPLES / "fedavgm.py").read_text().splitlines()) < 100


def test_a_user_configuration_dumps_and_reloads_with_its_fields(monkeypatch):
    """What a results folder and a checkpoint store: the user's fields too."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded = load_scenario(EXAMPLE, ["algorithm.server_lr=0.5"])
    dumped = loaded.model_dump(mode="json")
    assert dumped["algorithm"] == {"name": "fedavgm", "module": "fedavgm",
                                   "server_momentum": 0.9, "server_lr": 0.5}
    assert Scenario.model_validate(dumped) == loaded


def test_set_algorithm_name_switches_to_and_from_a_user_algorithm(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    baseline = load_scenario(EXAMPLE, ["algorithm.name=fedavg"]).algorithm
    # a built-in needs no user module: the baseline's scenario.yaml runs without it
    assert (baseline.name, baseline.module) == ("fedavg", None)
    switched = load_scenario("scenarios/bench_fedavg_cnn.yaml",
                             ["algorithm.module=fedavgm", "algorithm.name=fedavgm"]).algorithm
    assert (switched.name, switched.server_momentum) == ("fedavgm", 0.9)


# ----------------------------------------------------------------- entry points


def fake_distribution(folder: Path, entry_points: str) -> None:
    """A distribution ``fake 0`` installed in ``folder`` with these entry points."""
    info = folder / "fake-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[sflsim.algorithms]\n{entry_points}")


def test_an_entry_point_is_loaded_when_its_name_is_asked_for(tmp_path, monkeypatch):
    (tmp_path / "ep_algos.py").write_text(method("ep_method"))
    fake_distribution(tmp_path, "ep_method = ep_algos\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "ep_method" not in registry.ALGORITHM_CONFIGS  # nothing loaded before it is named
    loaded = validate_scenario(scenario({"name": "ep_method", "strength": 0.25}))
    assert (loaded.algorithm.name, loaded.algorithm.strength) == ("ep_method", 0.25)
    assert user_algorithms.source_of("ep_method") == "entry point ep_method = ep_algos of fake 0"


def test_an_entry_point_that_fails_is_told_by_the_name_asked_for(tmp_path, monkeypatch):
    fake_distribution(tmp_path, "ep_gone = no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = refusal(scenario({"name": "ep_gone"}))
    assert message.startswith("s.yaml: algorithm.name: 'ep_gone' comes from the entry point "
                              "ep_gone = no_such_module_here of fake 0, which fails: no module "
                              "named 'no_such_module_here'"), message


def test_validate_lists_every_algorithm_with_where_it_comes_from(tmp_path, monkeypatch):
    (tmp_path / "ep_algos.py").write_text(method("ep_listed", caps='{"timing_only"}'))
    fake_distribution(tmp_path, "ep_listed = ep_algos\nep_broken = no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    result = CliRunner().invoke(app, ["validate", str(EXAMPLE), "--algorithms"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines()
             if line.startswith("│")}
    assert "built in" in lines["fedavg"] and "whole_model" in lines["fedavg"]
    assert "module fedavgm" in lines["fedavgm"] and "fedavgm.py" in lines["fedavgm"]
    assert "entry point ep_listed = ep_algos of fake 0" in lines["ep_listed"]
    assert "timing_only" in lines["ep_listed"]
    assert "fails to load" in lines["ep_broken"]
    assert len(lines) == len(registry.ALGORITHM_CONFIGS) + 1  # every one, and the broken one
    assert "ok " in result.output and "fedavgm (module fedavgm" in result.output


def test_validate_without_a_file_needs_algorithms():
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 2 and "--algorithms" in result.output
    listed = CliRunner().invoke(app, ["validate", "--algorithms"])
    assert listed.exit_code == 0 and "hetero_splitee_sequential" in listed.output


# ----------------------------------------------------------------- refusals


#: (module name, its text or None for no file, the algorithm mapping, message fragments)
BAD_SOURCES = [
    ("absent", None, {"name": "x", "module": "no_such_method_module"},
     ["s.yaml: algorithm.module: no module named 'no_such_method_module'", "PYTHONPATH"]),
    ("a file path", None, {"name": "x", "module": "examples/fedavgm.py"},
     ["algorithm.module: 'examples/fedavgm.py' is not a Python module name",
      "write module: fedavgm"]),
    ("registers nothing", "X = 1\n", {"name": "x", "module": "empty_mod"},
     ["algorithm.module: 'empty_mod'", "registers no algorithm configuration",
      "@register_algorithm_config"]),
    ("a missing dependency", "import no_such_dependency_here\n", {"name": "x", "module": "dep_mod"},
     ["algorithm.module: importing 'dep_mod' failed: it imports 'no_such_dependency_here'"]),
    ("an exception", "\n\nraise RuntimeError('boom')\n", {"name": "x", "module": "boom_mod"},
     ["algorithm.module: importing 'boom_mod' raised RuntimeError: boom", "boom_mod.py:3"]),
    ("a syntax error", "X = 1\ndef broken(:\n", {"name": "x", "module": "syntax_mod"},
     # the location once, as file:line (a SyntaxError's own text carries it too)
     ["algorithm.module: importing 'syntax_mod' raised SyntaxError: invalid syntax (",
      "syntax_mod.py:2)"]),
    ("a built-in configuration name", method("fedavg"), {"name": "fedavg", "module": "clash_mod"},
     ["algorithm.module: 'clash_mod' registers algorithm configuration 'fedavg'",
      "already taken (built in)"]),
    ("a built-in algorithm name", method("clash_two", algorithm="fedprox"),
     {"name": "clash_two", "module": "clash_two_mod"},
     ["algorithm.module: 'clash_two_mod' registers algorithm 'fedprox'", "(built in)"]),
    ("a configuration without algorithm", method("lonely").split("@register_algorithm(")[0],
     {"name": "lonely", "module": "lonely_mod"},
     ["algorithm.name: 'lonely' has a configuration", "but no algorithm",
      "@register_algorithm('lonely')"]),
    ("an algorithm without configuration",
     "from sflsim.algorithms import register_algorithm\n"
     "from sflsim.algorithms.fedavg import FedAvg\n"
     "register_algorithm('orphan')(type('Orphan', (FedAvg,), {}))\n",
     {"name": "orphan", "module": "orphan_mod"},
     ["algorithm.module: 'orphan_mod'", "registers algorithm 'orphan' but no configuration"]),
    ("an algorithm made by type()",
     method("typed").replace('@register_algorithm("typed")\nclass Method(FedAvg):\n    pass\n',
                             'Method = register_algorithm("typed")(type("Method", (FedAvg,), {}))\n'),
     {"name": "typed", "module": "typed_mod"},
     ["algorithm.module: 'typed_mod'", "registers algorithm 'typed' as the class 'Method', "
      "which cannot be found as abc.Method", "define it with a class statement at the top "
      "level of 'typed_mod'"]),
    ("an algorithm defined in a function",
     method("local").replace('@register_algorithm("local")\nclass Method(FedAvg):\n    pass\n',
                             'def make():\n    @register_algorithm("local")\n    class Method(FedAvg):\n'
                             '        pass\n\n\nmake()\n'),
     {"name": "local", "module": "local_mod"},
     ["registers algorithm 'local' as the class 'make.<locals>.Method'"]),
    ("not an Algorithm", method("loose").replace("class Method(FedAvg)", "class Method"),
     {"name": "loose", "module": "loose_mod"},
     ["algorithm.module: importing 'loose_mod' raised TypeError: @register_algorithm('loose'): "
      "'Method' is not a subclass of sflsim.algorithms.Algorithm", "loose_mod.py:"]),
    ("no hooks", method("hookless").replace("from sflsim.algorithms.fedavg import FedAvg",
                                            "from sflsim.algorithms import Algorithm as FedAvg"),
     {"name": "hookless", "module": "hookless_mod"},
     ["raised TypeError: @register_algorithm('hookless'): Method does not implement "
      "train_round(round_) or server_model_for(client)"]),
    ("a hook without its argument",
     method("argless").replace("    pass", "    def train_round(self):\n        yield None"),
     {"name": "argless", "module": "argless_mod"},
     ["@register_algorithm('argless'): Method.train_round(self) must take (self, round_): "
      "the runner calls train_round(round_)"]),
    ("an unknown name", method("listed_method"), {"name": "listed_methd", "module": "listed_mod"},
     ["algorithm.name: 'listed_methd' is not valid; did you mean 'listed_method'?",
      "fedavg, fedsga", "fedmut, listed_method)", "found through algorithm.module"]),
    ("a misspelled module key", method("typo_method"), {"name": "typo_method",
                                                         "modul": "typo_mod"},
     ["algorithm.modul: unknown field; did you mean 'module'?",
      "the module that registers 'typo_method' was not imported"]),
    ("a field out of range", method("ranged"), {"name": "ranged", "module": "ranged_mod",
                                                "strength": 2},
     ["s.yaml: algorithm.strength: 2 is out of range; valid: 0 to 1"]),
    ("a misspelled field", method("spelled"), {"name": "spelled", "module": "spelled_mod",
                                               "strenght": 1},
     ["algorithm.strenght: unknown field; did you mean 'strength'?",
      "valid fields: name, module, strength"]),
]


@pytest.mark.parametrize(("module", "text", "algorithm", "fragments"), BAD_SOURCES,
                         ids=[case[0] for case in BAD_SOURCES])
def test_a_bad_user_algorithm_is_one_message(module, text, algorithm, fragments, tmp_path,
                                             monkeypatch):
    if text is not None:
        (tmp_path / f"{algorithm.get('module') or algorithm['modul']}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(registry.ALGORITHM_CONFIGS), set(base.ALGORITHMS)
    message = refusal(scenario(algorithm))
    for fragment in fragments:
        assert fragment in message, message
    assert "Traceback" not in message and "\n" not in message
    assert ", line " not in message, message  # the location once, as file:line
    if "already taken" in message:  # what the failed import registered is forgotten
        assert (set(registry.ALGORITHM_CONFIGS), set(base.ALGORITHMS)) == before


def test_a_bad_user_algorithm_is_a_user_error_in_the_cli(tmp_path, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({"name": "x", "module": "no_such_method_module"})))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "error:" in result.output and "algorithm.module: no module named" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("training", "devices_end", "fragment"), [
    ({"timing_only": True}, 1, "training.timing_only (--no-train): not available for algorithm "
     "'plain', whose configuration Config does not list 'timing_only' in its capabilities"),
    ({"parallel_clients": 2}, 1, "training.parallel_clients: not available for algorithm 'plain'"),
    ({"fuse_clients": True}, 1, "training.fuse_clients: not available for algorithm 'plain'"),
    ({}, 2, "devices.pi.end_layer: 2 is the last stage of small_cnn, which leaves the server "
     "nothing to train; only algorithms that train the whole model on the device (the "
     "'whole_model' capability"),
])
def test_a_user_algorithm_supports_nothing_it_does_not_declare(training, devices_end, fragment,
                                                               tmp_path, monkeypatch):
    (tmp_path / "plain_mod.py").write_text(method("plain"))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = scenario({"name": "plain", "module": "plain_mod"}, **training)
    data["devices"]["pi"]["end_layer"] = devices_end
    assert fragment in refusal(data)
    assert devices_end == 1 or "whole_model" not in registry.ALGORITHM_CONFIGS["plain"].capabilities


def test_declared_capabilities_are_allowed_and_listed(tmp_path, monkeypatch):
    (tmp_path / "able_mod.py").write_text(method("able", caps='{"timing_only", "whole_model"}'))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = scenario({"name": "able", "module": "able_mod"}, timing_only=True)
    data["devices"]["pi"]["end_layer"] = 2  # the whole small CNN on the device
    assert validate_scenario(data).algorithm.supports("timing_only")
    assert "able" in registry.algorithms_with("timing_only")
    with pytest.raises(ConfigError, match=r"training.parallel_clients: .* valid: .*fedmut"):
        validate_scenario({**data, "training": {"rounds": 1, "parallel_clients": 2}})


def test_cuda_is_refused_for_a_user_algorithm_that_does_not_declare_it(tmp_path, monkeypatch):
    from sflsim import runner

    (tmp_path / "cpu_mod.py").write_text(method("cpu_only"))
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = validate_scenario(scenario({"name": "cpu_only", "module": "cpu_mod"},
                                        device="cuda"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"training.device: 'cuda' is not available for "
                                          r"'cpu_only' yet; valid algorithms: .*fedmut$"):
        runner.torch_device(loaded)


@pytest.mark.parametrize(("cls", "error", "fragment"), [
    (type("NotAConfig", (), {}), TypeError, "must be a subclass of"),
    (type("Nameless", (AlgorithmConfig,), {}), TypeError, "needs a field name: Literal"),
])
def test_register_algorithm_config_refuses_what_is_not_a_configuration(cls, error, fragment):
    with pytest.raises(error, match=fragment):
        register_algorithm_config(cls)


def test_register_algorithm_config_refuses_unknown_capabilities_and_taken_names():
    from typing import ClassVar, Literal

    class Typo(AlgorithmConfig):
        name: Literal["typo_method"]
        capabilities: ClassVar[frozenset[str]] = frozenset({"timing-only"})

    class Taken(AlgorithmConfig):
        name: Literal["fedavg"]

    with pytest.raises(ValueError, match=r"'timing-only' unknown; valid: timing_only, "):
        register_algorithm_config(Typo)
    with pytest.raises(ValueError, match=r"algorithm configuration 'fedavg' is already registered"):
        register_algorithm_config(Taken)
    assert "typo_method" not in registry.ALGORITHM_CONFIGS


def test_a_name_that_moved_to_a_part_says_where_it_is(tiny):
    """An algorithm's parts are fields: asking the algorithm for a part's member (as an
    algorithm written against the mixins did) names where it is now."""
    from sflsim.runner import build

    _, algorithm = build(validate_scenario(tiny))
    for name, where in (("run_clients", "self.protocol.run_clients"),
                        ("client_step", "self.steps.client_step"),
                        ("dropped", "self.protocol.conditions.dropped"),
                        ("cuts", "self.cost_model.cut_layers"),
                        ("round_batches", "self.batching.round_batches")):
        with pytest.raises(AttributeError, match=f"no attribute '{name}': it is {where}"):
            getattr(algorithm, name)
    with pytest.raises(AttributeError, match=r"no attribute 'no_such_thing'$"):
        _ = algorithm.no_such_thing
    assert not hasattr(algorithm, "__deepcopy__")
