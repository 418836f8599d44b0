"""The atlas of every runnable model of a zoo group, through the results store (resumable), pooled.

:func:`run_zoo_atlas` resolves each registry entry to a local source (``pypi:`` / ``join:`` sources of
the offline groups included), runs :func:`attnscope.atlas.atlas` on it and stores its per-head table
under ``OUT/store`` (one validated Parquet file per model, keyed by the registry id, with the run's
settings: a finished model is reused, a changed setting recomputes). Models that cannot be run for maps
(CTranslate2, ONNX, encoder-decoder) are recorded as skipped with their one-line reason. Correlations
are given per model and pooled over all heads (``model`` = ``all``; layers resampled and permuted within
their model); ``q`` is Benjamini-Hochberg over each model's tests, ``q_run`` over every test of the run,
and the verdict is read from ``q_run``.

With ``interventions`` (the options of :func:`attnscope.interventions.intervene`), each model is loaded once
for its atlas and its interventions; each model's intervention table is stored under ``OUT/interventions``
(keyed by the registry id, its run information beside it) and its layers under
``OUT/interventions-store/<id>``, so a stopped run resumes; :attr:`ZooAtlas.interventions` is the pooled
table (one ``model`` column joins it to the atlas), :func:`attnscope.interventions.summary.across_models`
summarises it per intervention, behaviour and model.
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
    interventions: dict[str, Any] | None = None,
    **options: Any,
) -> AtlasResult:
    """Atlas of every model of ``group`` (a group of the packaged registry, ``FILE.yaml`` or ``FILE.yaml:GROUP``);
    ``options`` go to :func:`attnscope.atlas.atlas` (and are the store's settings). With ``interventions``
    (keyword arguments of :func:`attnscope.interventions.intervene`), also every model's interventions: the
    result's ``info["interventions"]`` holds each model's run information and the pooled table is
    ``result.info["interventions_table"]`` (not written by the atlas's JSON)."""
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
    iv_store = (ResultsStore(Path(out_dir) / "interventions", settings={**settings, "interventions": _plain(interventions)},
                             columns=["model", "layer", "head", "intervention", "measure"], key_column="model")
                if interventions is not None else None)
    with store.lock():
        for e in entries:
            atlas_done = store.is_done(e.id)
            iv_done = iv_store is None or iv_store.is_done(e.id)
            if atlas_done and iv_done:
                log(f"{e.id}: reused from the store")
                continue
            if e.type == "encoder-decoder":
                skipped[e.id] = "encoder-decoder model: maps of self-attention stacks only"
                continue
            log(f"{e.id}: running the probes ..." if not atlas_done else f"{e.id}: atlas reused; intervening ...")
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                if iv_store is None:
                    res = atlas(_source(e), name=e.id, n_boot=10, seed=seed, progress=progress, **options)
                    store.write(e.id, res.table)
                else:
                    _model_with_interventions(e, store, iv_store, Path(out_dir), atlas_done, interventions,
                                              seed=seed, progress=progress, options=options)
            except AttnscopeError as exc:
                skipped[e.id] = str(exc)
                store.record_failure(e.id, str(exc))
                log(f"{e.id}: skipped ({exc})")
                continue
            log(f"{e.id}: done in {time.perf_counter() - wall:.0f} s wall, "
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
    if iv_store is not None:
        done = [m for m in info["models"] if iv_store.is_done(m)]
        info["interventions"] = {m: _read_info(Path(out_dir), m) for m in done}
        info["interventions_table"] = iv_store.merge(done) if done else None
    return AtlasResult(table=table, correlations=correlations, info=info)


def _plain(options: dict[str, Any] | None) -> Any:
    """The intervention options as store settings (tuples as lists)."""
    import json

    return json.loads(json.dumps(options, default=list)) if options is not None else None


def _info_path(out: Path, model: str) -> Path:
    from attnscope.runs.store import key_to_name

    return out / "interventions" / f"{key_to_name(model)}.info.json"


def _read_info(out: Path, model: str) -> dict[str, Any]:
    import json

    try:
        return json.loads(_info_path(out, model).read_text())
    except (OSError, ValueError):
        return {}


def _model_with_interventions(entry: Any, store: Any, iv_store: Any, out: Path, atlas_done: bool,
                              interventions: dict[str, Any], *, seed: int, progress: bool,
                              options: dict[str, Any]) -> None:
    """One model loaded once: its atlas (unless stored) and its interventions joined to it, both stored."""
    from attnscope.interventions import intervene, open_subject
    from attnscope.runs.store import key_to_name
    from attnscope.tables import atomic_write_json

    from .build import atlas

    subject = open_subject(_source(entry), device=options.get("device", "cpu"), name=entry.id, progress=progress)
    if atlas_done:
        atlas_table = store.read(entry.id)
    else:
        res = atlas(subject.maps, name=entry.id, n_boot=10, seed=seed, progress=progress, **options)
        store.write(entry.id, res.table)
        atlas_table = res.table
    iv = intervene(subject, atlas=atlas_table, name=entry.id, progress=progress,
                   store=out / "interventions-store" / key_to_name(entry.id), **interventions)
    atomic_write_json(_info_path(out, entry.id), iv.info)  # (first: a stored table always has its information)
    iv_store.write(entry.id, iv.table)
