"""Loading the subject of the interventions once: a transformers model (from a GGUF file, an HF directory / hub
id, or one already in memory with its tokenizer), its output matrix and final softcap, and its windows' maker
(:class:`attnscope.heads.maps.MapModel`): :func:`open_subject`. The source is checked (:func:`check_source`)
before anything loads; the atlas runs on the same loaded model (``attnscope.atlas(subject.maps)``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnscope.errors import ArgumentTypeError, InputError, UnsupportedError

from .attention import layer_list

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnscope.heads.maps import MapModel


@dataclass
class Subject:
    """A loaded transformers model ready for interventions: the module to run, its output matrix, windows."""

    model: Any  # the module whose forward gives last_hidden_state (the base model)
    out_weight: "torch.Tensor | None"  # [v, e] output matrix, None for an encoder
    softcap: float | None  # final logit softcap (Gemma 2)
    maps: "MapModel"  # tokenizer, causal flag, special ids, windows
    name: str

    @property
    def n_layers(self) -> int:
        return len(layer_list(self.model))


def check_source(source: Any, tokenizer: Any = None) -> None:
    """``source`` is something :func:`open_subject` can open: a path / hub id (without ``tokenizer=``), an
    opened :class:`Subject`, or a loaded transformers model (with ``tokenizer=``); a one-line error otherwise."""
    if isinstance(source, Subject):
        if tokenizer is not None:
            raise InputError("tokenizer= is for a model loaded in memory; an opened subject has its own",
                             params="tokenizer")
        return
    if isinstance(source, (str, os.PathLike)):
        if tokenizer is not None:
            raise InputError(f"{source}: tokenizer= is for a model loaded in memory; a directory or file brings "
                             "its own", params="tokenizer")
        return
    if not (hasattr(source, "config") and callable(source)):
        raise ArgumentTypeError("source must be a GGUF file, an HF directory / hub id, an opened subject "
                                "(open_subject) or a loaded transformers model with tokenizer=, not "
                                f"{type(source).__name__} {source!r:.40}", params="source")
    if tokenizer is None:
        raise InputError(f"a loaded {type(source).__name__} needs tokenizer= (its transformers tokenizer)",
                         params="tokenizer")


# --------------------------------------------------------------------------- loading


def _is_decoder_config(config: Any) -> bool:
    archs = getattr(config, "architectures", None) or []
    return bool(getattr(config, "is_decoder", False)) or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)


def _out_weight(full: Any, base: Any) -> "torch.Tensor | None":
    """The [v, e] output matrix: the LM head of ``full`` or, for a base model with tied embeddings, its input embeddings."""
    head = full.get_output_embeddings() if hasattr(full, "get_output_embeddings") else None
    if head is not None and hasattr(head, "weight"):
        return head.weight
    cfg = base.config
    tied = getattr(cfg, "tie_word_embeddings", False) or getattr(getattr(cfg, "text_config", None), "tie_word_embeddings", False)
    return base.get_input_embeddings().weight if tied else None


def _softcap(model: Any) -> float | None:
    cfg = model.config
    return getattr(cfg, "final_logit_softcapping", None) or getattr(getattr(cfg, "text_config", None),
                                                                     "final_logit_softcapping", None)


def open_subject(source: Any, tokenizer: Any = None, device: str = "cpu", name: str | None = None,
                 progress: bool = False) -> Subject:
    """A :class:`Subject` from a GGUF file, an HF directory / hub id, or a loaded transformers model with its
    tokenizer (a Subject is returned as it is). Load once, use twice: ``attnscope.atlas(subject.maps)`` runs the
    atlas on the same loaded model and ``intervene(subject, atlas=...)`` the interventions. ``progress``: say so
    from the first second while a file loads (minutes for a large GGUF file); the device is checked first."""
    from attnscope.heads.maps import MapModel

    label: str | None
    check_source(source, tokenizer)
    if isinstance(source, Subject):
        return source
    if isinstance(source, (str, os.PathLike)):
        from attnscope.devices import check_device
        from attnscope.progress import phase

        check_device(device)  # before minutes of loading
        with phase(f"loading {source}", enabled=progress):
            full, tok, label = _load(source, device)
    else:
        full, tok, label = source, tokenizer, name
    base = getattr(full, "base_model", full)
    maps = MapModel.from_hf(full, tok, name=name or label)
    if isinstance(source, (str, os.PathLike)):
        maps.source = str(source)  # the atlas reads the geometry from the same file (attnscope.atlas(subject.maps))
    out_weight = _out_weight(full, base) if maps.causal else None
    return Subject(model=base, out_weight=out_weight, softcap=_softcap(full), maps=maps, name=maps.name)


def _load(source: str | os.PathLike, device: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, name): a GGUF file through :mod:`attnscope.heads.load`; an HF directory / hub id
    with its LM head for a decoder (the base model for an encoder)."""
    from pathlib import Path

    from attnscope.heads.load import check_weights, open_runnable
    from attnscope.naming import model_label
    from attnscope.sources.base import check_local_path
    from attnscope.sources.gguf import GGUFSource
    from attnscope.zoo.registry import resolve_spec

    spec = str(Path(str(resolve_spec(source))).expanduser())  # a zoo id: its installed copy
    check_local_path(spec)  # unreadable, a FIFO or device, a missing x.gguf: one line, now
    if GGUFSource.detect(spec):
        from attnscope.heads.load import GGUF_FIX, _load_gguf, missing_gguf_runtime

        if missing_gguf_runtime():
            raise UnsupportedError(f"{source}: running a GGUF file needs {', '.join(missing_gguf_runtime())}: {GGUF_FIX}")
        check_weights(lambda: GGUFSource.open(spec), spec)  # the header and config checked before transformers reads it
        model, tok = _load_gguf(Path(spec), lm_head=True)
        return model.to(device), tok, model_label(str(source))  # the one model id (attnscope.naming)
    open_runnable(spec, device)  # CTranslate2 / ONNX: one-line refusal
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from attnscope.heads.maps import _hub_dir
    from attnscope.training.tokenizers import load_tokenizer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" tqdm bar: attnscope shows the load
    path = Path(spec)
    local = path if path.is_dir() else _hub_dir(str(source))
    from attnscope.sources.hf import HFDirectorySource

    check_weights(lambda: HFDirectorySource.open(str(local)), str(source))  # config against weights, before the load
    try:
        config = AutoConfig.from_pretrained(str(local), trust_remote_code=False)
    except Exception as exc:
        raise InputError(f"{source}: cannot read the model config ({exc.__class__.__name__})") from None
    cls = AutoModelForCausalLM if _is_decoder_config(config) else AutoModel
    try:
        model = cls.from_pretrained(str(local), attn_implementation="eager", trust_remote_code=False)  # type: ignore[arg-type]
    except Exception as exc:
        raise UnsupportedError(f"{source}: cannot load the model ({exc.__class__.__name__}: {str(exc)[:160]})") from None
    return model.to(device).eval(), load_tokenizer(local), model_label(str(source))
