"""The sweep over training time: every chosen revision scored by ``geometry.score``, one stored result each.

``sweep(source, out_dir)`` lists the revisions (:mod:`.revisions`), turns each into a
:class:`attnscope.runs.Task` (key: revision name @ commit) and runs :func:`score_revision` through
:func:`attnscope.runs.run_tasks` (inline, local pool or Slurm). Each result lands in
``out_dir/store`` as soon as it is computed, so a killed sweep or a hub that went away loses only the
revisions in flight; a rerun scores the rest. A stored result is reused only with the same settings
(the store checks them per file; ``out_dir/emergence.json`` refuses a different source or settings up
front).

Hub revisions are read by byte range (q and k tensors only; the fused q|k|v tensor of GPT-NeoX whole),
and the tensors of a revision are removed from the cache once it is scored unless ``keep_downloads``:
the disk holds one revision's q/k at a time. Each revision's bytes received and the size of the weight
files they came from are reported in :attr:`EmergenceResult.revisions`.

Every input is checked before the first revision is scored, in this order: the settings (k, levels, stacks
by name, workers), the output folder, the revisions, then each chosen revision's ``config.json`` against the
first's (:func:`.revisions.check_one_model`: a sweep is one model; ``skip_mismatched`` leaves the others out,
listed in one warning and in ``revisions`` with status ``skipped``). ``workers`` beyond the CPUs this process
may use is capped there, with one warning.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import InputError, warn

from .revisions import Revision, list_revisions, select_revisions, source_kind

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from attnscope.runs import RunSummary

#: the columns an emergence table adds to the score record
AXIS_COLUMNS = ("revision", "step", "tokens")
#: per-revision transfer numbers, kept in the store and moved to the revisions table
TRANSFER_COLUMNS = ("bytes_read", "shard_bytes")
SETTINGS_FILE = "emergence.json"
#: every file the CLI's result of a sweep may have (``attnscope emergence ... --out``; one result of attnscope.outputs)
RESULT_FILES = ("revisions.csv", "emergence.parquet", "emergence.csv", "formation.csv", "settling.csv",
                "emergence_layers.png", "emergence_heads.png", "emergence_formation.png", "emergence_behaviour.png",
                "emergence.html")


@dataclass
class EmergenceResult:
    """``table``: the score records of every scored revision with ``revision``, ``step``, ``tokens``, in
    training order; ``revisions``: one row per chosen revision (step, tokens, commit, status, error,
    bytes_read, shard_bytes, and the loss logged at its step where the source logs one); ``summary``: the
    run's :class:`~attnscope.runs.RunSummary`; ``info``: how it was made (source, kind, settings, skipped
    revisions, workers)."""

    table: "pd.DataFrame"
    revisions: "pd.DataFrame"
    summary: "RunSummary"
    info: dict[str, Any]
    #: the training loss the source recorded (step, loss, eval_loss; :func:`.revisions.training_loss`), or None
    loss: "pd.DataFrame | None" = None


def score_revision(payload: dict[str, Any]) -> "pd.DataFrame":
    """Score one revision (top level, picklable: runs in pool workers and Slurm jobs)."""
    from attnscope.geometry import score
    from attnscope.sources import open_source

    if payload["origin"] == "run log":
        return _logged(payload)
    hub = payload["kind"] == "hub"
    opts: dict[str, Any] = {"ranges": True} if hub else {}  # hub: q/k by byte range
    src: Any = open_source(payload["spec"], **opts)  # a HubSource for hub revisions
    cache = getattr(src, "range_cache", None)
    try:
        if hub and payload["commit"] and src.repo.sha != payload["commit"]:
            raise InputError(f"{payload['spec']}: the branch moved to another commit during the sweep; run it again")
        df = score(src, k=payload["k"], levels=payload["levels"], stacks=payload["stacks"],
                   fold_norms=payload["fold_norms"], name=payload["model"], spectra=bool(payload.get("spectra")))
        moved = src.transfer() if hub else {}
    finally:
        src.close()
        if hub and not payload["keep_downloads"]:
            _drop_downloads(src, cache)
    if payload.get("behaviour"):
        df = _add_behaviour(df, payload)
    return _with_axis(df, payload, moved)


def _add_behaviour(df: "pd.DataFrame", payload: dict[str, Any]) -> "pd.DataFrame":
    """The probes' ``<metric>_<probe>`` columns on the head rows of the stack they ran on (other rows: NaN)."""
    from .behaviour import revision_behaviour

    wide = revision_behaviour(payload)
    wide["level"] = "head"
    wide["layer"] = wide["layer"].astype("Int64")
    wide["head"] = wide["head"].astype("Int64")
    out = df.merge(wide, on=["stack", "level", "layer", "head"], how="left", validate="many_to_one")
    if out.loc[out["level"] == "head", wide.columns[-1]].notna().sum() != len(wide):
        raise InputError(f"{payload['spec']}: the weights and the attention maps disagree on the heads; cannot pair them")
    return out


