"""``attnscope emergence``: W_qk geometry across a model's training checkpoints.

    attnscope emergence SOURCE --out DIR [--revisions SPEC] [--k K] [--level L] [--stack S] ...
    attnscope emergence SOURCE --list [--revisions SPEC]       the revisions it would score, nothing else

Its own command rather than an option of ``geometry``: it has its own axis (revisions, steps, tokens), its
own resumable store in DIR and its own figures. Thin layer over :mod:`attnscope.emergence`; every file it
writes goes through :func:`_write_outputs` (one result, replaced whole).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from attnscope.errors import InputError
from attnscope.progress import note_after

from ._common import THREADS, check_out_names, positive, slurm_options, stderr_console, use_threads
from ._tables import print_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from attnscope.emergence import EmergenceResult


def emergence(
    source: str = typer.Argument(..., help="Hub model id (org/name), an `attnscope train` run directory, or a folder "
                                           "of checkpoint directories named by step."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory for the tables, figures and the resumable "
                                                                  "store (required unless --list)."),
    revisions: str = typer.Option("all", "--revisions", "-r", help="all; names, globs (stage1-*) or step ranges "
                                  "(1000:5000), comma-separated; log:N thins to N revisions evenly in log(step)."),
    list_only: bool = typer.Option(False, "--list", help="Print the chosen revisions (step, tokens) and stop."),
    k: float = typer.Option(2.0, "--k", help="Outlier threshold: mean + k std of row/column norms."),
    level: str = typer.Option("both", "--level", help="head, layer or both."),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help="Only this stack (encoder/decoder/cross); repeatable."),
    fold_norms: bool = typer.Option(False, "--fold-norms", help="Fold q/k-norm gains (QK-norm models) into W_q, W_k."),
    fold_input_norm: bool = typer.Option(False, "--fold-input-norm", help="With --fold-norms: also the input-norm gain."),
    min_change: float = typer.Option(0.05, "--min-change", help="Formation: smallest |final - initial| of s or d that "
                                     "counts, however quiet the trajectory (docs/emergence.md)."),
    noise_factor: float = typer.Option(2.0, "--noise-factor", help="Formation: the change must also reach this many "
                                       "times the trajectory's checkpoint-to-checkpoint noise (robust scale of its "
                                       "successive differences); 0: min-change only."),
    curves: str = typer.Option("layer-form", "--curves", help="emergence_layers.png: layer-form (the layer form M_L, "
                               "the quantity of the tables) or head-median (the median over each layer's heads)."),
    keep_downloads: bool = typer.Option(False, "--keep-downloads", help="Keep each hub revision's downloads (q/k "
                                        "tensors; with --behaviour its files) in the cache (default: removed once "
                                        "the revision is scored)."),
    spectra: bool = typer.Option(False, "--spectra", help="Also track the effective ranks of each head's "
                                 "antisymmetric (routing) and symmetric (filtering) parts: columns of "
                                 "`geometry --spectra`, their formation (floor --min-change-rank) and "
                                 "emergence_ranks.png."),
    min_change_rank: float = typer.Option(0.5, "--min-change-rank", help="Formation of anti_rank and sym_rank "
                                          "(--spectra): smallest |final - initial| that counts, in dimensions."),
    behaviour: bool = typer.Option(False, "--behaviour", help="Also run the atlas's probes (induction, previous token, "
                                   "sink, ...) at each revision, and correlate across heads when geometry settles "
                                   "with when behaviour appears."),
    probe: str = typer.Option("both", "--probe", help="--behaviour: probes, both, random or text."),
    data: str = typer.Option("builtin", "--data", help="--behaviour: corpus of the text probe."),
    windows: int = typer.Option(4, "--windows", help="--behaviour: text-probe windows per revision."),
    length: Optional[int] = typer.Option(None, "--length", help="--behaviour: text-probe window length in tokens "
                                         "(default 256, or the model's max if shorter)."),
    random_windows: int = typer.Option(4, "--random-windows", help="--behaviour: random-probe sequences per revision."),
    random_length: Optional[int] = typer.Option(None, "--random-length", help="--behaviour: random tokens per copy T "
                                                "(window 2T+1; default 127, shortened for short models)."),
    n_boot: int = typer.Option(2000, "--n-boot", help="--behaviour: bootstrap resamples of the 95% interval."),
    seed: int = typer.Option(0, "--seed", help="--behaviour: seed of the random probe and the bootstrap."),
    skip_mismatched: bool = typer.Option(False, "--skip-mismatched", help="Leave out (one warning, status skipped "
                                         "in revisions.csv) checkpoints whose architecture differs from the first's; "
                                         "default: refuse the sweep."),
    executor: str = typer.Option("local", "--executor", help="local (process pool), inline or slurm."),
    workers: int = typer.Option(2, "--workers", help="Parallel worker processes (--executor local; at most the "
                                "CPUs this process may use)."),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="Slurm partition (--executor slurm)."),
    slurm_time: Optional[int] = typer.Option(None, "--slurm-time", help="Minutes per Slurm job (--executor slurm)."),
    slurm_mem: Optional[float] = typer.Option(None, "--slurm-mem", help="Memory per Slurm job, GB (--executor slurm)."),
    threads: Optional[int] = THREADS,
) -> None:
    """Symmetry and directionality of every head's W_qk at each training checkpoint of a model: a tidy table with
    revision, step and tokens, the step at which each head forms, and figures. Resumable: rerun to continue."""
    from attnscope.emergence import plan

    positive(k, "--k", minimum=0, strict=True)
    positive(workers, "--workers")
    positive(min_change, "--min-change", minimum=0)
    positive(noise_factor, "--noise-factor", minimum=0)
    positive(min_change_rank, "--min-change-rank", minimum=0)
    if min_change_rank != 0.5 and not spectra:
        raise InputError("--min-change-rank is the formation floor of the ranks of --spectra; add --spectra or leave it out")
    if level not in ("head", "layer", "both"):
        raise InputError(f"--level must be head, layer or both, not {level!r}")
    if curves not in ("layer-form", "head-median"):
        raise InputError(f"--curves must be layer-form or head-median, not {curves!r}")
    slurm = slurm_options(executor, slurm_partition, slurm_time, slurm_mem)
    use_threads(threads)  # this process and, through OMP_NUM_THREADS, its pool workers
    probes = None
    if behaviour:
        from attnscope.emergence.behaviour import behaviour_options

        probes = behaviour_options(probes=probe, data=data, windows=windows, length=length,
                                   random_windows=random_windows, random_length=random_length, seed=seed)
        positive(n_boot, "--n-boot")
    else:
        _refuse_probe_options(probe=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                              random_length=random_length, n_boot=n_boot, seed=seed)
    if not list_only:
        if out is None:
            raise InputError("give --out DIR (the tables, figures and resumable store go there), or --list")
        from attnscope.emergence.sweep import RESULT_FILES

        check_out_names(out, RESULT_FILES, "--out")  # a file of yours by a name the result has: refused first
    kind, chosen = plan(source, revisions)
    if list_only:
        _print_revisions(source, kind, chosen)
        return
    from attnscope.emergence import sweep

    assert out is not None  # checked above
    levels = ("head", "layer") if level == "both" else (level,)
    # in a log, the counted bar's first line comes after the first revision is scored (a worker started, a model
    # loaded: half a minute): said after a second, unless the sweep refused at once in its one line
    with note_after(f"emergence {source}: {len(chosen)} revision(s) chosen; reading their configs and scoring into "
                    f"{out} (stored ones are reused) ..."):
        res = sweep(source, out, revisions=revisions, k=k, levels=levels, stacks=stack,
                    fold_norms="all" if fold_input_norm else fold_norms, executor=executor, workers=workers,
                    slurm=slurm, progress=True, keep_downloads=keep_downloads, behaviour=probes or False,
                    skip_mismatched=skip_mismatched, spectra=spectra)
    for note in res.info.get("notes", []):
        print(f"attnscope: note: {note}", file=sys.stderr)
    formed = _formation(res, min_change, noise_factor, min_change_rank)
    settled = _settling(res, min_change, n_boot, seed, noise_factor) if behaviour else None
    paths = _write_outputs(out, res, formed, settled, curves)
    if len(res.table):
        print_summary(res)
    if formed is not None:
        print_formation(formed)
    if settled is not None:
        print_settling(settled)
    failed = res.summary.failed
    for key, msg in failed.items():
        print(f"attnscope: warning: {key.split('@')[0]} failed: {msg}", file=sys.stderr)
    stderr_console().print(f"wrote {len(paths)} files to {out}/", highlight=False)
    if failed:
        n_ok = int((res.revisions["status"] != "failed").sum())
        print(f"attnscope: {len(failed)} revision(s) failed, {n_ok} scored; rerun the same command to resume",
              file=sys.stderr)
        raise typer.Exit(1)


def _formation(res: "EmergenceResult", min_change: float, noise_factor: float,
               min_change_rank: float = 0.5) -> "pd.DataFrame | None":
    """Formation of every head's and layer form's s and d (and effective ranks with --spectra), and of every
    head's behaviour scores (--behaviour), when at least two revisions were scored."""
    import pandas as pd

    from attnscope.emergence import formation
    from attnscope.emergence.behaviour import behaviour_formation
    from attnscope.emergence.formation import METRICS, RANK_METRICS

    if res.table.empty or res.table["revision"].nunique() < 2:
        return None
    ranks = tuple(m for m in RANK_METRICS if m in res.table.columns and res.table[m].notna().any())
    floors = {**dict.fromkeys(METRICS, min_change), **dict.fromkeys(ranks, min_change_rank)}
    parts = [formation(res.table, metrics=METRICS + ranks, min_change=floors, level=lv, noise_factor=noise_factor)
             for lv in ("head", "layer") if (res.table["level"] == lv).any()]
    beh = behaviour_formation(res.table, min_change, noise_factor)
    if beh is not None:
        parts.append(beh)
    return pd.concat(parts, ignore_index=True)


