"""``--log mlflow``: a run's scenario, rounds, summary and result files as an MLflow run.

Optional: it needs MLflow's tracking client (``pip install -e ".[mlflow]"`` in sflsim's
folder, or ``pip install mlflow-skinny``), which nothing else in sflsim imports. The
runner knows nothing of it: :class:`MlflowProgress` is a :class:`sflsim.runner.Progress`
that hands every call on to the progress display and logs each round as it ends; a
sweep logs each point when it ends (:class:`MlflowSweepLog`).

What one MLflow run holds (one per ``sflsim run``, one per sweep point):

- parameters: the resolved scenario (``scenario.yaml``) as dotted keys
  (``training.optimizer.lr``), values as strings; a list is one parameter (its JSON),
  a value over MLflow's limit is cut and ends in ``...``;
- metrics at ``step`` = round (0, the untrained model, to ``training.rounds``): the
  numeric columns of ``rounds.csv`` under their column names, NaN left out;
- metrics ``summary.<key>``: the numbers of ``summary.json`` (no step);
- artifacts: the result files (``rounds.csv``, ``summary.json``, ``manifest.json``,
  ``scenario.yaml``, the clients and events tables, ``early_exit.csv``, ``profiles/``);
  not ``checkpoint.pkl``.

The store: ``--mlflow-uri``, else ``MLFLOW_TRACKING_URI``, else ``./mlruns`` (a file
store, which MLflow 3 only opens with ``MLFLOW_ALLOW_FILE_STORE=true``: sflsim sets it
for a file store unless it is set already). The experiment is the scenario's name (a
sweep's name for its points); the run is named after the results folder (a sweep's
point id).

Resume: the run's id is kept in the results folder (:data:`RUN_FILE`); ``--resume`` (and
a sweep run again) logs into the same MLflow run when the store still has it, and a
(metric, round) pair already there is not logged again, so each round shows once. A
parameter keeps its first value (a resumed run that adds rounds: ``scenario.yaml``'s
artifact has the new ``training.rounds``). Ctrl-C: what was logged stays; the run ends
with status ``KILLED``.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any

from sflsim.errors import SflsimError

INSTALL = 'pip install -e ".[mlflow]"'
#: the MLflow run of a results folder: ``{"tracking_uri": ..., "run_id": ...}``
RUN_FILE = "mlflow.json"
#: result files logged as artifacts (when present); not the checkpoint
ARTIFACTS = ("scenario.yaml", "rounds.csv", "clients.parquet", "events.parquet", "clients.csv",
             "events.csv", "early_exit.csv", "summary.json", "manifest.json", "profiles")
#: MLflow's limits (``mlflow.utils.validation``): a parameter's value and a key
MAX_PARAM_CHARS, MAX_KEY_CHARS, PARAMS_PER_BATCH, METRICS_PER_BATCH = 6000, 250, 100, 1000
#: ``summary.json``'s status -> the MLflow run's status
STATUS = {"completed": "FINISHED", "interrupted": "KILLED"}


class LogTarget(str, Enum):
    """``--log``: the experiment trackers a run or sweep can log to."""

    mlflow = "mlflow"


def check_log_options(log: LogTarget | None, mlflow_uri: str | None) -> None:
    """Refuse ``--mlflow-uri`` without ``--log mlflow``, and ``--log mlflow`` without MLflow.

    Raises:
        SflsimError: saying which.
    """
    if mlflow_uri is not None and log is not LogTarget.mlflow:
        raise SflsimError(f"--mlflow-uri {mlflow_uri}: the MLflow store of --log mlflow; "
                          f"add --log mlflow or leave it out")
    if log is LogTarget.mlflow:
        require_mlflow()


def require_mlflow(option: str = "--log mlflow") -> None:
    """Refuse ``option`` when MLflow's tracking client is missing (before torch loads).

    Raises:
        SflsimError: naming the option and how to install the package.
    """
    try:
        import mlflow.tracking  # noqa: F401
    except ImportError:
        raise SflsimError(f"{option} needs the mlflow package, which is not installed: run "
                          f"{INSTALL} in sflsim's folder (or pip install mlflow-skinny), or "
                          f"leave out {option}") from None


def tracking_uri(uri: str | None = None) -> str:
    """The store: ``uri`` (``--mlflow-uri``), else ``MLFLOW_TRACKING_URI``, else
    ``./mlruns`` as a ``file://`` URI (absolute: the run's folder may change later)."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` on ``uri``; a file store is allowed (MLflow 3 refuses one unless
    ``MLFLOW_ALLOW_FILE_STORE`` says so; set here unless already set)."""
    require_mlflow()
    from mlflow.tracking import MlflowClient

    if "://" not in uri or uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def _key(name: str) -> str:
    """``name`` as an MLflow key: characters it refuses become ``_``, at most its length."""
    return re.sub(r"[^\w\-. /]", "_", name)[:MAX_KEY_CHARS]


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """A nested mapping as ``{dotted key: string}``: a list is one value (its JSON), None
    is ``"null"``, a value longer than MLflow allows is cut and ends in ``...``."""
    if isinstance(data, dict) and data:
        out: dict[str, str] = {}
        for name, value in data.items():
            out.update(flatten(value, f"{prefix}.{name}" if prefix else str(name)))
        return out
    text = data if isinstance(data, str) else json.dumps(data)
    if len(text) > MAX_PARAM_CHARS:
        text = text[:MAX_PARAM_CHARS - 3] + "..."
    return {_key(prefix): text}


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a finite-or-infinite number (not NaN, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def round_metrics(row: dict) -> dict[str, float]:
    """The numeric columns of a ``rounds.csv`` row (``round`` itself, text and NaN left out)."""
    return {_key(column): number for column, value in row.items()
            if column not in ("round", "from_checkpoint")
            and (number := _number(value)) is not None}


def summary_metrics(summary: dict, prefix: str = "summary") -> dict[str, float]:
    """The numbers of ``summary.json`` as ``summary.<key>`` (nested ones dotted)."""
    out: dict[str, float] = {}
    for name, value in summary.items():
        if isinstance(value, dict):
            out.update(summary_metrics(value, f"{prefix}.{name}"))
        elif (number := _number(value)) is not None:
            out[_key(f"{prefix}.{name}")] = number
    return out


class MlflowRun:
    """The MLflow run of one results folder: opened (or reopened) once, logged into
    round by round, then given the folder's summary and files (:meth:`sync`).

    Args:
        client: an ``MlflowClient`` (:func:`open_client`).
        out: the results folder.
        experiment: the experiment's name (made if missing).
        run_name: the run's name in the MLflow UI.
        reuse: log into the run named in ``out``'s :data:`RUN_FILE` if the store has it
            (a resumed run); else a new run, named in that file from now on.
    """

    def __init__(self, client: Any, out: Path, experiment: str, run_name: str,
                 reuse: bool) -> None:
        self.client, self.out = client, Path(out)
        self.run_id = recorded_run(client, self.out) if reuse else None
        self.logged: set[tuple[str, int]] = set()  # (metric, step) pairs in the run
        self.params: set[str] = set()
        if self.run_id is not None:
            run = client.get_run(self.run_id)
            self.params = set(run.data.params)
            for key in run.data.metrics:
                self.logged |= {(key, m.step) for m in client.get_metric_history(self.run_id, key)}
            client.update_run(self.run_id, status="RUNNING")
        else:
            found = client.get_experiment_by_name(experiment)
            experiment_id = (found.experiment_id if found is not None
                             else client.create_experiment(experiment))
            self.run_id = client.create_run(
                experiment_id, run_name=run_name,
                tags={"sflsim.results": str(self.out.resolve())}).info.run_id
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / RUN_FILE).write_text(json.dumps(
                {"tracking_uri": client.tracking_uri, "run_id": self.run_id}) + "\n")

    def log_params(self, scenario: dict) -> None:
        """The scenario's parameters not in the run yet (a parameter keeps its first value)."""
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in flatten(scenario).items() if k not in self.params]
        for start in range(0, len(params), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + PARAMS_PER_BATCH])
        self.params |= {p.key for p in params}

    def log_rounds(self, rows: Iterable[dict]) -> None:
        """The metrics of ``rounds.csv`` rows at step = round, each (metric, round) once."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = []
        for row in rows:
            step = int(row["round"])
            metrics += [Metric(key, value, now, step) for key, value in round_metrics(row).items()
                        if (key, step) not in self.logged]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + METRICS_PER_BATCH])
        self.logged |= {(m.key, m.step) for m in metrics}

    def sync(self, status: str | None = None) -> None:
        """Log what the folder holds now: the scenario, every ``rounds.csv`` row not logged
        yet (round 0 included), the summary's numbers and the result files; then end the
        run with ``status``, else the one ``summary.json`` says (``running``: left open)."""
        from mlflow.entities import Metric

        self.log_params(read_yaml(self.out / "scenario.yaml"))
        self.log_rounds(read_rows(self.out))
        summary = read_json(self.out / "summary.json")
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in summary_metrics(summary).items()]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + METRICS_PER_BATCH])
        for name in ARTIFACTS:
            path = self.out / name
            if path.is_dir():
                self.client.log_artifacts(self.run_id, str(path), artifact_path=name)
            elif path.is_file():
                self.client.log_artifact(self.run_id, str(path))
        status = status or STATUS.get(summary.get("status"),
                                      None if summary.get("status") == "running" else "FAILED")
        if status is not None:
            self.client.set_terminated(self.run_id, status=status)


def read_yaml(path: Path) -> dict:
    """The mapping in the YAML file ``path``; empty if missing."""
    import yaml

    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def read_rows(out: Path) -> list[dict]:
    """The rows of ``out``'s ``rounds.csv``; none if missing."""
    import pandas as pd

    path = Path(out) / "rounds.csv"
    return pd.read_csv(path).to_dict("records") if path.is_file() else []