def _drop_downloads(src: Any, cache: Path | None) -> None:
    """Remove what scoring one hub revision put on disk: its tensors read by range and any weight file it had
    to download whole (a ``pytorch_model.bin``, or a shard where ranges were refused): the hub cache's blob
    and the snapshot's link to it. config.json and the index stay (small, and they let a rerun skip requests)."""
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    repo = getattr(src, "repo", None)
    if repo is None:
        return
    snap = repo.storage(repo.repo_id) / "snapshots" / repo.sha
    if not snap.is_dir():
        return
    for link in snap.rglob("*"):
        if link.suffix in (".bin", ".safetensors", ".pt", ".pth") and (link.is_file() or link.is_symlink()):
            blob = link.resolve()
            link.unlink(missing_ok=True)
            if blob != link and blob.is_file():
                blob.unlink(missing_ok=True)


def _logged(payload: dict[str, Any]) -> "pd.DataFrame":
    """Step 0 of a training run, from the scores its trainer logged (no checkpoint is written at step 0)."""
    from attnscope.geometry.scoring import records_frame

    from .revisions import logged_scores

    recs = [r for r in logged_scores(payload["spec"]) if r.get("level") in payload["levels"]
            and (payload["stacks"] is None or r.get("stack") in payload["stacks"])]
    df = records_frame([{**r, "model": payload["model"], "fold_norms": payload["fold_norms"]} for r in recs])
    return _with_axis(df, payload, {})


def _logs_spectra(spec: str) -> bool:
    """Whether a run logged its step-0 scores with the spectral columns (``attnscope train --score-spectra``)."""
    from attnscope.geometry.spectra import SPECTRA_COLUMNS

    from .revisions import logged_scores

    recs = logged_scores(spec)
    return bool(recs) and all(c in recs[0] for c in SPECTRA_COLUMNS)


def _with_axis(df: "pd.DataFrame", payload: dict[str, Any], moved: dict[str, Any]) -> "pd.DataFrame":
    for i, col in enumerate(AXIS_COLUMNS, start=1):
        df.insert(i, col, payload[col])
    df["tokens"] = df["tokens"].astype("Int64")
    for col in TRANSFER_COLUMNS:
        df[col] = moved.get(col)
        df[col] = df[col].astype("Int64")
    return df


def _canonical_source(source: str, kind: str) -> str:
    return source.removeprefix("hub:") if kind == "hub" else str(Path(source).expanduser().resolve())


def cap_workers(workers: int, executor: str = "local") -> tuple[int, str | None]:
    """(the worker processes to start, a one-line note when ``workers`` was more than the CPUs this process
    may use and was capped there; None otherwise). Only the local pool starts processes here."""
    from attnscope.threads import available_cpus

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers must be a positive integer, not {workers!r}", params="workers")
    cpus = available_cpus()
    if executor != "local" or workers <= cpus:
        return workers, None
    return cpus, f"workers {workers:,} capped at the {cpus} CPU(s) this process may use"


def check_stacks(stacks: str | Sequence[str] | None) -> list[str] | None:
    """``stacks`` as a sorted list of known stack names (None: all), or one line naming the unknown ones."""
    from attnscope.families.base import STACKS

    if stacks is None:
        return None
    given = [stacks] if isinstance(stacks, str) else list(stacks)
    bad = [s for s in given if not isinstance(s, str) or s not in STACKS]
    if bad or not given:
        raise InputError(f"stacks must be {', '.join(STACKS)}, not {', '.join(map(repr, bad)) or 'none'}",
                         params="stacks")
    return sorted(set(given))


