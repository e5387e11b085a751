"""Training metrics: one JSON line per step in ``metrics.jsonl``, TensorBoard scalars and, when the config asks
(``logging.wandb``), a Weights & Biases run, all under the same namespaced names (the trainer draws the progress
bars). ``wandb`` is imported only then."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repogym.trainer.config import WandbConfig


class MetricsLogger:
    """Writes ``{"step": N, ...}`` lines to ``RUN_DIR/metrics.jsonl``, scalars to ``RUN_DIR/tb`` and, with ``wandb``,
    the same scalars to a W&B run (resumed by a resumed run: its id is kept in ``RUN_DIR/wandb_run_id``)."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None, tensorboard: bool = True,
                 wandb: WandbConfig | None = None, config: dict[str, Any] | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            # A resumed run rewrites the steps after its checkpoint: keep the file one line per step.
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._out = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:  # tensorboard not installed: the JSONL file still has everything
                self._tb = None
        self._wandb = _wandb_run(Path(run_dir), wandb, config) if wandb is not None else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._out.write(json.dumps(record) + "\n")
        self._out.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if k != "step" and _scalar(v)}, step=step)

    def close(self) -> None:
        self._out.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _wandb_run(run_dir: Path, config: WandbConfig, run_config: dict[str, Any] | None):
    """A W&B run for ``run_dir``: the same one again when the folder is resumed."""
    try:
        import wandb
    except ImportError:  # TrainConfig.check says so first; here for a MetricsLogger built by hand
        from repogym.envs.core.errors import ConfigError

        raise ConfigError('logging.wandb needs the wandb package, which is not installed: '
                          'pip install "repogym[wandb]"') from None
    id_file = run_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
    id_file.write_text(run_id + "\n")
    return wandb.init(project=config.project, entity=config.entity, name=config.name or run_dir.name,
                      mode=config.mode, tags=list(config.tags), dir=str(run_dir), id=run_id, resume="allow",
                      config=run_config, reinit="create_new")


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The metrics lines of a run."""
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