def _refuse_probe_options(**given_values: object) -> None:
    """One line when a probe option was given without --behaviour (its value differs from the default)."""
    defaults = {"probe": "both", "data": "builtin", "windows": 4, "length": None, "random_windows": 4,
                "random_length": None, "n_boot": 2000, "seed": 0}
    given = ["--" + name.replace("_", "-") for name, value in given_values.items() if value != defaults[name]]
    if given:
        raise InputError(f"{', '.join(given)} configure the probes of --behaviour; add --behaviour or leave them out")


def _settling(res: "EmergenceResult", min_change: float, n_boot: int, seed: int,
              noise_factor: float) -> "pd.DataFrame | None":
    from attnscope.atlas.build import behaviour_columns
    from attnscope.emergence.behaviour import settling

    scored = res.table[res.table["level"] == "head"]
    beh = behaviour_columns(res.table)
    if not beh or scored.dropna(subset=beh[:1])["revision"].nunique() < 2:
        return None
    return settling(res.table, min_change=min_change, n_boot=n_boot, seed=seed, noise_factor=noise_factor)


def _write_outputs(out: Path, res: "EmergenceResult", formed: "pd.DataFrame | None",
                   settled: "pd.DataFrame | None" = None, curves: str = "layer-form") -> list[Path]:
    """Every file of a sweep into ``out`` as one result (:func:`attnscope.outputs.write_result_set`: it replaces
    the previous sweep's files whole, listed in ``attnscope-manifest.json``): emergence.parquet/.csv (the table),
    revisions.csv, formation.csv, settling.csv (--behaviour), the figures and emergence.html. Every figure and
    the page are rendered before the first file moves in, so a kill leaves the old result or the new one."""
    from attnscope.outputs import write_result_set
    from attnscope.plots.base import figure_bytes
    from attnscope.plots.emergence import emergence_figures
    from attnscope.tables import table_bytes

    files: dict = {"revisions.csv": table_bytes(res.revisions, "revisions.csv")}
    if not res.table.empty:
        files["emergence.parquet"] = table_bytes(res.table, "emergence.parquet")
        files["emergence.csv"] = table_bytes(res.table, "emergence.csv")
        if formed is not None:
            files["formation.csv"] = table_bytes(formed, "formation.csv")
        if settled is not None:
            files["settling.csv"] = table_bytes(settled, "settling.csv")
        for name, fig in emergence_figures(res.table, formed, loss=res.loss, curves=curves):
            files[name] = figure_bytes(fig, "png")
        if (res.table["level"] == "head").any():
            from attnscope.emergence.html import emergence_page

            files["emergence.html"] = emergence_page(res.table, formed=formed)
    return write_result_set(out, files, dict(res.info), kind="emergence")


