"""Behaviour over training: the atlas's probes at a revision, and when geometry settles against when behaviour
appears.

* :func:`revision_behaviour` runs the probes of ``attnscope atlas`` (random: induction, previous token, sink on
  repeated random tokens; text: the same on corpus windows; both: entropy, distance) on one revision and
  returns one row per head with ``<metric>_<probe>`` columns (:func:`attnscope.atlas.build.behaviour_wide`).
  A hub revision's files are downloaded for the run into a temporary folder, removed once scored unless
  ``keep`` (then they stay in the hub cache).
* :func:`settling` applies the formation rule (:mod:`.formation`) to each head's geometry and behaviour and
  gives Spearman's rho across heads between the step at which s (or d) forms and the step at which each
  behaviour forms, with the atlas's percentile bootstrap 95% interval (:func:`attnscope.atlas.stats.correlation_table`),
  resampling whole layers; ``few_units`` marks an interval from fewer than :data:`attnscope.atlas.stats.MIN_UNITS` layers (a bootstrap
  of 2 layers gives rho 1.0 [1.0, 1.0]: no interval at all). Seeded: the same table and seed give the same
  numbers.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import InputError

from .formation import MIN_CHANGE, NOISE_FACTOR, formation

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: the files a revision needs to run (weights, config, tokenizer)
RUN_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin", "*.tiktoken"]
#: behaviour options and their defaults (the atlas's, fewer windows: a sweep runs them at every revision)
DEFAULTS = {"probes": "both", "data": "builtin", "windows": 4, "length": None, "random_windows": 4,
            "random_length": None, "seed": 0}


def behaviour_options(**given: Any) -> dict[str, Any]:
    """The probes' options with defaults filled in and checked (the atlas's own checks): a dict to store."""
    from attnscope.atlas.build import check_atlas_options
    from attnscope.heads.probes import check_probes

    opts = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}  # length None: the atlas's default
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise InputError(f"unknown behaviour option(s): {', '.join(sorted(unknown))}")
    check_atlas_options("x", probes=opts["probes"], data=opts["data"], windows=opts["windows"], length=opts["length"],
                        random_windows=opts["random_windows"], random_length=opts["random_length"], seed=opts["seed"], n_boot=1,
                        batch_size=1, device="cpu")
    opts["probes"] = list(check_probes(opts["probes"]))
    # lengths left to the atlas's defaults are not stored: a store made before --length existed still resumes
    return {k: v for k, v in opts.items() if not (k in ("length", "random_length") and v is None)}


def _hub_snapshot(spec: str, commit: str, keep: bool) -> tuple[Path, Path | None]:
    """(local folder holding the revision's files, a temporary folder to remove afterwards or None)."""
    from huggingface_hub import snapshot_download

    from attnscope.sources.hub import _hub_error, _no_bars, _quiet_client, hub_cache, hub_endpoint

    repo_id, _, rev = spec.partition("@")
    tmp = None if keep else Path(tempfile.mkdtemp(prefix="attnscope-revision-"))
    where: dict[str, Any] = {"local_dir": str(tmp)} if tmp else {"cache_dir": str(hub_cache())}
    try:
        with _quiet_client(), _no_bars(snapshot_download) as quiet:
            path = snapshot_download(repo_id, revision=commit or rev, allow_patterns=RUN_FILES,  # type: ignore[call-overload]
                                     endpoint=hub_endpoint(), **where, **quiet)
    except Exception as exc:  # one line
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise _hub_error(repo_id, f"revision {rev}", exc) from None
    return Path(path), tmp


def revision_behaviour(payload: dict[str, Any]) -> "pd.DataFrame":
    """One row per head of the revision in ``payload`` (a sweep task's): stack, layer, head and the probes'
    ``<metric>_<probe>`` columns."""
    from attnscope.atlas.build import behaviour_wide
    from attnscope.heads.probes import run_probes

    opts = payload["behaviour"]
    tmp = None
    if payload["kind"] == "hub":
        where, tmp = _hub_snapshot(payload["spec"], payload["commit"], payload["keep_downloads"])
    else:
        where = Path(payload["spec"])
    try:
        beh = run_probes(str(where), opts["probes"], data=opts["data"], windows=opts["windows"],
                         length=opts.get("length"), random_windows_n=opts["random_windows"],
                         random_length=opts.get("random_length"), seed=opts["seed"])
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    wide = behaviour_wide(beh)
    wide.insert(0, "stack", str(beh["stack"].iloc[0]))
    return wide


def behaviour_formation(table: "pd.DataFrame", min_change: float = MIN_CHANGE,
                        noise_factor: float = NOISE_FACTOR) -> "pd.DataFrame | None":
    """:func:`.formation.formation` of every head's behaviour scores, over the revisions whose probes ran (a run's
    logged step 0 has none); None when the table has no behaviour or fewer than 2 such revisions."""
    from attnscope.atlas.build import behaviour_columns

    beh = behaviour_columns(table)
    heads = table[table["level"] == "head"]
    heads = heads[heads[beh].notna().any(axis=1)] if beh else heads.iloc[:0]
    if heads["revision"].nunique() < 2:
        return None
    return formation(heads, metrics=beh, min_change=min_change, noise_factor=noise_factor)


def settling(table: "pd.DataFrame", min_change: float = MIN_CHANGE, n_boot: int = 2000, seed: int = 0,
             geometry: Sequence[str] = ("symmetry", "directionality"),
             noise_factor: float = NOISE_FACTOR) -> "pd.DataFrame":
    """Across heads: Spearman's rho between the step at which each ``geometry`` score forms and the step at which
    each behaviour forms (heads where both form), with a percentile bootstrap 95% interval over whole layers.
    Columns as :func:`attnscope.atlas.stats.correlation_table` (x, y name the metrics whose formation steps are
    compared), ``few_units`` among them: True where the interval rests on fewer than
    :data:`attnscope.atlas.stats.MIN_UNITS` layers."""
    import pandas as pd

    from attnscope.atlas.stats import correlation_table

    from attnscope.atlas.build import behaviour_columns

    beh = behaviour_columns(table)
    if not beh:
        raise InputError("the table has no behaviour columns: run the sweep with behaviour", params="table")
    heads = table[table["level"] == "head"]
    heads = heads[heads[beh].notna().any(axis=1)]  # revisions whose probes ran (a run's logged step 0 has none)
    formed = formation(heads, metrics=[*geometry, *beh], min_change=min_change, noise_factor=noise_factor)
    wide = formed.pivot_table(index=["model", "stack", "layer", "head"], columns="metric", values="formed_step",
                              aggfunc="first", dropna=False).reset_index()
    for col in (*geometry, *beh):
        wide[col] = pd.to_numeric(wide[col], errors="coerce") if col in wide else float("nan")
    return correlation_table(wide, list(geometry), beh, n_boot=n_boot, seed=seed)
