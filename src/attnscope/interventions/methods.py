"""The methods paragraph of an interventions run: what a paper's appendix needs, generated from the run.

:func:`methods_text` (pure: the run's ``info``, its table, the atlas's ``info`` and a weights fingerprint in,
Markdown out) writes a short paragraph in sentences and a table of every setting: the software versions, the
model (its source, the sha256 of its weight files, the precision its weights are stored in and the one the
products were computed in), the corpora and windows, the interventions and their controls, how heads were
chosen (the screen, the exact rule, their agreement) and the statistics. :func:`weights_fingerprint` reads
the weight files of a source (a GGUF file, an HF directory, a hub id's cached files): sha256 per file,
streamed in 1 MiB blocks, bytes, stored dtypes and quantisation; :func:`software_versions` the versions.
``attnscope atlas ... --interventions`` writes the text as ``methods.md``.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: bytes read at a time while hashing (a weight file is never held whole in memory)
BLOCK = 1 << 20
#: stored types that are not quantised (GGUF tensor types and safetensors dtypes alike)
FLOAT_TYPES = frozenset({"F64", "F32", "F16", "BF16", "I8", "I16", "I32", "I64", "U8", "BOOL"})
#: what each built-in intervention does to one head (everything else of the model as it is)
DESCRIBE_KIND = {
    "sym": "the head's scores S = QK^T replaced by their symmetric part (S + S^T)/2",
    "anti": "the head's scores replaced by their antisymmetric part (S - S^T)/2",
    "sym~": "the symmetric part, norm-matched (each query's scores rescaled to the clean spread over its keys)",
    "anti~": "the antisymmetric part, norm-matched (each query's scores rescaled to the clean spread over its keys)",
    "ablate": "the head's output (before the output projection) set to 0",
    "mean": "the head's output replaced by its mean over the positions of the clean text windows",
    "resample": "the head's output replaced by its output on another text window at the same positions",
}
#: the control a claim of each intervention is compared with (when both ran)
CONTROL_OF = {"sym": "scale:0.5", "anti": "scale:0.5"}
BH = "Benjamini-Hochberg"


def software_versions() -> dict[str, str]:
    """attnscope, torch, transformers, numpy, pandas, gguf and Python versions (``not installed`` where absent)."""
    from importlib import metadata

    import attnscope

    out = {"attnscope": str(getattr(attnscope, "__version__", "unknown"))}
    for name in ("torch", "transformers", "numpy", "pandas", "scipy", "gguf"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    return out


# --------------------------------------------------------------------------- the weights


def file_sha256(path: str | os.PathLike, block: int = BLOCK) -> tuple[str, int]:
    """(hex sha256, bytes) of the file at ``path``, read ``block`` bytes at a time."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def weights_fingerprint(source: Any) -> dict[str, Any]:
    """Where the weights of ``source`` are and what they hold: ``files`` (path, sha256, bytes each),
    ``total_bytes``, ``stored`` (tensor count per stored type: GGUF tensor types such as Q4_K / F32, a
    safetensors file's dtypes), ``quantised`` and ``quantisation`` (GGUF: the file type and its tensor types;
    an HF config's ``quantization_config``: AWQ / GPTQ, bits, group size), ``config_dtype``.
    ``source``: a GGUF file, an HF directory, a hub id (its files in the local cache; never downloads) or a
    zoo id; anything else (a model in memory) gives ``available`` False and ``why``."""
    from attnscope.errors import AttnscopeError

    if not isinstance(source, (str, os.PathLike)):
        inner = getattr(getattr(source, "maps", None), "source", None)  # an opened subject: its file
        if isinstance(inner, (str, os.PathLike)):
            return weights_fingerprint(inner)
        return {"available": False, "source": f"a model in memory ({type(source).__name__})",
                "why": "a model in memory has no weight file to hash"}
    given = str(source)
    try:
        from attnscope.zoo.registry import resolve_spec

        spec = str(resolve_spec(given))
    except (AttnscopeError, OSError, ValueError):
        spec = given
    path = Path(spec).expanduser()
    try:
        if path.is_file():
            return {"available": True, "source": given, "kind": "file", **_gguf_or_file(path)}
        if path.is_dir():
            return {"available": True, "source": given, "kind": "HF directory", **_hf_directory(path)}
        cached = _hub_cached(spec)
        if cached is None:
            return {"available": False, "source": given,
                    "why": "not a file or directory here, and no copy in the local Hugging Face cache"}
        return {"available": True, "source": given, "kind": f"hub id (cached files in {cached})",
                **_hf_directory(cached)}
    except (AttnscopeError, OSError, ImportError, ValueError) as exc:  # said in methods.md, never a failed write
        return {"available": False, "source": given, "why": f"cannot read the weight files ({str(exc)[:160]})"}


