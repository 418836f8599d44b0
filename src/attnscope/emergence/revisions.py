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
``A:B``, ``log:N``). :func:`check_one_model` reads each chosen revision's ``config.json`` (never its weights)
and refuses, or with ``skip`` leaves out, a revision whose architecture differs from the first's: a sweep is
one model.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from attnscope.errors import FormatError, InputError, OfflineError, excerpt

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: a step in a revision name: ``step1000``, ``step-1000``, ``step_1000``, ``global_step1000``, ``checkpoint-500``
_STEP = re.compile(r"(?:^|[^a-z0-9])(?:global_)?(?:step|checkpoint)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
#: tokens seen, as OLMo names it: ``tokens4B``, ``tokens1175B``, ``tokens500M``, ``tokens2T``
_TOKENS = re.compile(r"(?:^|[^a-z0-9])tokens[-_]?(\d+(?:\.\d+)?)([KMBT]?)(?![A-Za-z0-9])", re.IGNORECASE)
#: an OLMo stage (``stage1-``, ``stage2-ingredient3-``): revisions of one series share it
_SERIES_PARTS = (_STEP, _TOKENS)
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
#: the cap on ``log:N`` and on listed names (a sweep of more is a typo)
MAX_REVISIONS = 100_000
#: the largest training step (and token count) a name or a run log may give: far beyond any run (2**53: exact as
#: a float); a larger number is refused in one line, never an overflow deep in a table
MAX_STEP = 2**53


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
    step = int(m.group(1)) if m and len(m.group(1)) <= 20 else None
    if m and (step is None or step > MAX_STEP):
        raise InputError(f"{name[:100]}: step {m.group(1)[:30]}{'...' if len(m.group(1)) > 30 else ''} is larger than "
                         f"any training step (at most {MAX_STEP:,}); rename or remove it")
    t = _TOKENS.search(name)
    tokens = None
    if t:
        value = float(t.group(1)) * _UNITS[t.group(2).upper()]
        tokens = int(round(value)) if math.isfinite(value) and value <= MAX_STEP * 1e3 else None
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


def check_utf8_path(path: str | Path, what: str, param: str) -> None:
    """One line when ``path`` holds bytes that are not UTF-8 (a folder named on another system's encoding):
    the store, the manifest and the weight readers all need its name as text."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(text)
        raise InputError(f"{what} {raw!r}: the name is not valid UTF-8; rename it, or link it under a UTF-8 name "
                         f"(ln -s), and give that", params=param) from None


def source_kind(source: str) -> str:
    """``run`` (an attnscope run directory), ``folder`` (checkpoint folders named by step) or ``hub``."""
    check_utf8_path(source, "source", "source")
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


def _log_records(path: Path) -> list[tuple[dict, str]]:
    """(record, line) of every line of a run's ``metrics.jsonl`` that is a record with an integer step; a torn
    line is skipped; a number no run writes (more digits than Python reads, a step or token count beyond
    :data:`MAX_STEP`) is one FormatError naming its line."""
    out: list[tuple[dict, str]] = []
    if not path.is_file():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        except (ValueError, RecursionError) as exc:  # "Exceeds the limit (4300 digits) ...", nested too deep
            raise FormatError(f"{path}: line {n} is no metrics record ({str(exc)[:60]}); attnscope train never "
                              "writes it: remove the line") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or isinstance(rec["step"], bool):
            continue
        for key in ("step", "tokens"):
            value = rec.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not (
                    math.isfinite(value) and abs(value) <= MAX_STEP):
                raise FormatError(f"{path}: line {n}: {key} {str(value)[:30]} is no count a run logs (at most "
                                  f"{MAX_STEP:,}); remove the line")
        out.append((rec, line))
    return out


def _run_log(run: Path) -> tuple[dict[int, int], str | None]:
    """(step -> tokens trained on, the step-0 line when it holds scores) from the run's ``metrics.jsonl``;
    a torn line is skipped."""
    tokens: dict[int, int] = {}
    first: str | None = None
    for rec, line in _log_records(run / "metrics.jsonl"):
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
        try:
            step, tokens = parse_step(name)
        except InputError:  # a branch named by an absurd step: not a checkpoint of training
            step, tokens = None, None
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


def _shown(text: object) -> str:
    """A revision name or spec for an error line: as typed when short and printable, else a short excerpt of its
    repr (a newline never cuts the line, 100,000 characters are never echoed)."""
    if isinstance(text, str) and text.isprintable() and len(text) <= 80:
        return text
    return excerpt(text if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else text, 80)


def select_revisions(revisions: Sequence[Revision], spec: str | Sequence[str] = "all") -> list[Revision]:
    """The revisions a SPEC picks, in training order.

    SPEC: ``all``; or comma-separated items, each a revision name, a glob (``stage1-*``) or a step range
    ``A:B`` (inclusive; ``A:`` or ``:B`` open), whose union is taken; an item ``log:N`` thins the result to
    N revisions evenly spread in log(step) (:func:`log_spaced`). A name that matches nothing is one line.
    """
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    if not items or any(not s for s in items):
        raise InputError(f"revisions {excerpt(spec)}: an empty item", params="revisions")
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
                raise InputError(f"revisions {_shown(item)}: log:N needs a whole number N", params="revisions") from None
            if not 1 <= thin <= MAX_REVISIONS:
                raise InputError(f"revisions {_shown(item)}: N must be 1 to {MAX_REVISIONS}", params="revisions")
            continue
        filters = True
        if re.fullmatch(r"\d*:\d*", item) and item != ":":
            if len(item) > 40:
                raise InputError(f"revisions {_shown(item)}: a step range of numbers beyond any step", params="revisions")
            a, b = item.split(":")
            lo, hi = int(a) if a else 0, int(b) if b else None
            if hi is not None and hi < lo:
                raise InputError(f"revisions {_shown(item)}: the range ends before it starts", params="revisions")
            picked.update({r.name: r for r in revisions if r.step >= lo and (hi is None or r.step <= hi)})
        elif any(c in item for c in "*?["):
            hits = {r.name: r for r in revisions if fnmatch.fnmatchcase(r.name, item)}
            if not hits:
                raise InputError(f"revisions {_shown(item)}: matches no revision", params="revisions")
            picked.update(hits)
        elif item in by_name:
            picked[item] = by_name[item]
        else:
            near = ", ".join(_shown(r.name) for r in list(revisions)[:5])
            raise InputError(f"revisions {_shown(item)}: no such revision with a training step (have {near}, ...)",
                             params="revisions")
    chosen = order(list(picked.values()) if filters else revisions)
    if thin is not None:
        chosen = log_spaced(chosen, thin)
    if not chosen:
        raise InputError(f"revisions {_shown(spec)}: selects no revision", params="revisions")
    return chosen


# --------------------------------------------------------------------------- one model

#: what makes two checkpoints the same model, each read under the names the common config.json forms use
ARCHITECTURE = {
    "family": ("model_type",),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "decoder layers": ("num_decoder_layers",),
    "width": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "head size": ("head_dim", "d_head", "d_kv"),
    "attention": ("attn_pattern",),
}


def architecture(config: dict) -> dict[str, object]:
    """The architecture a ``config.json`` describes (:data:`ARCHITECTURE`'s keys; a multimodal model's
    ``text_config`` where the top level has no layer count); keys the config does not hold are left out."""
    if not any(k in config for k in ARCHITECTURE["layers"]) and isinstance(config.get("text_config"), dict):
        config = {**config["text_config"], "model_type": config.get("model_type")}
    out: dict[str, object] = {}
    for key, names in ARCHITECTURE.items():
        for name in names:
            if name in config:
                out[key] = config[name]
                break
    return out


def _config_of(rev: Revision) -> dict | None:
    """A revision's config.json as a dict; None for a run's logged step 0 (no checkpoint: the run's own model)
    and for a hub revision whose config cannot be fetched now (its scoring reports why)."""
    if rev.origin == "run log":
        return None
    if rev.origin == "hub":
        from huggingface_hub import get_token

        from attnscope.sources.hub import HubRepo, _truthy

        repo_id, _, name = rev.spec.partition("@")
        # pinned to the commit the branch list gave: the cached config.json, else one download of it
        repo = HubRepo(repo_id, name, os.environ.get("HF_TOKEN") or get_token() or None, rev.commit, set(),
                       online=not _truthy(os.environ.get("HF_HUB_OFFLINE")))
        repo.files_known = False
        try:
            path = repo.fetch("config.json")
        except Exception:  # unreachable or gone: the revision fails in the sweep, one line, and resumes
            return None
    else:
        path = Path(rev.spec) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{rev.name}: cannot read its config.json ({type(exc).__name__}: {exc})") from None
    return config if isinstance(config, dict) else {}


def differences(first: dict[str, object], other: dict[str, object]) -> list[str]:
    """``"width 48 vs 32"`` for every architecture key both hold with different values."""
    return [f"{key} {other[key]} vs {first[key]}" for key in ARCHITECTURE if key in first and key in other
            and other[key] != first[key]]


def check_one_model(revisions: Sequence[Revision],
                    skip: bool = False) -> tuple[list[Revision], list[tuple[Revision, str]]]:
    """(the revisions to sweep, [(revision, what differs)] left out). The first revision with a config sets
    the architecture; a later one that differs in any :data:`ARCHITECTURE` key is refused in one line naming
    it and the differences, or with ``skip`` left out and returned."""
    first: tuple[Revision, dict[str, object]] | None = None
    kept: list[Revision] = []
    skipped: list[tuple[Revision, str]] = []
    for rev in revisions:
        config = _config_of(rev)
        if config is None:
            kept.append(rev)
            continue
        arch = architecture(config)
        if first is None:
            first = (rev, arch)
            kept.append(rev)
            continue
        diff = differences(first[1], arch)
        if not diff:
            kept.append(rev)
            continue
        why = ", ".join(diff)
        if not skip:
            raise InputError(f"revision {rev.name} is another model than {first[0].name} ({why}): a sweep is one "
                             "model; leave it out with --revisions, or skip such revisions with --skip-mismatched",
                             params="skip_mismatched")
        skipped.append((rev, why))
    return kept, skipped


# --------------------------------------------------------------------------- the loss beside the scores

#: the losses a loss table may hold, as the trainer logs them
LOSSES = ("loss", "eval_loss")


def _step_or_none(name: str) -> int | None:
    try:
        return parse_step(name)[0]
    except InputError:
        return None


def _float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float: no loss
        return math.nan


def training_loss(source: str, kind: str) -> "pd.DataFrame | None":
    """The training (and held-out) loss a SOURCE recorded, as a table ``step, loss, eval_loss``: an ``attnscope
    train`` run's ``metrics.jsonl`` (loss: the mean over the steps since the last log line), a Hugging Face
    Trainer folder's last ``trainer_state.json`` (``log_history``); None where nothing is recorded (a hub
    model's branches carry no loss)."""
    import pandas as pd

    rows: list[dict] = []
    if kind == "run":
        rows = [rec for rec, _ in _log_records(Path(source).expanduser() / "metrics.jsonl")]
    elif kind == "folder":
        states = [(step, p / "trainer_state.json") for p in Path(source).expanduser().iterdir()
                  if p.is_dir() and (step := _step_or_none(p.name)) is not None
                  and (p / "trainer_state.json").is_file()]
        if states:
            try:
                history = json.loads(max(states)[1].read_text(encoding="utf-8")).get("log_history", [])
            except (OSError, ValueError, AttributeError):
                history = []
            rows = [r for r in history if isinstance(r, dict) and isinstance(r.get("step"), int)]
    found = [{"step": r["step"], **{k: _float(r[k]) for k in LOSSES if isinstance(r.get(k), (int, float))}}
             for r in rows if 0 <= r["step"] <= MAX_STEP]
    found = [r for r in found if len(r) > 1]
    if not found:
        return None
    table = pd.DataFrame(found).groupby("step", as_index=False).last().sort_values("step", ignore_index=True)
    for col in LOSSES:
        if col not in table:
            table[col] = float("nan")
    return table[["step", *LOSSES]]
