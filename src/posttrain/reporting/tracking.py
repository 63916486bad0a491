"""Experiment trackers (``report_to``): what ``Reporter`` logs also goes to TensorBoard,
Weights & Biases, Trackio and MLflow, any subset, each through its own library, imported only
when asked for (the ``tracking`` extra installs them).

Every tracker gets the same names: ``<stage>/<metric>`` (``rl/reward``, ``sft/loss``) at the
stage's own step, as in ``metrics.jsonl``, and one table of samples per held-out evaluation
(``samples/<name>``: prompt, response, reward, finish reason). The project is ``posttrain``
and the run is named after its directory. Where the data goes: TensorBoard event files in
``<out_dir>/tensorboard``; W&B online with ``WANDB_API_KEY`` set, else offline in
``<out_dir>/wandb`` (``wandb sync`` uploads it later; ``WANDB_MODE`` decides when set);
Trackio's own store (``TRACKIO_DIR``, default ``~/.cache/huggingface/trackio``; ``trackio
show`` opens it); MLflow's ``MLFLOW_TRACKING_URI``, default ``sqlite:///<out_dir>/mlflow.db``
with artefacts in ``<out_dir>/mlflow_artifacts`` (``mlflow ui --backend-store-uri`` it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from posttrain.types import Episode

SAMPLE_COLUMNS = ["prompt", "response", "reward", "finish_reason"]
MAX_SAMPLES = 256  # rows of a samples table


def sample_rows(episodes: Sequence[Episode], tokenizer) -> list[list[Any]]:
    """The first ``MAX_SAMPLES`` episodes as ``SAMPLE_COLUMNS`` rows: the text before the first
    sampled token, the text from there on (each later segment's from its first sampled
    token), the reward and the finish reason."""
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    return [[decode(e.segments[0].token_ids[:e.segments[0].first_sampled]),
             " / ".join(decode(s.token_ids[s.first_sampled:]) for s in e.segments),
             e.reward, e.finish_reason] for e in episodes[:MAX_SAMPLES]]


class Tracker(Protocol):
    def log(self, stage: str, step: int, metrics: dict[str, float]) -> None: ...

    def table(self, name: str, rows: list[list[Any]]) -> None:
        """``rows`` of ``SAMPLE_COLUMNS`` as table ``samples/<name>``."""

    def close(self) -> None: ...


def scalars(stage: str, metrics: dict[str, Any]) -> dict[str, float]:
    """``<stage>/<metric>`` of every number in ``metrics``."""
    return {f"{stage}/{k}": float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


class TensorBoard:
    def __init__(self, out: Path, config: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out / "tensorboard"))
        self.writer.add_text("config", f"```\n{config}\n```")

    def log(self, stage: str, step: int, metrics: dict[str, float]) -> None:
        for key, value in scalars(stage, metrics).items():
            self.writer.add_scalar(key, value, step)

    def table(self, name: str, rows: list[list[Any]]) -> None:
        """As a Markdown table (TensorBoard's text plugin renders it)."""
        def cell(value: Any) -> str:
            return str(value).replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(SAMPLE_COLUMNS) + " |", "|---" * len(SAMPLE_COLUMNS) + "|"]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
        self.writer.add_text(f"samples/{name}", "\n".join(lines))

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, out: Path, config: dict) -> None:
        import wandb

        mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline")
        self.wandb = wandb
        self.run = wandb.init(project="posttrain", name=out.name, dir=str(out), config=config,
                              mode=mode)
        self.stages: set[str] = set()

    def log(self, stage: str, step: int, metrics: dict[str, float]) -> None:
        if stage not in self.stages:  # each stage's metrics against its own step
            self.stages.add(stage)
            self.run.define_metric(f"{stage}/step")
            self.run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
        self.run.log({**scalars(stage, metrics), f"{stage}/step": step})

    def table(self, name: str, rows: list[list[Any]]) -> None:
        self.run.log({f"samples/{name}": self.wandb.Table(columns=SAMPLE_COLUMNS, data=rows)})

    def close(self) -> None:
        self.run.finish()


class Trackio:
    def __init__(self, out: Path, config: dict) -> None:
        import trackio

        self.trackio = trackio
        trackio.init(project="posttrain", name=out.name, config=config, embed=False,
                     auto_log_cpu=False, auto_log_gpu=False)

    def log(self, stage: str, step: int, metrics: dict[str, float]) -> None:
        # one step axis a run (the stages follow each other on it); each row keeps its stage's
        self.trackio.log({**scalars(stage, metrics), f"{stage}/step": step})

    def table(self, name: str, rows: list[list[Any]]) -> None:
        import pandas

        frame = pandas.DataFrame(rows, columns=SAMPLE_COLUMNS)
        self.trackio.log({f"samples/{name}": self.trackio.Table(dataframe=frame)})

    def close(self) -> None:
        self.trackio.finish()


class MLflow:
    def __init__(self, out: Path, config: dict) -> None:
        import mlflow

        self.mlflow = mlflow
        server = os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(server or f"sqlite:///{(out / 'mlflow.db').resolve()}")
        if not server and mlflow.get_experiment_by_name("posttrain") is None:
            # artefacts beside the database, not in ./mlruns of whatever the working dir is
            mlflow.create_experiment(
                "posttrain", artifact_location=(out / "mlflow_artifacts").resolve().as_uri())
        mlflow.set_experiment("posttrain")
        self.run = mlflow.start_run(run_name=out.name)
        mlflow.log_dict(config, "config.json")

    def log(self, stage: str, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics(scalars(stage, metrics), step=step)

    def table(self, name: str, rows: list[list[Any]]) -> None:
        columns = {c: [row[i] for row in rows] for i, c in enumerate(SAMPLE_COLUMNS)}
        self.mlflow.log_table(columns, artifact_file=f"samples/{name}.json")

    def close(self) -> None:
        self.mlflow.end_run()


TRACKERS = {"tensorboard": TensorBoard, "wandb": WandB, "trackio": Trackio, "mlflow": MLflow}


def open_trackers(names: Sequence[str], out: Path, config: dict) -> list[Tracker]:
    """A started tracker for each of ``names``; a library that is not installed is an
    ``ImportError`` saying what to install."""
    trackers = []
    for name in names:
        try:
            trackers.append(TRACKERS[name](out, config))
        except ImportError as exc:
            raise ImportError(f"report_to: {name} needs its library: pip install "
                              f"'posttrain[tracking]' ({exc})") from exc
    return trackers
