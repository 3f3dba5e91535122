"""``--tensorboard DIR`` (sflsim run, sflsim sweep): round scalars read back with
TensorBoard's own reader equal ``rounds.csv``; a resumed run's folder holds each round once;
without the package, one message that says how to install it."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.cli.tensorboard import TAGS, TensorBoardProgress, require_tensorboard
from sflsim.errors import SflsimError


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows them (purged steps hidden)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _assert_equals_rounds_csv(log_dir: Path, run_dir: Path) -> None:
    rounds = pd.read_csv(run_dir / "rounds.csv")
    rounds = rounds[rounds["round"] >= 1]
    shown = _scalars(log_dir)
    for column, tag in TAGS.items():
        kept = rounds[rounds[column].notna()]  # NaN (not evaluated) is not written
        expected = [(int(r), np.float32(v)) for r, v in zip(kept["round"], kept[column])]
        assert shown.get(tag, []) == expected, tag


def _scenario_file(tiny: dict, path: Path, **training) -> Path:
    data = copy.deepcopy(tiny)
    data["training"].update(training)
    data["evaluation"].update({"every_rounds": 2, "max_test_samples": 8})
    path.write_text(yaml.safe_dump(data))
    return path


def test_run_writes_each_round_and_equals_rounds_csv(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=2)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out"), "-q",
                                      "--tensorboard", str(tmp_path / "tb")])
    assert result.exit_code == 0, result.output
    assert f"TensorBoard scalars in {tmp_path / 'tb'}/" in result.output
    shown = _scalars(tmp_path / "tb")
    assert set(shown) == set(TAGS.values())
    assert [s for s, _ in shown["time/sim_s"]] == [1, 2]
    assert [s for s, _ in shown["accuracy/server"]] == [2]  # round 1 is not evaluated
    _assert_equals_rounds_csv(tmp_path / "tb", tmp_path / "out")


def test_a_resumed_run_shows_each_round_once(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    from sflsim.config.scenario import Scenario
    from sflsim.runner import run_scenario
    from tests.test_resilience import StopAfter

    data = copy.deepcopy(tiny)
    data["training"]["rounds"] = 3
    scenario = Scenario.model_validate(data)
    with pytest.raises(KeyboardInterrupt), TensorBoardProgress(tmp_path / "tb",
                                                               StopAfter(2)) as cut:
        run_scenario(scenario, tmp_path / "out", progress=cut)
    # the interrupted part wrote round 1 (round 2 stopped before its scalars)
    assert [s for s, _ in _scalars(tmp_path / "tb")["time/sim_s"]] == [1]
    with TensorBoardProgress(tmp_path / "tb") as progress:
        run_scenario(scenario, tmp_path / "out", progress=progress, resume=True)
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2
    assert [s for s, _ in _scalars(tmp_path / "tb")["time/sim_s"]] == [1, 2, 3]
    _assert_equals_rounds_csv(tmp_path / "tb", tmp_path / "out")


def test_sweep_writes_one_folder_per_point(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    base = _scenario_file(tiny, tmp_path / "base.yaml", rounds=1)
    (tmp_path / "sw.yaml").write_text(f"name: sw\nbase: {base}\naxes: {{seed: [0, 1]}}\n")
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sw.yaml"), "-o",
                                      str(tmp_path / "out"), "--tensorboard", str(tmp_path / "tb")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["p000", "p001"]
    for point in ("p000", "p001"):
        _assert_equals_rounds_csv(tmp_path / "tb" / point, tmp_path / "out" / "points" / point)
    assert _scalars(tmp_path / "tb" / "p000") != _scalars(tmp_path / "tb" / "p001")


def test_without_the_package_one_message_says_how_to_install_it(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` fails
    with pytest.raises(SflsimError, match=r'--tensorboard needs the tensorboard package, which '
                                          r'is not installed: run pip install -e "\.\[tensorboard\]"'):
        require_tensorboard()
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=1)
    (tmp_path / "sw.yaml").write_text(f"name: sw\nbase: {path}\naxes: {{seed: [0, 1]}}\n")
    for command in (["run", str(path), "-o", str(tmp_path / "out")],
                    ["sweep", str(tmp_path / "sw.yaml"), "-o", str(tmp_path / "out")]):
        result = CliRunner().invoke(app, [*command, "--tensorboard", str(tmp_path / "tb")])
        assert result.exit_code == USER_ERROR, result.output
        assert "Traceback" not in result.output and "pip install tensorboard" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "tb").exists()


@pytest.mark.parametrize("command", ["run", "sweep", "sweep --dry-run"])
def test_an_unusable_folder_is_refused_before_anything_runs(tiny, tmp_path, command):
    """A --tensorboard folder that cannot be made is told as -o's is, naming the option,
    before a round (or a sweep point) runs: nothing is written."""
    pytest.importorskip("tensorboard")
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=1)
    (tmp_path / "sw.yaml").write_text(f"name: sw\nbase: {path}\naxes: {{seed: [0, 1]}}\n")
    blocker = tmp_path / "afile"
    blocker.write_text("a file")
    name, *extra = command.split()
    file = path if name == "run" else tmp_path / "sw.yaml"
    for tb, expected in ((blocker, f"--tensorboard {blocker} is a file, not a folder"),
                         (blocker / "x", f"--tensorboard {blocker / 'x'} cannot be made: "
                                         f"{blocker} is a file"),
                         ("", "--tensorboard '': an empty path")):
        result = CliRunner().invoke(app, [name, str(file), *extra, "-o", str(tmp_path / "out"),
                                          "--tensorboard", str(tb)])
        assert result.exit_code == USER_ERROR, result.output
        assert expected in result.output and result.output.count("error:") == 1, result.output
        assert "Traceback" not in result.output
        assert not (tmp_path / "out").exists()
    assert blocker.read_text() == "a file"
