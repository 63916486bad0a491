"""The run a ``RunConfig`` describes: its stages in order, each starting from the previous
one's model, with held-out evaluation before the first and after each.

Checkpoints go to ``<out_dir>/checkpoints``; ``resume=True`` continues from the newest one
(the stage, its step and the evaluations so far are in its cursor).
"""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import torch

from posttrain import OPENMP_WAIT
from posttrain.config import RunConfig
from posttrain.models import load_model, load_tokenizer
from posttrain.models.devices import resolve_device
from posttrain.recipes.build import RunParts, seed_everything
from posttrain.recipes.distillation.offline import distill_stage
from posttrain.recipes.distillation.opd import opd_stage
from posttrain.recipes.dpo import preference_stage
from posttrain.recipes.placement import make_engine
from posttrain.recipes.rl import rl_stage
from posttrain.recipes.run_dir import clear_records, truncate_records
from posttrain.recipes.sft import sft_stage
from posttrain.reporting import open_trackers, plot_curves, plot_stages
from posttrain.train import is_sharded, latest_checkpoint

# stage name -> stage(parts, model, tokenizer, engine, checkpoint or None, evals) -> model
STAGES = {"sft": sft_stage, "pref": preference_stage, "distill": distill_stage,
          "opd": opd_stage, "rl": rl_stage}


class Stages(RunParts):
    """The run's shared parts (``RunParts``) and ``run``, which plays its stages."""

    def run(self, resume: bool = False) -> dict[str, Any]:
        """Every stage (from the newest checkpoint's, with ``resume``: its records cut back to
        that checkpoint), reported to ``report_to``'s trackers too; returns the summary (the
        evaluations, the wall time in all and per process, each stage's ``counters``, the
        OpenMP wait policy chosen at import, the data rows skipped as malformed), also written
        to ``summary.json``."""
        cfg = self.cfg
        if self.rank == 0:
            self.reporter.trackers = open_trackers(
                cfg.report_to, self.out, cfg.model_dump(mode="json", by_alias=True))
        with closing(self.reporter):
            if cfg.threads:
                torch.set_num_threads(cfg.threads)
            torch.set_flush_denormal(True)
            seed_everything(cfg.seed, resolve_device(cfg.trainer.device, "trainer.device"))
            ckpt = latest_checkpoint(self.ckpt_dir) if resume else None
            if resume and ckpt is None:
                self.reporter.message("[yellow]no checkpoint to resume from; starting fresh")
            cursor = {"stage": None, "step": 0, "evals": {}}
            if ckpt is not None:
                cursor = torch.load(ckpt / "trainer_state.pt", weights_only=False)["cursor"]
                self.reporter.message(f"resuming from {ckpt.name}")
                self.earlier_seconds = cursor.get("process_seconds", [])
                self.counters = cursor.get("counters", {})
            if self.rank == 0:
                if ckpt is None:
                    clear_records(self.out)
                elif "records" in cursor:  # (a checkpoint from before records were measured: as is)
                    truncate_records(self.out, cursor["records"])
            model_dir = ckpt or self.base_model_dir()
            if ckpt is not None and (cfg.trainer.lora is not None or is_sharded(ckpt)):
                # the checkpoint holds the merged model (the stage's adapter is in its state) or
                # shards: the stage's trainer is built from its start and filled from them
                model_dir = self.start_dir(cursor["stage"])
            tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
            self.attach_judges(tokenizer)
            # the engine's add-ons start from beside the starting model all run, resumed too
            engine = make_engine(cfg, model_dir, tokenizer, model, start_dir=self.base_model_dir())
            evals: dict[str, dict] = cursor["evals"]
            skipped = self.unevaluated()
            if skipped:
                self.reporter.message(f"[yellow]no held-out evaluation: {skipped}")
            elif "eval_before" not in evals:
                evals["eval_before"] = self.evaluate_logged(engine, tokenizer, "eval_before")
            stages = cfg.stages
            if cursor["stage"] is not None:
                stages = stages[stages.index(cursor["stage"]):]
            for stage in stages:
                stage_ckpt = ckpt if ckpt is not None and cursor["stage"] == stage else None
                model = STAGES[stage](self, model, tokenizer, engine, stage_ckpt, evals)
                self.on_rank0(lambda: self.save_stage_model(model, tokenizer, stage))
                engine.update_weights(((n, p.detach()) for n, p in model.named_parameters()), 0)
                if not skipped and f"eval_after_{stage}" not in evals:  # (a loop's last step did)
                    evals[f"eval_after_{stage}"] = self.evaluate_logged(engine, tokenizer,
                                                                 f"eval_after_{stage}")
            seconds = self.process_seconds()
            summary = {**evals, "wall_seconds": sum(seconds), "process_seconds": seconds,
                       "counters": self.counters, "openmp": OPENMP_WAIT, "out_dir": str(self.out),
                       **({"skipped_rows": self.skipped_rows} if self.skipped_rows else {}),
                       **({"evaluation": f"none: {skipped}"} if skipped else {})}
            if self.rank == 0:
                (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
                if self.reporter.path.is_file():
                    plot_curves(self.reporter.path, self.out / "curves.png", evals, cfg.stages)
                    plot_stages(self.reporter.path, self.out)
            return summary


def run_rank(cfg: RunConfig, resume: bool) -> dict[str, Any]:
    """One process of a ``dist.trainer_processes`` run (inside its process group)."""
    return Stages(cfg, rank=torch.distributed.get_rank()).run(resume=resume)
