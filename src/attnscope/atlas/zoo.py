"""The atlas of every runnable model of a zoo group, through the results store (resumable), pooled.

:func:`run_zoo_atlas` resolves each registry entry to a local source (``pypi:`` / ``join:`` sources of
the offline groups included), runs :func:`attnscope.atlas.atlas` on it and stores its per-head table
under ``OUT/store`` (one validated Parquet file per model, keyed by the registry id, with the run's
settings: a finished model is reused, a changed setting recomputes). Models that cannot be run for maps
(CTranslate2, ONNX, encoder-decoder) are recorded as skipped with their one-line reason. Correlations
are given per model and pooled over all heads (``model`` = ``all``; layers resampled and permuted within
their model); ``q`` is Benjamini-Hochberg over each model's tests, ``q_run`` over every test of the run,
and the verdict is read from ``q_run``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from attnscope.errors import AttnscopeError, InputError

from .build import GEOMETRY_COLUMNS, AtlasResult, behaviour_columns

POOLED = "all"


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _source(entry: Any) -> str:
    from attnscope.zoo.registry import resolve_source

    if entry.source is None:
        return entry.id
    return resolve_source(entry.source, entry_id=entry.id, parts=entry.parts, with_files=entry.with_files,
                          sha256=entry.sha256)


def run_zoo_atlas(
    group: str,
    out_dir: str | Path,
    *,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    **options: Any,
) -> AtlasResult:
    """Atlas of every model of ``group`` (a group of the packaged registry, ``FILE.yaml`` or ``FILE.yaml:GROUP``);
    ``options`` go to :func:`attnscope.atlas.atlas` (and are the store's settings)."""
    from attnscope.runs import ResultsStore
    from attnscope.zoo.registry import select
    from attnscope.zoo.survey import split_group_spec

    from .build import atlas
    from .stats import correlation_table, judge, statistics_info

    entries = select(*split_group_spec(group, None))  # a group, FILE.yaml or FILE.yaml:GROUP, as `geometry --zoo`
    if not entries:
        raise InputError(f"zoo group {group!r} has no models")
    log = log or (lambda message: None)
    settings = {**{k: v for k, v in options.items() if k != "device"}, "seed": seed}
    store = ResultsStore(Path(out_dir) / "store", settings=settings,
                         columns=["model", "layer", "head", *GEOMETRY_COLUMNS],
                         key_column="model")
    skipped: dict[str, str] = {}
    with store.lock():
        for e in entries:
            if store.is_done(e.id):
                log(f"{e.id}: reused from the store")
                continue
            if e.type == "encoder-decoder":
                skipped[e.id] = "encoder-decoder model: maps of self-attention stacks only"
                continue
            log(f"{e.id}: running the probes ...")
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                res = atlas(_source(e), name=e.id, n_boot=10, seed=seed, progress=progress, **options)
            except AttnscopeError as exc:
                skipped[e.id] = str(exc)
                store.record_failure(e.id, str(exc))
                log(f"{e.id}: skipped ({exc})")
                continue
            store.write(e.id, res.table)
            log(f"{e.id}: {len(res.table)} heads in {time.perf_counter() - wall:.0f} s wall, "
                f"{time.process_time() - cpu:.0f} s CPU; peak RSS of this process so far {_peak_mb():.0f} MB")
    table = store.merge([e.id for e in entries])
    if table.empty:
        raise InputError(f"zoo group {group!r}: no model could be run for maps ({'; '.join(skipped.values())})")
    behaviours = behaviour_columns(table)
    per_model = correlation_table(table, GEOMETRY_COLUMNS, behaviours, n_boot=n_boot, seed=seed, by="model")
    # pooled: layers are resampled and permuted within their own model (a layer of one model is no draw of another's)
    pooled = correlation_table(table.assign(of_model=table["model"], model=POOLED), GEOMETRY_COLUMNS, behaviours,
                               n_boot=n_boot, seed=seed, by="model", strata="of_model")
    info = {"model": f"zoo {group}", "group": group, "models": list(dict.fromkeys(table["model"])),
            "skipped": skipped, "settings": settings, "n_boot": n_boot, **statistics_info()}
    import pandas as pd

    correlations = judge(pd.concat([per_model, pooled], ignore_index=True))  # q_run: BH over the whole run
    return AtlasResult(table=table, correlations=correlations, info=info)
