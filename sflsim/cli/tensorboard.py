"""``--tensorboard DIR``: each round's numbers as TensorBoard scalars, if asked.

Optional: it needs the ``tensorboard`` package (``pip install -e ".[tensorboard]"`` in
sflsim's folder, or ``pip install tensorboard``), which nothing else in sflsim imports;
the scalars are written with ``torch.utils.tensorboard.SummaryWriter``. The runner knows
nothing of it: :class:`TensorBoardProgress` is a :class:`sflsim.runner.Progress` that
hands every call on to the progress display and writes each round's ``rounds.csv`` row.

Per round ``r`` (1 to ``training.rounds``; round 0, the untrained model, is only in
``rounds.csv``), at global step ``r``, the columns of :data:`TAGS` (accuracies as
fractions, losses in nats, times in simulated seconds, bytes, FLOPs, joules). A NaN
(a round not evaluated, a method without client-side exits, a timing-only run) is not
written. TensorBoard keeps scalars as float32 (7 significant digits); ``rounds.csv``
has the exact numbers.

Resume and reruns: a writer opens its log folder with ``purge_step`` at the first round
it writes, and the runner reports a resumed run's rounds from its checkpoint first
(:class:`sflsim.runner.Progress`), so a resumed run writes every round again, from 1:
TensorBoard then hides what earlier runs wrote into the folder for those rounds
(``SessionLog.START`` at that step), a round redone after the checkpoint included, and
the folder shows what ``rounds.csv`` holds. The earlier event files stay on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sflsim.errors import SflsimError
from sflsim.work import BATCH, WorkPlan

#: ``rounds.csv`` column -> TensorBoard tag (grouped by the part before the slash)
TAGS = {
    "server_accuracy": "accuracy/server",
    "client_accuracy": "accuracy/client",
    "server_loss": "loss/server",
    "client_loss": "loss/client",
    "sim_time_s": "time/sim_s",
    "round_time_s": "time/round_s",
    "bytes_up": "bytes/up",
    "bytes_down": "bytes/down",
    "client_flops": "flops/client",
    "server_flops": "flops/server",
    "client_energy_j": "energy/client_j",
}
INSTALL = 'pip install -e ".[tensorboard]"'


def require_tensorboard(option: str = "--tensorboard") -> None:
    """Refuse ``option`` when the ``tensorboard`` package is missing (before torch loads).

    Raises:
        SflsimError: naming the option and how to install the package.
    """
    try:
        import tensorboard  # noqa: F401  (light: it loads its parts on use)
    except ImportError:
        raise SflsimError(f"{option} needs the tensorboard package, which is not installed: "
                          f"run {INSTALL} in sflsim's folder (or pip install tensorboard), or "
                          f"leave out {option}") from None


def open_writer(log_dir: str | Path, first_step: int) -> Any:
    """A ``SummaryWriter`` on ``log_dir`` (created if missing) that hides what earlier
    writers put there at steps ``>= first_step`` (``purge_step``).

    Raises:
        SflsimError: the ``tensorboard`` package is missing.
    """
    require_tensorboard()
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir), purge_step=first_step)


def write_round(writer: Any, row: dict) -> None:
    """The scalars of one ``rounds.csv`` row at step ``row["round"]`` (NaN left out)."""
    step = int(row["round"])
    for column, tag in TAGS.items():
        value = row.get(column)
        if value is not None and not math.isnan(value):
            writer.add_scalar(tag, float(value), global_step=step)


def write_rounds(log_dir: str | Path, rows: Iterable[dict]) -> int:
    """Write the rows of rounds ``>= 1`` to ``log_dir`` with a writer of their own;
    returns how many (no folder is made for none)."""
    rows = [r for r in rows if int(r["round"]) >= 1]
    if not rows:
        return 0
    writer = open_writer(log_dir, int(rows[0]["round"]))
    try:
        for row in rows:
            write_round(writer, row)
    finally:
        writer.close()
    return len(rows)


def write_run(run_dir: str | Path, log_dir: str | Path) -> int:
    """Write the rounds in ``run_dir``'s ``rounds.csv`` to ``log_dir`` (a sweep's point
    once it ended); returns how many (0: no such file or no round)."""
    import pandas as pd

    path = Path(run_dir) / "rounds.csv"
    if not path.is_file():
        return 0
    return write_rounds(log_dir, pd.read_csv(path).to_dict("records"))


class TensorBoardProgress:
    """A :class:`sflsim.runner.Progress` that writes each round to TensorBoard and hands
    every call on to ``display`` (the bar or plain lines; None with ``--quiet``).

    The writer opens at the first round reported (see the module docstring); each round
    is flushed as it ends, so TensorBoard shows it while the run goes on. Use as a
    context manager (around ``display``'s): leaving it closes the writer.

    Args:
        log_dir: the folder of the event files.
        display: the progress display, or None.
    """

    def __init__(self, log_dir: str | Path, display: Any = None) -> None:
        self.log_dir, self.display = Path(log_dir), display
        self.writer: Any = None

    def __enter__(self) -> TensorBoardProgress:
        if (enter := self._forward("__enter__")) is not None:
            enter()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if (leave := self._forward("__exit__")) is not None:
                leave(*exc)
        finally:
            self.close()

    def close(self) -> None:
        """Flush and close the writer (if a round opened it)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def stop(self) -> None:
        """Stop drawing and flush the writer (the run is being ended from another thread,
        which may still be writing: the writer is left open)."""
        if (stop := self._forward("stop")) is not None:
            stop()
        if self.writer is not None:
            self.writer.flush()

    def _forward(self, name: str) -> Callable[..., None] | None:
        return getattr(self.display, name, None) if self.display is not None else None

    def start(self, total_batches: int, rounds: int) -> None:
        if (start := self._forward("start")) is not None:
            start(total_batches, rounds)

    def advance(self) -> None:
        if (advance := self._forward("advance")) is not None:
            advance()

    def plan(self, plan: WorkPlan) -> None:
        if (forward := self._forward("plan")) is not None:
            forward(plan)

    def work_done(self, kind: str | None, sim_time_s: float, units: int = 1) -> None:
        if (done := self._forward("work_done")) is not None:
            done(kind, sim_time_s, units)
        elif kind == BATCH:
            for _ in range(units):
                self.advance()

    def round_started(self, round_: int, batches: int, sim_time_s: Callable[[], float]) -> None:
        if (started := self._forward("round_started")) is not None:
            started(round_, batches, sim_time_s)

    def evaluating(self, round_: int, test_samples: int) -> None:
        if (evaluating := self._forward("evaluating")) is not None:
            evaluating(round_, test_samples)

    def round_done(self, row: dict) -> None:
        if (done := self._forward("round_done")) is not None:
            done(row)
        if self.writer is None:
            self.writer = open_writer(self.log_dir, int(row["round"]))
        write_round(self.writer, row)
        self.writer.flush()