def read_json(path: Path) -> dict:
    """The JSON object in ``path``; empty if missing or not readable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_run(client: Any, out: Path) -> str | None:
    """The run named in ``out``'s :data:`RUN_FILE`, if it is in ``client``'s store and not
    deleted; else None."""
    from mlflow.exceptions import MlflowException

    record = read_json(Path(out) / RUN_FILE)
    if record.get("tracking_uri") != client.tracking_uri or not record.get("run_id"):
        return None
    try:
        run = client.get_run(record["run_id"])
    except MlflowException:
        return None
    return run.info.run_id if run.info.lifecycle_stage == "active" else None


class MlflowProgress:
    """A :class:`sflsim.runner.Progress` that logs each round to an MLflow run and hands
    every call on to ``display`` (the bar, plain lines or TensorBoard; None with
    ``--quiet``); the run's optional calls (``plan``, ``work_done``...) go to ``display``
    as it has them.

    The MLflow run opens with the block (a context manager around ``display``'s); each
    round is logged as it ends. Leaving the block logs the folder's summary and files and
    ends the run (Ctrl-C: ``KILLED``).

    Args:
        out: the results folder.
        uri: the tracking store (:func:`tracking_uri`).
        experiment: the experiment's name (the scenario's).
        resume: log into the run the folder names, if any (``--resume``).
        display: the progress display, or None.
    """

    def __init__(self, out: Path, uri: str, experiment: str, resume: bool = False,
                 display: Any = None) -> None:
        self.out, self.uri, self.experiment, self.resume = Path(out), uri, experiment, resume
        self.display = display
        self.run: MlflowRun | None = None
        self.caught_up = False  # the first round logged: what came before it, too

    def __getattr__(self, name: str) -> Any:  # the optional calls: as display has them
        if name.startswith("_") or name == "display" or self.display is None:
            raise AttributeError(name)
        return getattr(self.display, name)

    def __enter__(self) -> MlflowProgress:
        self.run = MlflowRun(open_client(self.uri), self.out, self.experiment, self.out.name,
                             reuse=self.resume)
        if (enter := getattr(self.display, "__enter__", None)) is not None:
            enter()
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        try:
            if (leave := getattr(self.display, "__exit__", None)) is not None:
                leave(kind, *exc)
        finally:
            if self.run is not None:
                interrupted = kind is not None and issubclass(kind, KeyboardInterrupt)
                self.run.sync("KILLED" if interrupted else "FAILED" if kind is not None
                              else None)

    def stop(self) -> None:
        """Stop drawing and mark the run ``KILLED`` (the run is being ended from another
        thread, which may still be logging)."""
        if (stop := getattr(self.display, "stop", None)) is not None:
            stop()
        if self.run is not None:
            self.run.client.set_terminated(self.run.run_id, status="KILLED")

    def start(self, total_batches: int, rounds: int) -> None:
        if (start := getattr(self.display, "start", None)) is not None:
            start(total_batches, rounds)

    def advance(self) -> None:
        if (advance := getattr(self.display, "advance", None)) is not None:
            advance()

    def round_done(self, row: dict) -> None:
        if (done := getattr(self.display, "round_done", None)) is not None:
            done(row)
        if self.run is not None:
            if not self.caught_up:  # the scenario and the rows before (round 0), in order
                self.caught_up = True
                self.run.log_params(read_yaml(self.out / "scenario.yaml"))
                self.run.log_rounds(r for r in read_rows(self.out) if r["round"] < row["round"])
            self.run.log_rounds([row])


class MlflowSweepLog:
    """A sweep's points as MLflow runs, one per point, in an experiment named after the
    sweep; each point is logged from its folder when it ends (:meth:`point_done`).

    Args:
        uri: the tracking store (:func:`tracking_uri`).
        experiment: the sweep's name.
    """

    def __init__(self, uri: str, experiment: str) -> None:
        self.client, self.experiment = open_client(uri), experiment

    def point_done(self, point_dir: Path, point_id: str) -> None:
        """Log the point in ``point_dir`` (into its earlier MLflow run if it has one)."""
        MlflowRun(self.client, point_dir, self.experiment, point_id, reuse=True).sync()

    def logged(self, point_dir: Path) -> bool:
        """Whether the point's MLflow run is in the store and ended ``FINISHED``."""
        run_id = recorded_run(self.client, point_dir)
        return run_id is not None and self.client.get_run(run_id).info.status == "FINISHED"