def _size(value: object) -> str:
    import pandas as pd

    if value is None or pd.isna(value):
        return "-"
    n = float(value)  # type: ignore[arg-type]
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return "-"  # pragma: no cover


def _tokens(value: object) -> str:
    import pandas as pd

    if value is None or pd.isna(value):
        return "-"
    n = int(value)  # type: ignore[call-overload]
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _print_revisions(source: str, kind: str, chosen: list) -> None:
    from ._common import console

    rows = [[r.name, str(r.step), _tokens(r.tokens), r.origin] for r in chosen]
    print_table(console(stderr=False), f"{source}: {len(chosen)} revision(s) ({kind})", ["revision", "step", "tokens",
                                                                                           "from"], rows)


_SHORT = {"symmetry": "s", "directionality": "d", "anti_rank": "anti_rank", "sym_rank": "sym_rank"}


def print_formation(formed: "pd.DataFrame") -> None:
    """Per stack, level and score (s, d; behaviour scores summed up in one row): how many trajectories formed (and
    of those how many are borderline, within 10% of their margin), how many were transients (out of the noise band
    and back inside it), how many changed but stayed inside their noise, the median step of those that formed
    (formation.csv has every trajectory, with each formation step's interval)."""
    from ._common import console

    kind = formed["metric"].map(lambda m: _SHORT.get(m, "behaviour"))
    rows = []
    for (stack, level, metric), grp in formed.assign(kind=kind).groupby(["stack", "level", "kind"], sort=False):
        counts = grp["outcome"].value_counts()
        steps = grp["formed_step"].dropna().astype(float)
        border = int((grp["borderline"].astype(bool) & (grp["outcome"] == "formed")).sum()) if "borderline" in grp else 0
        rows.append([str(stack), str(level), str(metric),
                     f"{counts.get('formed', 0)}/{len(grp)}" + (f" ({border} borderline)" if border else ""),
                     str(counts.get("transient", 0)), str(counts.get("inside the noise", 0)),
                     f"{steps.median():.0f}" if len(steps) else "-"])
    print_table(console(stderr=False), "formation: trajectories that formed (formation.csv)",
                ["stack", "level", "score", "formed", "transient", "in noise", "median step"], rows)


