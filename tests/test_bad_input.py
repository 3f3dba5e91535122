"""Bad input ends in ONE message naming the field, the value and what is valid; no traceback.

The table mutates the quickstart scenario and checks the :class:`ConfigError` message
of :func:`sflsim.config.validate_scenario`; the CLI tests check what a user sees.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.algorithms import ALGORITHMS as REGISTERED
from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import load_scenario, validate_scenario
from sflsim.errors import ConfigError

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
BASE: dict[str, Any] = yaml.safe_load(QUICKSTART.read_text())
DEVICES = ("jetson_agx_orin, jetson_nano, jetson_orin_nano, jetson_xavier_nx, laptop_cpu, "
           "phone_flagship, phone_midrange, rpi3bplus, rpi4, rpi5")
ALGORITHMS = "hetero_splitee_sequential, hetero_splitee_averaging, distributed, centralized"

Mutation = Callable[[dict[str, Any]], None]


def put(path: str, value: Any) -> Mutation:
    """A mutation that sets ``a.b.c`` to ``value``."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data.setdefault(key, {})
        data[last] = value

    return mutate


def rename(path: str, new: str) -> Mutation:
    """A mutation that renames the key at ``a.b.c`` to ``new`` (a typo)."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        data[new] = data.pop(last)

    return mutate


def drop(path: str) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        del data[last]

    return mutate


UPLINK = "devices.pi4_wifi.link_override.uplink_bps"

CASES: list[tuple[str, Mutation, list[str]]] = [
    ("unknown top-level key", put("bogus", 1),
     ["bogus", "unknown field", "valid fields", "devices", "training"]),
    ("misspelled nested key", rename("training.rounds", "roundz"),
     ["training.roundz", "unknown field", "did you mean 'rounds'"]),
    ("misspelled key in a device group", rename("devices.pi4_wifi.end_layer", "endlayer"),
     ["devices.pi4_wifi.endlayer", "did you mean 'end_layer'"]),
    ("misspelled optimizer key", put("training.optimizer.learning_rate", 0.1),
     ["training.optimizer.learning_rate", "unknown field", "lr"]),
    ("unknown key in the algorithm", put("algorithm.server_lr_divisr", 12),
     ["algorithm.server_lr_divisr", "did you mean 'server_lr_divisor'"]),
    ("misspelled device profile", put("devices.pi4_wifi.profile", "rpi44"),
     ["devices.pi4_wifi.profile", "'rpi44'", "Did you mean 'rpi4'", DEVICES]),
    ("unknown device profile", put("devices.pi4_wifi.profile", "toaster"),
     ["devices.pi4_wifi.profile", "'toaster'", DEVICES]),
    ("unknown link", put("devices.nano_lte.link", "6g"),
     ["devices.nano_lte.link", "'6g'", "5g, ethernet, lte, nbiot, wifi, wifi6"]),
    ("unknown server", put("server.profile", "v100"),
     ["server.profile", "'v100'", "a100, cpu_server, h100"]),
    ("negative bandwidth", put(UPLINK, "-5 Mbps"),
     [f"{UPLINK}: '-5 Mbps' is out of range; valid: at least 1 bit/s"]),
    ("zero bandwidth", put(UPLINK, 0), [f"{UPLINK}: 0 is out of range; valid: at least 1 bit/s"]),
    ("zero bandwidth with unit", put(UPLINK, "0 Mbps"),
     [f"{UPLINK}: '0 Mbps' is out of range; valid: at least 1 bit/s"]),
    ("nan bandwidth", put(UPLINK, "nan"), [f"{UPLINK}: nan is out of range; valid: a finite number, at least 1"]),
    ("infinite bandwidth", put(UPLINK, float("inf")),
     [f"{UPLINK}: inf is out of range; valid: a finite number, at least 1"]),
    ("bandwidth true", put(UPLINK, True), [UPLINK, "got true"]),
    ("negative deadline", put("conditions", {"round_deadline_s": -1}),
     ["conditions.round_deadline_s: -1 is out of range; valid: greater than 0 s and at most "
      "1,000,000,000 s"]),
    ("nan fraction", put("dataset.fraction", "nan"),
     ["dataset.fraction: nan is out of range; valid: a finite number, greater than 0 and at "
      "most 1"]),
    ("nan learning rate", put("training.optimizer.lr", float("nan")),
     ["training.optimizer.lr: nan is out of range; valid: a finite number, greater than 0"]),
    ("bandwidth with a bad unit", put(UPLINK, "5 Mbs"), [UPLINK, "'Mbs'", "Mbps", "Gbps"]),
    ("bandwidth without a number", put(UPLINK, "fast"), [UPLINK, "'fast'", "20 Mbps"]),
    ("negative latency", put("devices.pi4_wifi.link_override.latency_s", "-3 ms"),
     ["devices.pi4_wifi.link_override.latency_s: '-3 ms' is out of range; valid: at least 0 s"]),
    ("end layer 6 of a 6-stage model", put("devices.orin_wifi.end_layer", 6),
     ["devices.orin_wifi.end_layer", "6", "1 to 5"]),
    ("end layer 9", put("devices.orin_wifi.end_layer", 9),
     ["devices.orin_wifi.end_layer", "9", "1 to 5"]),
    ("end layer 0", put("devices.orin_wifi.end_layer", 0),
     ["devices.orin_wifi.end_layer", "0", "at least 1"]),
    ("Dirichlet alpha 0", put("dataset.partition", {"scheme": "dirichlet", "alpha": 0}),
     ["dataset.partition.alpha", "0", "greater than 0"]),
    ("Dirichlet alpha -1", put("dataset.partition", {"scheme": "dirichlet", "alpha": -1}),
     ["dataset.partition.alpha", "-1", "greater than 0"]),
    ("misspelled partition scheme", put("dataset.partition.scheme", "dirichlett"),
     ["dataset.partition.scheme", "'dirichlett'", "did you mean 'dirichlet'", "iid, dirichlet"]),
    ("rounds not a number", put("training.rounds", "many"),
     ["training.rounds", "'many'", "whole number", "1 to 100000"]),
    ("rounds a fraction", put("training.rounds", 2.5), ["training.rounds", "2.5", "whole number"]),
    ("rounds true", put("training.rounds", True), ["training.rounds", "true", "whole number"]),
    ("lr not a number", put("training.optimizer.lr", "fast"),
     ["training.optimizer.lr", "'fast'", "number", "greater than 0 and at most 10"]),
    ("name not text", put("name", [1, 2]), ["name", "[1, 2]", "text"]),
    ("unknown algorithm", put("algorithm.name", "fedsgd"),
     ["algorithm.name", "'fedsgd'", ALGORITHMS]),
    ("misspelled algorithm", put("algorithm.name", "hetero_splitee_sequentail"),
     ["algorithm.name", "did you mean 'hetero_splitee_sequential'", ALGORITHMS]),
    ("algorithm without a name", put("algorithm", {}), ["algorithm.name", "missing", ALGORITHMS]),
    ("algorithm as a string", put("algorithm", "distributed"),
     ["algorithm", "'distributed'", "mapping", ALGORITHMS]),
    ("unknown dataset", put("dataset.name", "mnist"),
     ["dataset.name", "'mnist'", "fashion_mnist, fashion_mnist_full, cifar10, cifar100"]),
    ("unknown wire dtype", put("wire_dtype", "fp8"), ["wire_dtype", "'fp8'", "fp32, fp16, bf16"]),
    ("empty devices", put("devices", {}), ["devices", "at least one device group"]),
    ("devices as a list", put("devices", ["rpi4"]),
     ["devices", "(got [rpi4])", "mapping", "profile, count, end_layer, link"]),
    ("device group as a string", put("devices.pi4_wifi", "rpi4"),
     ["devices.pi4_wifi", "'rpi4'", "profile, count, end_layer, link"]),
    ("device group named by a number", lambda d: d["devices"].update({7: d["devices"]["pi4_wifi"]}),
     ["devices.7", "names must be text", "'7'"]),
    ("negative devices in a group", put("devices.pi4_wifi.count", -1),
     ["devices.pi4_wifi.count", "-1", "0 to 100000"]),
    ("no clients at all", lambda d: [g.update(count=0) for g in d["devices"].values()],
     ["devices", "every group has count 0", "at least one client"]),
    ("missing training", drop("training"), ["training", "required field is missing"]),
    ("missing end layer", drop("devices.pi4_wifi.end_layer"),
     ["devices.pi4_wifi.end_layer", "required field is missing"]),
    ("fraction 0", put("dataset.fraction", 0),
     ["dataset.fraction", "0", "greater than 0 and at most 1"]),
    ("fraction 1.5", put("dataset.fraction", 1.5),
     ["dataset.fraction", "1.5", "greater than 0 and at most 1"]),
    ("zero width", put("model.width", 0), ["model.width", "0", "greater than 0 and at most 4"]),
    ("momentum 1", put("training.optimizer.momentum", 1),
     ["training.optimizer.momentum", "1", "at least 0 and less than 1"]),
    ("server lr divisor 0", put("algorithm.server_lr_divisor", 0),
     ["algorithm.server_lr_divisor", "0", "greater than 0"]),
    # the valid names for any value, as YAML writes it (null, not Python's None)
    ("device null", put("training.device", None),
     ["training.device", "got null", "valid: cpu, cuda or cuda:N"]),
    ("device a number", put("training.device", 3),
     ["training.device", "got 3", "valid: cpu, cuda or cuda:N", "cuda:3"]),
    ("device a misspelled name", put("training.device", "gpu"),
     ["training.device", "'gpu'", "valid: cpu, cuda or cuda:N"]),
]


@pytest.mark.parametrize(("mutate", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_scenario_gives_one_clear_message(mutate: Mutation, expected: list[str]) -> None:
    data = copy.deepcopy(BASE)
    mutate(data)
    with pytest.raises(ConfigError) as info:
        validate_scenario(data, where="quickstart.yaml")
    msg = str(info.value)
    assert msg.startswith("quickstart.yaml: ")
    for part in expected:
        assert part in msg, f"{part!r} not in message:\n{msg}"
    assert "\n" not in msg, f"one mistake should give one line:\n{msg}"
    for pydantic_wording in ("Input should", "Input tag", "Field required", "Value error",
                             "errors.pydantic.dev", "function-after", "[key]"):
        assert pydantic_wording not in msg


@pytest.mark.parametrize("value", ["null", "3"])
def test_a_device_that_is_not_text_is_told_with_the_valid_names(value: str) -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", f"training.device={value}")
    assert_user_error(code, out, f"--set training.device={value}: training.device:",
                      "valid: cpu, cuda or cuda:N", f"got {value}")
    assert "None" not in out and "expected text" not in out


def test_quickstart_itself_is_valid() -> None:
    validate_scenario(copy.deepcopy(BASE))


def test_several_mistakes_are_listed_in_one_message() -> None:
    data = copy.deepcopy(BASE)
    put("training.rounds", "many")(data)
    put("dataset.fraction", 2)(data)
    with pytest.raises(ConfigError) as info:
        validate_scenario(data, where="s.yaml")
    msg = str(info.value)
    assert msg.startswith("s.yaml: 2 problems:")
    assert "training.rounds" in msg and "dataset.fraction" in msg


# ------------------------------------------------------------------------------- CLI

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    """Run ``sflsim ARGS``; return the exit code and stdout + stderr."""
    result = runner.invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim {' '.join(args)} raised {result.exception!r}")
    out = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, out


def assert_user_error(code: int, out: str, *expected: str) -> None:
    assert code == USER_ERROR, out
    assert "Traceback" not in out, out
    assert out.count("error:") == 1, out
    for part in expected:
        assert part in out, f"{part!r} not in output:\n{out}"


def write(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def test_validate_ok() -> None:
    code, out = cli("validate", str(QUICKSTART))
    assert code == 0, out
    assert "ok" in out and "12" in out


def test_validate_file_with_a_typo(tmp_path: Path) -> None:
    path = write(tmp_path, QUICKSTART.read_text().replace("rounds: 4", "roundz: 4"))
    code, out = cli("validate", path)
    assert_user_error(code, out, "training.roundz", "did you mean 'rounds'")
    assert "required" not in out  # the misspelling explains the missing field


def test_validate_file_with_a_misspelled_device(tmp_path: Path) -> None:
    path = write(tmp_path, QUICKSTART.read_text().replace("profile: rpi4,", "profile: rpi44,"))
    code, out = cli("validate", path)
    assert_user_error(code, out, "devices.pi4_wifi.profile", "'rpi44'", DEVICES)


def test_missing_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    code, out = cli("validate", missing)
    assert_user_error(code, out, missing, "does not exist")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    code, out = cli("validate", str(tmp_path))
    assert_user_error(code, out, "is a directory")


def test_empty_file(tmp_path: Path) -> None:
    code, out = cli("validate", write(tmp_path, ""))
    assert_user_error(code, out, "is empty", "mapping")


def test_binary_file(tmp_path: Path) -> None:
    data = b"\xff\xfe\x00" + os.urandom(512)  # \xff is never valid UTF-8
    code, out = cli("validate", write(tmp_path, data))
    assert_user_error(code, out, "not UTF-8 text")


def test_yaml_list_instead_of_mapping(tmp_path: Path) -> None:
    code, out = cli("validate", write(tmp_path, "- name: a\n- name: b\n"))
    assert_user_error(code, out, "is a list", "mapping")


def test_invalid_yaml(tmp_path: Path) -> None:
    code, out = cli("validate", write(tmp_path, "devices: [1, 2\n"))
    assert_user_error(code, out, "not valid YAML", "line 2")


def test_python_object_tag_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = (f"name: !!python/object/apply:os.system ['touch {marker}']\n"
            + QUICKSTART.read_text().replace("name: quickstart\n", ""))
    code, out = cli("validate", write(tmp_path, text))
    assert_user_error(code, out, "!!python/object/apply:os.system", "not allowed", "line 1")
    assert not marker.exists()


def test_set_without_equals() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "training.rounds")
    assert_user_error(code, out, "--set 'training.rounds'", "FIELD=VALUE")


def test_set_with_empty_field_name() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "=3")
    assert_user_error(code, out, "empty field name")


def test_set_of_unknown_field() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "training.roundz=2")
    assert_user_error(code, out, "training.roundz", "did you mean 'rounds'")


def test_set_through_a_value() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "training.rounds.x=2")
    assert_user_error(code, out, "training.rounds is 4, not a mapping")


def test_set_bad_value() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "dataset.partition.alpha=-1",
                    "--set", "dataset.partition.scheme=dirichlet")
    assert_user_error(code, out, "dataset.partition.alpha", "-1", "greater than 0")


def test_set_ok() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "training.rounds=2",
                    "--set", "devices.pi4_wifi.count=1")
    assert code == 0, out
    assert "9 clients" in out and "2 rounds" in out


def test_message_with_markup_characters_is_printed_as_is() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "devices.pi4_wifi.profile=[/]x")
    assert_user_error(code, out, "[/]x")


def test_long_message_is_not_wrapped() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "devices.pi4_wifi.profile=rpi44")
    assert_user_error(code, out, f"Valid: {DEVICES}")


def test_run_more_clients_than_samples(tmp_path: Path) -> None:
    code, out = cli("run", str(QUICKSTART), "-o", str(tmp_path / "out"), "-q",
                    "--set", "dataset.fraction=0.001", "--set", "devices.pi4_wifi.count=200")
    assert_user_error(code, out, "208 clients", "training samples")


def test_run_missing_dataset(tmp_path: Path) -> None:
    code, out = cli("run", str(QUICKSTART), "-o", str(tmp_path / "out"), "-q",
                    "--set", "dataset.name=fashion_mnist_full",
                    "--set", "dataset.data_root=/nonexistent")
    assert_user_error(code, out, "fashion_mnist_full", "/nonexistent/", "dataset.data_root")


def test_a_dataset_that_is_not_there_is_told_as_the_set_that_chose_it(tmp_path: Path) -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "dataset.name=cifar10",
                    "--set", f"dataset.data_root={tmp_path}")
    assert_user_error(code, out, "cifar-10-batches-py", "does not exist")
    assert " ".join(out.split()).startswith("error: --set dataset.name=cifar10: dataset.name: "
                                            "'cifar10': ")


def test_run_bad_scenario_fails_before_running(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, out = cli("run", str(QUICKSTART), "-o", str(out_dir), "--set", "training.rounds=0")
    assert_user_error(code, out, "training.rounds", "1 to 100000")
    assert not out_dir.exists()


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, QUICKSTART.read_text())

    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)  # chmod does not stop root
    code, out = cli("validate", path)
    assert_user_error(code, out, "cannot read scenario file", "Permission denied")


SWEEP = QUICKSTART.parent / "sweeps" / "device_mix.yaml"


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_output_folder_that_cannot_be_made_is_told_before_anything_runs(
        tmp_path: Path, command: str) -> None:
    blocker = Path(write(tmp_path, "not a directory", name="file.txt"))
    file = str(QUICKSTART if command == "run" else SWEEP)
    code, out = cli(command, file, "-o", str(blocker / "out"), "--set", "training.rounds=1")
    assert_user_error(code, out, f"-o {blocker / 'out'} cannot be made: {blocker} is a file")
    assert "running" not in out and "sweep device_mix:" not in out  # nothing announced
    code, out = cli(command, file, "-o", str(blocker), "--set", "training.rounds=1")
    assert_user_error(code, out, f"-o {blocker} is a file, not a folder")
    assert blocker.read_text() == "not a directory"


def test_a_sweep_file_given_to_run_is_named_as_one() -> None:
    for command in ("run", "validate"):
        code, out = cli(command, str(SWEEP))
        assert_user_error(code, out, "is a sweep file (it has 'base' and 'axes')",
                          f"sflsim sweep {SWEEP}")
        assert "required field" not in out
    code, out = cli("run", "device_mix")  # a shipped sweep's name
    assert_user_error(code, out, "It is a shipped sweep: sflsim sweep device_mix")


def test_a_scenario_given_to_sweep_is_named_as_one() -> None:
    code, out = cli("sweep", str(QUICKSTART), "--dry-run")
    assert_user_error(code, out, "is a scenario file", f"sflsim run {QUICKSTART}")
    assert "unknown field" not in out
    code, out = cli("sweep", "quickstart", "--dry-run")
    assert_user_error(code, out, "It is a shipped scenario: sflsim run quickstart")


def test_a_mapping_error_names_the_set_inside_it_and_not_the_mapping() -> None:
    code, out = cli("validate", str(QUICKSTART), "--set", "dataset.name=image_folder")
    assert_user_error(code, out, "(--set dataset.name=image_folder): dataset: "
                                 "dataset.data_root is required by image_folder")
    assert "(got {" not in out


def test_a_sweeps_own_set_is_blamed_on_the_command_line() -> None:
    code, out = cli("sweep", str(SWEEP), "--dry-run", "--set", "training.roundz=1")
    assert_user_error(code, out, "--set training.roundz=1: training.roundz: unknown field",
                      "did you mean 'rounds'")
    assert f"{SWEEP}: set" not in out


@pytest.mark.parametrize(("overrides", "expected"), [
    (["seed=-1"], ["seed", "-1", "0 to"]),
    (["name=../escape"], ["name", "folder name"]),
    (["training.schedule.min_lr=1"], ["min_lr", "must not exceed optimizer.lr"]),
])
def test_more_bad_values(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_scenario(QUICKSTART, overrides)
    for text in expected:
        assert text in str(err.value)


def test_repeated_key_is_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(Path(QUICKSTART).read_text() + "\nseed: 3\n")
    with pytest.raises(ConfigError, match="key 'seed' appears twice"):
        load_scenario(path)


@pytest.mark.parametrize("name", sorted(REGISTERED))
def test_an_end_layer_past_the_model_is_one_message_for_every_algorithm(name: str) -> None:
    """Every algorithm, whole-model ones (which ignore end_layer) included, refuses an end
    layer past the model with one message, not an error from deep in the build."""
    past = [f"devices.{group}.end_layer=99" for group in BASE["devices"]]
    with pytest.raises(ConfigError, match=r"devices\.\w+\.end_layer: 99 is past the end"):
        load_scenario(QUICKSTART, [f"algorithm={{name: {name}}}", *past])


@pytest.mark.parametrize(("args", "expected"), [
    (["--executor", "ray", "--cpus-per-point", "-1"], "--cpus-per-point -1: must be a number > 0"),
    (["--executor", "ray", "--gpus-per-point", "nan"], "--gpus-per-point nan: must be a number >= 0"),
    (["--gpus-per-point", "0.5"], "need --executor ray"),
])
def test_ray_resources_are_checked_in_a_dry_run_too(args: list[str], expected: str) -> None:
    code, out = cli("sweep", str(SWEEP), "--dry-run", *args)
    assert_user_error(code, out, expected)


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_set_that_opens_a_mapping_but_is_not_yaml_says_so(command: str) -> None:
    args = [str(QUICKSTART)] if command == "validate" else [str(SWEEP), "--dry-run"]
    code, out = cli(command, *args, "--set", "algorithm={name: multisfl")
    assert_user_error(code, out, "--set 'algorithm={name: multisfl': the value is not valid YAML",
                      "column 16", "close every '{' and '['")
    assert "expected a mapping" not in out


def test_a_set_value_yaml_cannot_read_stays_text() -> None:
    scenario = load_scenario(QUICKSTART, ["description=a: b: c"])
    assert scenario.description == "a: b: c"


def test_a_figure_inside_a_file_is_told_before_reading_runs(tmp_path: Path) -> None:
    blocker = Path(write(tmp_path, "not a directory", name="file.txt"))
    code, out = cli("plot", "tta", str(tmp_path / "no-run"), "-o", str(blocker / "tta"))
    assert_user_error(code, out, f"-o {blocker / 'tta'}: the folder {blocker} is a file")


def test_a_key_glued_to_its_value_is_told_in_a_file_and_in_a_set(tmp_path: Path) -> None:
    """YAML reads {name:fedavg} as a key 'name:fedavg' with no value: the schema would say
    that algorithm.name is missing; the message says where the space is missing."""
    said = ("algorithm.name: {name:fedavg} reads as the key 'name:fedavg' with no value; YAML "
            "needs a space after the colon: {name: fedavg}")
    text = QUICKSTART.read_text().replace(
        "algorithm:\n  name: hetero_splitee_sequential", "algorithm: {name:fedavg}\n  #")
    assert "{name:fedavg}" in text
    code, out = cli("validate", write(tmp_path, text))
    assert_user_error(code, out, said)
    code, out = cli("validate", str(QUICKSTART), "--set", "algorithm={name:fedavg}")
    assert_user_error(code, out, f"--set algorithm={{name:fedavg}}: {said}")
    # a value with colons is not a glued key, and is printed as written (no emoji)
    code, out = cli("validate", str(QUICKSTART), "--set", "name=a:b:c")
    assert_user_error(code, out, "(got 'a:b:c')")
