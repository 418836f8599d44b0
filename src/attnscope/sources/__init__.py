"""Weight sources: where tensors come from. ``open_source(spec)`` picks the right one.

Kinds are tried in order (see ``SOURCE_TYPES``); each class's ``detect`` decides from the spec
(a path or a hub id). A new source is one small class appended to that list. Objects that are not
paths (a loaded model, a state dict with ``config=``, a TransformerLens-style object) become sources
through :func:`attnscope.sources.loaded.from_object`.
"""

from __future__ import annotations

import os
from typing import Any

from attnscope._exports import submodules
from attnscope.errors import InputError

from .base import DictSource, WeightSource, check_local_path

__all__ = ["WeightSource", "DictSource", "open_source", "SOURCE_TYPES"]
__getattr__ = submodules(__name__)  # attnscope.sources.gguf_header etc., imported on first use

#: (module, class) pairs, tried in order; imported lazily so optional formats cost nothing
SOURCE_TYPES: list[tuple[str, str]] = [
    # filled in by the source modules' authors, e.g. ("hf", "HFDirectorySource"), ("hub", "HubSource")
    ("gguf", "GGUFSource"),  # a single .gguf file (checked by magic)
    ("onnxfile", "ONNXSource"),  # a .onnx file, or a directory with model.onnx / onnx/model.onnx
    ("ctranslate2", "CT2Source"),  # a directory with model.bin (before HF dirs: both have config.json)
    ("hf", "HFDirectorySource"),  # a local HF dir (safetensors, shards, pytorch_model.bin); missing paths
    ("hub", "HubSource"),  # a bare hub id (org/name[@rev]); last, so local paths always win
]


def _source_classes() -> list[type[WeightSource]]:
    import importlib

    out = []
    for module, cls in SOURCE_TYPES:
        mod = importlib.import_module(f"{__name__}.{module}")
        out.append(getattr(mod, cls))
    return out


def open_source(spec: Any, *, config: Any = None, name: str | None = None, **options: Any) -> WeightSource:
    """Open a path / hub id, or wrap an in-memory model, as a :class:`WeightSource`.

    A source passes through unchanged. ``config`` (a dict or a transformers config) is needed for a
    state dict and overrides a module's own ``.config``; ``name`` labels an in-memory source.
    """
    if isinstance(spec, WeightSource):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        from .loaded import from_object

        return from_object(spec, config=config, name=name)
    if config is not None:
        raise InputError(f"{spec}: config= is only for in-memory models; a path or hub id brings its own config")
    spec = str(spec)
    check_local_path(spec)
    for cls in _source_classes():
        if cls.detect(spec):
            return cls.open(spec, **options) if name is None else cls.open(spec, name=name, **options)
    raise InputError(f"{spec}: not a model directory, model file or hub id that attnscope can read")
