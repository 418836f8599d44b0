"""The training-time axis of a model: its revisions, their steps and tokens, ordered, and a choice of them.

Three kinds of SOURCE have a history:

* a hub model (``org/name``): its branches and tags (``huggingface_hub``'s ``list_repo_refs``), each
  named by training step: Pythia's ``step1000``, OLMo's ``step1000-tokens4B``, OLMo-2's
  ``stage1-step1000-tokens4B``; ``main`` and other names without a step are not on the axis;
* an ``attnscope train`` run directory (``RUN/checkpoints/step-N``; tokens from its ``metrics.jsonl``). The
  trainer writes no checkpoint at step 0 but logs its scores there: that record is the run's ``step-0``
  revision (``origin`` ``run log``; the same numbers as scoring the initial weights, k = 2, no folding);
* a folder of checkpoint directories named by step (``step-100``, ``step100``, ``checkpoint-500`` as the
  Hugging Face Trainer writes them, ``global_step100``), each a model directory.

:func:`parse_step` reads step and tokens from a name; :func:`list_revisions` lists a SOURCE's revisions
in training order; :func:`select_revisions` applies a SPEC (``all``, names, globs, step ranges
``A:B``, ``log:N``). Nothing here reads weights.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from attnscope.errors import InputError, OfflineError

#: a step in a revision name: ``step1000``, ``step-1000``, ``step_1000``, ``global_step1000``, ``checkpoint-500``
_STEP = re.compile(r"(?:^|[^a-z0-9])(?:global_)?(?:step|checkpoint)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
#: tokens seen, as OLMo names it: ``tokens4B``, ``tokens1175B``, ``tokens500M``, ``tokens2T``
_TOKENS = re.compile(r"(?:^|[^a-z0-9])tokens[-_]?(\d+(?:\.\d+)?)([KMBT]?)(?![A-Za-z0-9])", re.IGNORECASE)
#: an OLMo stage (``stage1-``, ``stage2-ingredient3-``): revisions of one series share it
_SERIES_PARTS = (_STEP, _TOKENS)
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
#: the cap on ``log:N`` and on listed names (a sweep of more is a typo)
MAX_REVISIONS = 100_000


@dataclass(frozen=True)
class Revision:
    """One point of a model's history: its ``name`` (a hub branch / tag or a checkpoint folder's name), the
    ``step`` and ``tokens`` its name (or run log) gives, the ``spec`` to open it with (``org/name@rev`` or a
    path), its ``series`` (the name without step and tokens: OLMo-2's ``stage1`` vs ``stage2-ingredient1``)
    ``commit`` (the hub sha, or a fingerprint of a local checkpoint's weight files) and ``origin``
    (``hub``, ``checkpoint`` or ``run log``: step 0 of a run, read from its ``metrics.jsonl``)."""

    name: str
    step: int
    tokens: int | None
    spec: str
    series: str = ""
    commit: str = ""
    origin: str = "checkpoint"

    @property
    def key(self) -> str:
        """The results-store key: the name pinned to its commit, so a moved branch is never reused."""
        return f"{self.name}@{self.commit}" if self.commit else self.name


def parse_step(name: str) -> tuple[int | None, int | None]:
    """(step, tokens) from a revision name; None where the name does not say. ``stage1-step1000-tokens4B``
    -> (1000, 4_000_000_000); ``step-500`` -> (500, None); ``main`` -> (None, None)."""
    m = _STEP.search(name)
    step = int(m.group(1)) if m else None
    t = _TOKENS.search(name)
    tokens = None
    if t:
        tokens = int(round(float(t.group(1)) * _UNITS[t.group(2).upper()]))
    return step, tokens


def series_of(name: str) -> str:
    """The name without its step and tokens parts (``stage2-ingredient1-step1000-tokens5B`` -> ``stage2-ingredient1``)."""
    out = name
    for pat in _SERIES_PARTS:
        out = pat.sub("-", out)
    return re.sub(r"[-_]{2,}", "-", out).strip("-_")


def _series_order(series: str) -> tuple[int, str]:
    m = re.search(r"stage[-_]?(\d+)", series, re.IGNORECASE)
    return (int(m.group(1)) if m else 0, series)


def order(revisions: Sequence[Revision]) -> list[Revision]:
    """Training order: by series (stage number first), then step."""
    return sorted(revisions, key=lambda r: (_series_order(r.series), r.step, r.name))


# --------------------------------------------------------------------------- listing


def source_kind(source: str) -> str:
    """``run`` (an attnscope run directory), ``folder`` (checkpoint folders named by step) or ``hub``."""
    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "checkpoints").is_dir():
            return "run"
        return "folder"
    if path.exists():
        raise InputError(f"{source}: a file; give a run directory, a folder of checkpoints or a hub model id")
    from attnscope.sources.hub import HubSource

    if HubSource.detect(source) and "@" not in source:
        return "hub"
    if "@" in source:
        raise InputError(f"{source}: give the model without @revision; choose revisions with --revisions")
    raise InputError(f"{source}: no such directory, and not a hub model id (org/name)")


def list_revisions(source: str) -> list[Revision]:
    """Every revision of ``source`` that has a training step, in training order (see module docstring)."""
    kind = source_kind(source)
    if kind == "hub":
        revs = _hub_revisions(source.removeprefix("hub:"))
    elif kind == "run":
        revs = _run_revisions(Path(source).expanduser())
    else:
        revs = _folder_revisions(Path(source).expanduser())
    return order(revs)


def _fingerprint(ckpt: Path) -> str:
    """Size and modification time of a checkpoint's weight files: a rewritten checkpoint is never reused."""
    parts = []
    for p in sorted(ckpt.iterdir()):
        if p.is_file() and p.suffix in (".safetensors", ".bin", ".json") and p.name != "trainer_state.pt":
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    import hashlib

    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _run_log(run: Path) -> tuple[dict[int, int], str | None]:
    """(step -> tokens trained on, the step-0 line when it holds scores) from the run's ``metrics.jsonl``;
    a torn line is skipped."""
    tokens: dict[int, int] = {}
    first: str | None = None
    path = run / "metrics.jsonl"
    if not path.is_file():
        return tokens, None
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            continue
        if isinstance(rec.get("tokens"), (int, float)):
            tokens[int(rec["step"])] = int(rec["tokens"])
        if rec["step"] == 0 and isinstance(rec.get("geometry"), list) and rec["geometry"]:
            first = line
    return tokens, first


def logged_scores(path: str | Path) -> list[dict]:
    """The score records logged at step 0 in a run's ``metrics.jsonl`` (:func:`_run_revisions`'s ``step-0``)."""
    _, line = _run_log(Path(path).parent)
    if line is None:
        raise InputError(f"{path}: no scores logged at step 0")
    return list(json.loads(line)["geometry"])


def _run_revisions(run: Path) -> list[Revision]:
    from attnscope.training.checkpoints import list_checkpoints

    found = list_checkpoints(run)
    if not found:
        raise InputError(f"{run}: the run directory has no checkpoints (checkpoints/step-N); train with --checkpoint-every")
    import hashlib

    tokens, first = _run_log(run)
    revs = [Revision(p.name, step, tokens.get(step), str(p), commit=_fingerprint(p)) for step, p in found]
    if first is not None and found[0][0] != 0:
        digest = hashlib.sha256(first.encode()).hexdigest()[:16]
        revs.insert(0, Revision("step-0", 0, 0, str(run / "metrics.jsonl"), commit=digest, origin="run log"))
    return revs


def _folder_revisions(folder: Path) -> list[Revision]:
    revs: list[Revision] = []
    seen: dict[tuple[str, int], str] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_dir():
            continue
        step, tokens = parse_step(p.name)
        if step is None or not (p / "config.json").is_file():
            continue
        if (series_of(p.name), step) in seen:
            raise InputError(f"{folder}: {seen[(series_of(p.name), step)]} and {p.name} are both step {step}")
        seen[(series_of(p.name), step)] = p.name
        revs.append(Revision(p.name, step, tokens, str(p), series_of(p.name), _fingerprint(p)))
    if not revs:
        raise InputError(f"{folder}: no checkpoint folders named by step (step-N, stepN, checkpoint-N, each with "
                         "config.json), and no checkpoints/ of a run directory")
    return revs


def _hub_revisions(repo_id: str) -> list[Revision]:
    """Branches and tags of a hub model that name a step; offline or unreachable: the revisions the hub
    cache has recorded (``refs/``), else one :class:`OfflineError` line."""
    from attnscope.sources.hub import HubRepo, _hub_error, _quiet_client, _truthy, _unreachable, hub_endpoint

    refs: dict[str, str] = {}
    why = ""
    if _truthy(os.environ.get("HF_HUB_OFFLINE")):
        why = "downloads are off (HF_HUB_OFFLINE=1)"
    else:
        from huggingface_hub import HfApi, get_token

        token = os.environ.get("HF_TOKEN") or get_token() or None
        try:
            with _quiet_client():
                got = HfApi(endpoint=hub_endpoint(), token=token).list_repo_refs(repo_id)
            refs = {r.name: r.target_commit for r in [*got.branches, *got.tags]}
        except Exception as exc:  # classified: unreachable -> the cache, else one line
            if not _unreachable(exc):
                raise _hub_error(repo_id, "the branch list", exc) from None
            why = f"the hub at {hub_endpoint()} cannot be reached ({type(exc).__name__})"
    if why:
        root = HubRepo.storage(repo_id) / "refs"
        refs = {p.relative_to(root).as_posix(): p.read_text().strip() for p in root.rglob("*") if p.is_file()} \
            if root.is_dir() else {}
        if not refs:
            raise OfflineError(f"{repo_id}: no local path of that name, and as a hub model cannot list its revisions: "
                               f"{why}, and the hub cache has none")
    revs, no_step = [], []
    for name, sha in refs.items():
        step, tokens = parse_step(name)
        if step is None:
            no_step.append(name)
            continue
        revs.append(Revision(name, step, tokens, f"{repo_id}@{name}", series_of(name), sha, origin="hub"))
    if not revs:
        raise InputError(f"{repo_id}: no branch or tag names a training step (it has {', '.join(sorted(no_step)[:8])})")
    return revs


# --------------------------------------------------------------------------- choosing


def log_spaced(revisions: Sequence[Revision], n: int) -> list[Revision]:
    """``n`` revisions spread evenly in log(step): step 0 (when present) is one of them, the others are the
    steps nearest (in log) to ``n - 1`` (or ``n``) points geometrically spaced from the smallest positive step to
    the largest, each taken once; all of them when there are no more than ``n``."""
    if n < 1:
        raise InputError(f"log:N needs N >= 1, not {n}", params="revisions")
    if len(revisions) <= n:
        return list(revisions)
    zero = [r for r in revisions if r.step == 0][:1]
    pos = [r for r in revisions if r.step > 0]
    want = n - len(zero)
    if want <= 0 or not pos:
        return zero[:n]
    lo, hi = math.log(pos[0].step if pos else 1), math.log(max(r.step for r in pos))
    logs = [math.log(r.step) for r in pos]
    targets = [lo + (hi - lo) * i / (want - 1) for i in range(want)] if want > 1 else [hi]
    chosen: set[int] = set()
    for t in targets:
        free = [i for i in range(len(pos)) if i not in chosen]
        chosen.add(min(free, key=lambda i: (abs(logs[i] - t), i)))
    return order(zero + [pos[i] for i in sorted(chosen)])


def select_revisions(revisions: Sequence[Revision], spec: str | Sequence[str] = "all") -> list[Revision]:
    """The revisions a SPEC picks, in training order.

    SPEC: ``all``; or comma-separated items, each a revision name, a glob (``stage1-*``) or a step range
    ``A:B`` (inclusive; ``A:`` or ``:B`` open), whose union is taken; an item ``log:N`` thins the result to
    N revisions evenly spread in log(step) (:func:`log_spaced`). A name that matches nothing is one line.
    """
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    if not items or any(not s for s in items):
        raise InputError(f"revisions {spec!r}: an empty item", params="revisions")
    thin: int | None = None
    picked: dict[str, Revision] = {}
    filters = False
    by_name = {r.name: r for r in revisions}
    for item in items:
        if item == "all":
            picked.update(by_name)
            filters = True
            continue
        if item.startswith("log:"):
            try:
                thin = int(item[4:])
            except ValueError:
                raise InputError(f"revisions {item}: log:N needs a whole number N", params="revisions") from None
            if not 1 <= thin <= MAX_REVISIONS:
                raise InputError(f"revisions {item}: N must be 1 to {MAX_REVISIONS}", params="revisions")
            continue
        filters = True
        if re.fullmatch(r"\d*:\d*", item) and item != ":":
            a, b = item.split(":")
            lo, hi = int(a) if a else 0, int(b) if b else None
            if hi is not None and hi < lo:
                raise InputError(f"revisions {item}: the range ends before it starts", params="revisions")
            picked.update({r.name: r for r in revisions if r.step >= lo and (hi is None or r.step <= hi)})
        elif any(c in item for c in "*?["):
            hits = {r.name: r for r in revisions if fnmatch.fnmatchcase(r.name, item)}
            if not hits:
                raise InputError(f"revisions {item}: matches no revision", params="revisions")
            picked.update(hits)
        elif item in by_name:
            picked[item] = by_name[item]
        else:
            near = ", ".join(r.name for r in list(revisions)[:5])
            raise InputError(f"revisions {item}: no such revision with a training step (have {near}, ...)",
                             params="revisions")
    chosen = order(list(picked.values()) if filters else revisions)
    if thin is not None:
        chosen = log_spaced(chosen, thin)
    if not chosen:
        raise InputError(f"revisions {spec}: selects no revision", params="revisions")
    return chosen