def _check_stacks_present(revisions: Sequence[Revision], stacks: Sequence[str]) -> None:
    """One line when the model (its first checkpoint; a sweep is one model) has none of ``stacks``: read from its
    config and weight names, no tensor loaded. A checkpoint that cannot be opened is left to its scoring."""
    from attnscope.families import get_family
    from attnscope.sources import open_source

    first = next((r for r in revisions if r.origin != "run log"), None)
    if first is None:
        return
    try:
        src = open_source(first.spec)
    except Exception:  # unreadable: the sweep reports it for that revision, in one line
        return
    try:
        have = {i.stack for i in get_family(src.config).stacks(src.config, src)}
    except Exception:
        return
    finally:
        src.close()
    if not have & set(stacks):
        raise InputError(f"stacks: the model has no {'/'.join(stacks)} stack (it has {', '.join(sorted(have))})",
                         params="stacks")


def plan(source: str, revisions: str | Sequence[str] = "all") -> tuple[str, list[Revision]]:
    """(kind, the chosen revisions in training order) of ``source``: nothing is scored."""
    from attnscope.errors import check_type

    check_type(source, (str, Path), "source", "a hub model id, a run directory or a folder of checkpoints")
    source = str(source)
    kind = source_kind(source)
    return kind, select_revisions(list_revisions(source), revisions)