def print_settling(settled: "pd.DataFrame") -> None:
    """The settling correlations that are defined, each with its interval and units, and one warning when any
    interval rests on fewer than 5 layers."""
    import math

    from ._common import console

    defined = settled[settled["rho"].notna()]
    rows = [[_SHORT.get(r.x, str(r.x)), str(r.y), (f"{r.rho:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
             + (" (few)" if r.few_units else "")) if math.isfinite(r.ci_low) else f"{r.rho:+.2f}",
             f"{r.n}/{r.n_units}" + (" few" if r.few_units else ""), f"{r.q_run:.2f}"] for r in defined.itertuples()]
    if rows:
        print_table(console(stderr=False), "settling: rho of formation steps, 95% CI over layers (settling.csv)",
                    ["x", "behaviour", "rho [95% CI]", "heads/layers", "q"], rows)
    few = defined[defined["few_units"]]
    if len(few):
        print(f"attnscope: warning: {len(few)} of {len(defined)} settling interval(s) rest on fewer than 5 layers "
              f"(few_units in settling.csv): too few resampling units to trust the interval", file=sys.stderr)
    elif defined.empty:
        print("attnscope: note: no settling correlation is defined (a behaviour and its geometry formed together "
              "in fewer than 3 heads)", file=sys.stderr)


def print_summary(res: "EmergenceResult") -> None:
    """Per stack: one line per revision with the median [Q1, Q3] over layers of s and d (layer form M_L, else
    the heads), with --spectra the median over heads of anti_rank in the first layer and of anti_rank and
    sym_rank in all, and for hub sources the bytes read against the weight files they came from."""
    from ._common import console
    from .geometry import _fmt

    table = res.table
    rows_of = table[table["level"] == "layer"]
    over = "layers (M_L)"
    if rows_of.empty:
        rows_of, over = table[table["level"] == "head"], "heads"
    revs = res.revisions.set_index("revision")
    hub = res.info.get("kind") == "hub"
    con = console(stderr=False)
    heads = table[table["level"] == "head"]
    ranks = "anti_rank" in table.columns and heads["anti_rank"].notna().any()  # --spectra: median over heads
    for stack, grp in rows_of.groupby("stack", sort=False):
        rows = []
        for rev, one in grp.groupby("revision", sort=False):
            s, d = one["symmetry"], one["directionality"]
            row = [str(rev), str(one["step"].iloc[0]), _tokens(one["tokens"].iloc[0]),
                   _fmt(s.median(), s.quantile(0.25), s.quantile(0.75)),
                   _fmt(d.median(), d.quantile(0.25), d.quantile(0.75))]
            if ranks:
                at = heads[(heads["stack"] == stack) & (heads["revision"] == rev)]
                first = at[at["layer"] == at["layer"].min()]
                row += [f"{first['anti_rank'].median():.2f}", f"{at['anti_rank'].median():.2f}",
                        f"{at['sym_rank'].median():.2f}"]
            if hub:
                row += [_size(revs.loc[rev, "bytes_read"]), _size(revs.loc[rev, "shard_bytes"])]
            rows.append(row)
        header = ["revision", "step", "tokens", "s", "d"] + (["anti_rank L0", "anti_rank", "sym_rank"] if ranks else []) \
            + (["read", "of files"] if hub else [])
        print_table(con, f"{res.info['model']} · {stack}: median [Q1, Q3] over {over}", header, rows)
    if hub:
        read, files = res.revisions["bytes_read"].sum(), res.revisions["shard_bytes"].sum()
        if files:
            stderr_console().print(f"read {_size(read)} of {_size(files)} in the weight files holding q/k "
                                   f"({100 * read / files:.1f}%), this run", highlight=False)