def _gguf_or_file(path: Path) -> dict[str, Any]:
    """One weight file: a GGUF file's tensor types and file type; another file hashed alone."""
    sha, size = file_sha256(path)
    out: dict[str, Any] = {"files": [{"path": str(path), "sha256": sha, "bytes": size}], "total_bytes": size}
    from attnscope.sources.gguf import GGUFSource

    if GGUFSource.detect(str(path)):
        out.update(gguf_types(path))
    return out


def gguf_types(path: str | os.PathLike) -> dict[str, Any]:
    """A GGUF file's stored types: tensors per GGML type (``stored``), ``file_type`` (the file's own
    ``general.file_type``, e.g. Q4_K_M, when it says), ``quantised`` and ``quantisation`` in words."""
    from gguf import GGMLQuantizationType, LlamaFileType

    from attnscope.sources.gguf_header import read_gguf_header

    header = read_gguf_header(Path(path))
    stored: dict[str, int] = {}
    for t in header.tensors.values():
        try:
            name = GGMLQuantizationType(t.ggml_type).name
        except ValueError:
            name = f"type {t.ggml_type}"
        stored[name] = stored.get(name, 0) + 1
    file_type = None
    raw = header.metadata.get("general.file_type")
    if raw is not None:
        try:
            file_type = LlamaFileType(int(raw)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (ValueError, TypeError):
            file_type = f"file type {raw}"
    quant = sorted(k for k in stored if k not in FLOAT_TYPES)
    words = (f"GGUF {file_type or ', '.join(quant)}: quantised tensors {_counts(stored, quant)}" if quant
             else "not quantised (GGUF " + _counts(stored, list(stored)) + ")")
    return {"stored": dict(sorted(stored.items(), key=lambda kv: -kv[1])), "file_type": file_type,
            "quantised": bool(quant), "quantisation": words}


def _counts(stored: dict[str, int], names: Iterable[str]) -> str:
    return ", ".join(f"{k} x {stored[k]}" for k in sorted(names, key=lambda k: -stored[k]))


def _hf_directory(root: Path) -> dict[str, Any]:
    """The weight files of an HF directory (its safetensors, else its .bin files) and config.json's dtype and
    quantisation."""
    import json

    from attnscope.sources.safetensors_header import read_safetensors_header

    files = sorted(root.glob("*.safetensors")) or sorted(p for p in root.glob("*.bin")
                                                         if p.name not in ("training_args.bin", "optimizer.bin"))
    out: dict[str, Any] = {"files": [], "total_bytes": 0}
    stored: dict[str, int] = {}
    for f in files:
        sha, size = file_sha256(f)
        out["files"].append({"path": str(f), "sha256": sha, "bytes": size})
        out["total_bytes"] += size
        if f.suffix == ".safetensors":
            _, header = read_safetensors_header(f)
            for name, entry in header.items():
                if name != "__metadata__" and isinstance(entry, dict):
                    stored[str(entry.get("dtype"))] = stored.get(str(entry.get("dtype")), 0) + 1
    if not files:
        out["why"] = "no .safetensors or .bin weight file in the directory"
    config: dict[str, Any] = {}
    try:
        config = json.loads((root / "config.json").read_text())
    except (OSError, ValueError):
        pass
    dtype = config.get("torch_dtype") or config.get("dtype") if isinstance(config, dict) else None
    out["config_dtype"] = str(dtype) if dtype else None
    out["stored"] = dict(sorted(stored.items(), key=lambda kv: -kv[1]))
    q = config.get("quantization_config") if isinstance(config, dict) else None
    if isinstance(q, dict) and q:
        method = str(q.get("quant_method", "unknown method")).upper()
        parts = [f"{q[k]}-bit" if k == "bits" else f"{k.replace('_', ' ')} {q[k]}"
                 for k in ("bits", "group_size", "version", "zero_point", "desc_act") if k in q]
        out["quantised"] = True
        out["quantisation"] = f"{method} ({', '.join(parts)}; config.json quantization_config)" if parts else method
    else:
        quant = sorted(k for k in stored if k not in FLOAT_TYPES)
        out["quantised"] = bool(quant)
        out["quantisation"] = (f"quantised tensors {_counts(stored, quant)}" if quant else
                               "not quantised" + (f" ({_counts(stored, list(stored))})" if stored else
                                                  f" (config.json dtype {dtype})" if dtype else ""))
    return out


def _hub_cached(repo_id: str) -> Path | None:
    """The local snapshot of hub id ``repo_id`` (its weight files and config), or None (never downloads)."""
    if not repo_id or repo_id.startswith((".", "/", "~")) or repo_id.count("/") > 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        from attnscope.sources.hub import hub_cache

        name, _, revision = repo_id.partition("@")
        return Path(snapshot_download(name, revision=revision or None, local_files_only=True, cache_dir=hub_cache(),
                                      allow_patterns=["*.json", "*.safetensors", "*.bin"]))
    except Exception:  # not cached, an invalid id: no fingerprint, said so
        return None


# --------------------------------------------------------------------------- the text


def methods_text(info: dict[str, Any], table: "pd.DataFrame", atlas_info: dict[str, Any] | None = None,
                 weights: dict[str, Any] | None = None, *, versions: dict[str, str] | None = None) -> str:
    """Markdown methods of an interventions run: a paragraph in sentences and a table of its settings.

    ``info``: :attr:`attnscope.interventions.InterventionResult.info`; ``table``: its table; ``atlas_info``:
    the atlas's ``info`` (resamples, probes, seed) when the run joined one; ``weights``:
    :func:`weights_fingerprint` of the model (None: not taken); ``versions``: :func:`software_versions`
    (default: this process's)."""
    v = software_versions() if versions is None else versions
    kinds = _kinds(info, table)
    heads = _n_heads(info, table)
    model = str(info.get("model") or (atlas_info or {}).get("model") or "the model")
    source = (weights or {}).get("source") or (atlas_info or {}).get("source") or model
    rows: list[tuple[str, str]] = [(k, str(v[k])) for k in v]
    rows += [("model", model), ("source", str(source))]
    rows += _weight_rows(weights)
    rows.append(("products computed in", str(info.get("products") or info.get("precision") or "not recorded")))
    text_w, text_l = info.get("windows"), info.get("length")
    rand_w, rand_l = info.get("random_windows"), info.get("random_length")
    seed = info.get("seed")
    rows += [("text corpus", str(info.get("data", "not recorded"))),
             ("text windows", f"{text_w} x {text_l} tokens"),
             ("random-probe windows", f"{rand_w} x {rand_l} tokens (repeated random tokens)" if rand_w else "none"),
             ("seed", str(seed))]
    controls = _controls(info, kinds)
    rows += [("interventions", ", ".join(kinds) or "none"), ("controls", controls or "none")]
    grid = (f" of {info['n_layers'] * info['n_heads']} ({info['n_layers']} layers x {info['n_heads']} heads)"
            if info.get("n_layers") and info.get("n_heads") else "")
    rows.append(("heads intervened on", f"{heads}{grid}"))
    rows += [("screen", str(info.get("screen_method", "not recorded"))),
             ("screen label draws", f"{info['screen_samples']} per text window" if "screen_samples" in info
              else "not recorded"),
             ("exact rule", f"{info.get('exact', 'not recorded')}: {info.get('exact_rule', 'not recorded')}"),
             ("heads measured exactly", str(info.get("exact_heads", "not recorded")))]
    agree = _agreement(info.get("agreement"))
    rows.append(("screen vs exact", agree or "not compared (no head measured both ways)"))
    if info.get("claims"):
        rows.append(("claims", _flat(info["claims"])))
    rows += [("loss", str(info.get("loss", "not recorded"))),
             ("interval and tests", str(info.get("interval", "not recorded"))),
             ("detectable change", str(info.get("detectable_change", "not recorded"))),
             ("multiple comparisons", f"{BH} across the heads of each intervention and measure (p_bh)")]
    rows += _atlas_rows(atlas_info)

    products = str(info.get("products") or info.get("precision") or "not recorded")
    para = [f"Interventions were computed with attnscope {v.get('attnscope', '?')} (PyTorch {v.get('torch', '?')}, "
            f"transformers {v.get('transformers', '?')}, NumPy {v.get('numpy', '?')}, Python {v.get('python', '?')}) "
            f"on {model}{_weight_sentence(weights)}. Matrix products: {products}."]
    kinds_words = "; ".join(f"`{k}`: {_describe(k, info)}" for k in kinds)
    para.append(f"Each of {heads} heads{grid} was intervened on one at a time, everything else of the model "
                f"unchanged ({kinds_words})" + (f"; controls: {controls}." if controls else "."))
    probe = (f", and the change in the head's own behaviour scores on these and on {rand_w} windows of {rand_l} "
             f"repeated random tokens (seed {seed})" if rand_w else f" (seed {seed})")
    loss = str(info.get("loss", "not recorded"))
    where = f"{text_w} text windows of {text_l} tokens from the corpus {info.get('data', '?')}"
    if loss.startswith("none"):  # an encoder: behaviour only
        para.append(f"The model has no next-token loss ({loss}); the change in the head's own behaviour scores was "
                    f"measured on {where}" + (f" and on {rand_w} windows of {rand_l} repeated random tokens "
                                              f"(seed {seed})." if rand_w else f" (seed {seed})."))
    else:
        para.append(f"The change in the loss ({loss}) was measured on {where}{probe}.")
    if info.get("screen_method"):
        draws = info.get("screen_samples")
        per_window = ("one forward and one backward per text window" if not draws else
                      f"one forward and {1 + int(draws)} backward passes per text window, {draws} of them against "
                      "next tokens drawn from the model's own predictions for the curvature term")
        screened = ("Every head's behaviour changes were measured exactly in one forward per window (no loss to "
                    "screen)" if loss.startswith("none") else
                    f"Every head was first screened ({_head(info['screen_method'], ':')}: {per_window})")
        para.append(f"{screened}; "
                    f"{info.get('exact_heads', '?')} "
                    f"heads were then measured exactly (exact={info.get('exact', '?')}: "
                    f"{info.get('exact_rule', 'not recorded')})"
                    + (f"; where both were measured, {agree}." if agree else "."))
    interval = _head(str(info.get("interval", "not recorded")), ";")
    para.append(f"Each change is given as the {interval}, tested with a one-sample t-test; "
                f"{BH} adjusts the p values across the heads of each intervention and measure, and each row gives "
                f"its detectable change, the {_head(str(info.get('detectable_change', 'not recorded')), ':')} "
                "(the table below has each definition).")
    if atlas_info:
        para.append(f"The atlas's correlations between geometry and behaviour use {atlas_info.get('n_boot', '?')} "
                    f"resamples and permutations of whole layers (seed {atlas_info.get('seed', '?')}) and "
                    f"{BH} across their tests.")
    lines = ["# Methods", "", " ".join(para), "", "| setting | value |", "|---|---|"]
    lines += [f"| {_cell(k)} | {_cell(val)} |" for k, val in rows]
    lines += ["", "Generated by attnscope from the run (interventions.json, atlas.json); the weight hashes are "
                  "sha256 of the files read."]
    return "\n".join(lines) + "\n"


def _kinds(info: dict[str, Any], table: "pd.DataFrame") -> list[str]:
    given = info.get("interventions")
    if isinstance(given, (list, tuple)) and given:
        return [str(k) for k in given]
    return [str(k) for k in dict.fromkeys(table["intervention"])] if "intervention" in table else []


def _n_heads(info: dict[str, Any], table: "pd.DataFrame") -> int:
    if {"layer", "head"} <= set(table.columns) and len(table):
        return int(table[["layer", "head"]].drop_duplicates().shape[0])
    return int(info.get("heads") or 0)


def _describe(kind: str, info: dict[str, Any]) -> str:
    if kind in DESCRIBE_KIND:
        return DESCRIBE_KIND[kind]
    if kind.startswith("scale:"):
        return f"the head's scores multiplied by {kind[len('scale:'):]}"
    custom = info.get("custom")
    if isinstance(custom, dict) and kind in custom:
        return f"a custom score function ({_flat(custom[kind])})"
    return "as defined in attnscope's documentation"


def _controls(info: dict[str, Any], kinds: list[str]) -> str:
    """The controls run, in words: ``info["controls"]`` when the run records them, else each claim-deciding
    intervention whose control (:data:`CONTROL_OF`) ran beside it."""
    given = info.get("controls")
    if isinstance(given, dict) and given:
        return "; ".join(f"{c} for {k}" for k, c in given.items())
    if isinstance(given, str) and given:
        return given
    pairs = [(k, CONTROL_OF[k]) for k in kinds if k in CONTROL_OF and CONTROL_OF[k] in kinds]
    by: dict[str, list[str]] = {}
    for k, c in pairs:
        by.setdefault(c, []).append(k)
    if given is False and not by:
        return "none (controls=False)"
    return "; ".join(f"`{c}` ({_describe(c, info)}) as the control of {' and '.join(f'`{k}`' for k in ks)}"
                     for c, ks in by.items())


def _agreement(agree: Any) -> str:
    if not isinstance(agree, dict) or not agree:
        return ""
    parts = []
    for kind, a in agree.items():
        if not isinstance(a, dict):
            continue
        rho = a.get("spearman_rho")
        rho_s = "undefined" if not isinstance(rho, (int, float)) or rho != rho else f"{rho:+.2f}"
        worst = a.get("largest_disagreement") or {}
        w = (f", largest disagreement {worst.get('head')} (screen {worst.get('screen'):+.3f}, exact "
             f"{worst.get('exact'):+.3f})" if isinstance(worst.get("screen"), (int, float))
             and isinstance(worst.get("exact"), (int, float)) else "")
        parts.append(f"{kind}: Spearman rho {rho_s} over {a.get('heads', '?')} heads{w}")
    return "; ".join(parts)


def _weight_rows(weights: dict[str, Any] | None) -> list[tuple[str, str]]:
    if weights is None:
        return [("weight files", "not fingerprinted")]
    if not weights.get("available"):
        return [("weight files", f"not available: {weights.get('why', 'unknown')}")]
    files = weights.get("files") or []
    rows = [(f"weight file {i + 1}" if len(files) > 1 else "weight file",
             f"{Path(f['path']).name}: sha256 {f['sha256']} ({f['bytes']:,} bytes)") for i, f in enumerate(files)]
    if not files:
        rows.append(("weight files", f"none found ({weights.get('why', 'no weight file')})"))
    rows.append(("weights, total bytes", f"{int(weights.get('total_bytes', 0)):,}"))
    stored = weights.get("stored") or {}
    rows.append(("weights stored as", ", ".join(f"{k} x {n}" for k, n in stored.items()) or
                 f"config.json dtype {weights.get('config_dtype') or 'not stated'}"))
    rows.append(("quantisation", str(weights.get("quantisation", "not stated"))))
    return rows


def _weight_sentence(weights: dict[str, Any] | None) -> str:
    if weights is None:
        return ""
    if not weights.get("available"):
        return f" (weight files: not available, {weights.get('why', 'unknown')})"
    files = weights.get("files") or []
    names = ", ".join(f"{Path(f['path']).name}, sha256 {f['sha256'][:16]}..." for f in files[:3])
    more = f" and {len(files) - 3} more files" if len(files) > 3 else ""
    stored = ", ".join(f"{k} x {n}" for k, n in (weights.get("stored") or {}).items())
    how = ("quantised: " + str(weights.get("quantisation")) if weights.get("quantised") else "not quantised")
    return f" ({names}{more}; weights stored as {stored or weights.get('config_dtype') or 'not stated'}, {how})"


def _atlas_rows(atlas: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not atlas:
        return []
    rows = [("atlas resamples (n_boot)", str(atlas.get("n_boot", "not recorded"))),
            ("atlas seed", str(atlas.get("seed", "not recorded"))),
            ("atlas probes", ", ".join(map(str, atlas.get("probes", []))) or "not recorded"),
            ("atlas corpus", str(atlas.get("data", "not recorded")))]
    windows, lengths = atlas.get("windows") or {}, atlas.get("lengths") or {}
    if isinstance(windows, dict):
        rows += [(f"atlas {p} windows", f"{n} x {lengths.get(p, '?')} tokens") for p, n in windows.items() if n]
    for key in ("cluster_k", "resampling_unit", "p_value", "fdr"):
        if key in atlas:
            rows.append((f"atlas {key.replace('_', ' ')}", str(atlas[key])))
    return rows


def _head(text: str, sep: str) -> str:
    """``text`` up to its first ``sep`` (a definition's name without its details, which the table holds)."""
    return str(text).split(sep, 1)[0].strip()


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_flat(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_flat(v) for v in value)
    return str(value)


def _cell(value: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")