def sweep(
    source: str,
    out_dir: str | Path,
    *,
    revisions: str | Sequence[str] = "all",
    k: float = 2.0,
    levels: Sequence[str] = ("head", "layer"),
    stacks: Sequence[str] | None = None,
    fold_norms: bool | str = False,
    executor: str = "local",
    workers: int = 2,
    slurm: dict[str, Any] | None = None,
    progress: bool = True,
    keep_downloads: bool = False,
    behaviour: bool | dict[str, Any] = False,
    skip_mismatched: bool = False,
    spectra: bool = False,
) -> EmergenceResult:
    """Score the W_qk geometry of ``source`` at each chosen revision into ``out_dir/store`` (resumable).

    source: a hub model id (revisions = its branches and tags named by step), an ``attnscope train`` run
    directory or a folder of checkpoints. revisions: a SPEC (:func:`.revisions.select_revisions`).
    k, levels, stacks, fold_norms: as :func:`attnscope.geometry.score`. executor, workers, slurm: as
    :func:`attnscope.runs.run_tasks`. keep_downloads: keep each hub revision's downloads (q/k tensors; with behaviour its files) in the cache.
    behaviour: also run the atlas's probes at each revision (True, or a dict of :data:`.behaviour.DEFAULTS`
    options: probes, data, windows, length, random_windows, random_length, seed): ``<metric>_<probe>`` columns
    on the head rows. skip_mismatched: leave out (with one warning) the revisions whose architecture differs
    from the first's instead of refusing the sweep. spectra: also the effective ranks of every form's symmetric
    and antisymmetric parts (:func:`attnscope.geometry.score`; step 0 of a run, read from its log, has none and
    is left out with a note). A revision that fails (hub down, revision gone) is recorded
    and the others go on; rerun to resume.
    """
    import math

    import pandas as pd

    from attnscope.families.base import check_fold
    from attnscope.geometry.scoring import RECORD_COLUMNS, _check_levels
    from attnscope.naming import model_label
    from attnscope.runs import ResultsStore, Task, run_tasks
    from attnscope.tables import check_writable
    from attnscope.zoo.survey import _check_settings

    from .revisions import check_one_model, check_utf8_path, training_loss

    if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
        raise InputError(f"k must be a finite number >= 0, not {k!r}", params="k")
    lv = list(_check_levels(levels))
    from attnscope.errors import check_type

    check_type(spectra, bool, "spectra", "True or False")
    fold = check_fold(fold_norms)
    stacks = check_stacks(stacks)
    workers, capped = cap_workers(workers, executor)
    check_utf8_path(out_dir, "out_dir", "out_dir")
    out = check_writable(out_dir, "out_dir", directory=True)
    kind, planned = plan(source, revisions)
    chosen, skipped = check_one_model(planned, skip=bool(skip_mismatched))
    if stacks is not None and kind != "hub":
        _check_stacks_present(chosen, stacks)
    notes = []
    if capped:
        warn(capped, params="workers")
    if skipped:
        warn(f"skipped {len(skipped)} revision(s) of another architecture than the first checkpoint: "
             + "; ".join(f"{r.name} ({why})" for r, why in skipped), params="skip_mismatched")
    logged = next((r for r in chosen if r.origin == "run log"), None)
    if logged is not None and (float(k) != 2.0 or fold != "none" or (spectra and not _logs_spectra(logged.spec))):
        chosen = [r for r in chosen if r.origin != "run log"]
        notes.append("step 0 of a run is read from its log, scored with k = 2 and no folding"
                     + (" (and logged without spectra: train with --score-spectra to log them)" if spectra else "")
                     + ": left out here")
        if not chosen:
            raise InputError("revisions: only step 0 was chosen, and it is left out with these settings",
                             params="revisions")
    source = str(source)
    model = model_label(source.removeprefix("hub:")) if kind == "hub" else model_label(str(Path(source).resolve()))
    beh = None
    if behaviour is not False and behaviour is not None:
        from .behaviour import behaviour_options

        if behaviour is not True and not isinstance(behaviour, dict):
            raise InputError(f"behaviour must be True, False or a dict of probe options, not {behaviour!r}",
                             params="behaviour")
        beh = behaviour_options(**({} if behaviour is True else behaviour))
        if "head" not in lv:
            raise InputError("behaviour is measured per head: levels must include head", params="levels")
    settings = {"source": _canonical_source(source, kind), "k": float(k), "levels": lv, "stacks": stacks,
                "fold_norms": fold, "behaviour": beh, **({"spectra": True} if spectra else {})}
    from attnscope.outputs import check_result_names

    check_result_names(out, RESULT_FILES)  # a file of yours by a name a sweep writes: refused before any work
    out.mkdir(parents=True, exist_ok=True)
    _check_settings(out, settings, SETTINGS_FILE, store=out / "store")
    store = ResultsStore(out / "store", settings=settings, columns=[*RECORD_COLUMNS, *AXIS_COLUMNS])
    tasks = [Task(r.key, {"kind": kind, "spec": r.spec, "commit": r.commit if kind == "hub" else "",
                          "origin": r.origin, "revision": r.name, "step": r.step, "tokens": r.tokens, "model": model, "k": float(k),
                          "levels": lv, "stacks": stacks, "fold_norms": fold, "keep_downloads": keep_downloads,
                          "behaviour": beh if r.origin != "run log" else None,
                          **({"spectra": True} if spectra else {})})
             for r in chosen]
    summary = run_tasks(score_revision, tasks, store, executor=executor, workers=workers, slurm=slurm,
                        progress=progress, desc=f"{model_label(model)}: revisions")
    merged = store.merge([t.key for t in tasks])
    rows = []
    left_out = {r.name: why for r, why in skipped}
    for r in planned:  # training order, the skipped ones in their place
        status = ("skipped" if r.name in left_out else "failed" if r.key in summary.failed
                  else "stored" if r.key in summary.skipped else "scored")
        error = f"another architecture: {left_out[r.name]}" if r.name in left_out else summary.failed.get(r.key)
        rows.append({"revision": r.name, "step": r.step, "tokens": r.tokens, "series": r.series, "origin": r.origin,
                     "commit": r.commit, "status": status, "error": error})
    revs = pd.DataFrame(rows)
    if len(merged):
        moved = merged.groupby("revision", sort=False)[list(TRANSFER_COLUMNS)].first().reset_index()
        revs = revs.merge(moved, on="revision", how="left")
        merged = merged.drop(columns=list(TRANSFER_COLUMNS))
    else:
        for col in TRANSFER_COLUMNS:
            revs[col] = pd.array([None] * len(revs), dtype="Int64")
    for col in ("tokens", *TRANSFER_COLUMNS):
        revs[col] = revs[col].astype("Int64")
    loss = training_loss(source, kind)
    if loss is not None:  # the loss logged at each revision's step (NaN where it logged none there)
        revs = revs.merge(loss, on="step", how="left")
    info = {"source": settings["source"], "kind": kind, "model": model, "notes": notes,
            "skipped": left_out, "workers": workers,
            **{key: val for key, val in settings.items() if key != "source"}}
    return EmergenceResult(table=merged, revisions=revs, summary=summary, info=info, loss=loss)
