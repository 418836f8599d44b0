"""The exact layer passes as jobs of their own (``intervene(executor="slurm" | "local")``, ``atlas --executor``):
one job per layer through :func:`attnscope.runs.executors.run_tasks`, each loading the model from its file or
directory, making the same windows and clean pass as :func:`attnscope.interventions.intervene`, and writing its
rows and per-token rows into the run's resumable store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .attention import layer_list, patched
from .clean import clean_pass
from .deltas import LowWeights
from .exact import TOKEN_COLUMNS, layer_pass
from .stored import _key, _token_key
from .subject import Subject, open_subject

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def job_source(source: Any) -> Any:
    """What a job loads: the path or hub id of ``source`` (an opened subject's own), else the object itself."""
    if isinstance(source, Subject):
        return getattr(source.maps, "source", None) or source
    return str(source) if isinstance(source, os.PathLike) else source


def run_jobs(results: Any, layers: list[int], by_layer: dict[int, list[int]], executor: str,
              slurm: dict[str, Any] | None, workers: int | None, progress: bool, common: dict[str, Any]) -> None:
    """The exact passes of ``layers`` as jobs of ``executor`` (one per layer) into the store ``results``."""
    from attnscope.errors import AttnscopeError
    from attnscope.runs.executors import Task, run_tasks

    tasks = [Task(_key(l, by_layer[l]), {**common, "layer": l, "heads": by_layer[l], "store": str(results.root)})
             for l in layers]
    summary = run_tasks(exact_job, tasks, results, executor=executor, workers=workers or 1, slurm=slurm,
                        progress=progress, desc=f"interventions: exact layer passes as {executor} jobs")
    if summary.failed:
        key, why = next(iter(summary.failed.items()))
        raise AttnscopeError(f"{len(summary.failed)} of {len(tasks)} exact layer jobs failed ({key}: {why}); "
                             "rerun the same command to retry them (finished layers are kept)")


def exact_job(payload: dict[str, Any]) -> "pd.DataFrame":
    """One exact layer pass as a job of its own (:func:`attnscope.runs.executors.run_tasks`): load the model,
    the text windows and their clean pass as :func:`intervene` makes them, the layer's loss rows summarised
    (returned: the executor stores them under the layer's key) and its per-token changes (written here)."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heap import reused_heap
    from attnscope.runs.store import ResultsStore

    from .summary import summarise

    subject = open_subject(payload["source"], device=payload["device"], name=payload["name"])
    text = make_windows(subject.maps, payload["data"], payload["windows"], payload["length"])
    wins = {"text": text}
    with torch.inference_mode(), patched(subject.model) as ctl, reused_heap():
        low = (LowWeights().prepare(layer_list(subject.model).modules(), subject.out_weight)
               if payload["precision"] == "bf16-delta" else None)
        clean = clean_pass(subject, wins, ctl, for_deltas=low is not None, keep_heads="resample" in payload["kinds"])
        df, tokens = layer_pass(subject, payload["layer"], payload["heads"], payload["kinds"], wins, clean, ctl, low,
                                tick=lambda _f: None, with_tokens=True, behaviour=False)
    ResultsStore(payload["store"], settings=payload["settings"], columns=TOKEN_COLUMNS).write(
        _token_key(payload["layer"], payload["heads"]), tokens)
    return summarise(df)
