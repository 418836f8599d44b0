"""Opening model FILES for attention maps: GGUF through transformers, weights-only formats refused.

:func:`open_runnable` is asked first by :func:`attnscope.heads.maps.open_model`. It returns a
:class:`~attnscope.heads.maps.MapModel` for a GGUF file (llama.cpp / Ollama), raises one line for a
source that has no runnable form here (CTranslate2, ONNX), and returns None for everything else (HF
directories, hub ids and attnscope checkpoints stay with ``open_model``).

A GGUF file is loaded with transformers' own GGUF support
(``AutoModel.from_pretrained(dir, gguf_file=name)``), which dequantises every tensor to float32 and
rebuilds the tokenizer from the file's vocabulary; the weights are therefore the file's quantised
values, not the original checkpoint's. Only the base model is kept: attention maps never need the
language-model head, whose [vocab, d_model] matrix (untied in many GGUF files) would add a second
embedding-sized float32 matrix (0.5 GB for Qwen2.5-0.5B) and a logits tensor per forward. (transformers
4.x fills only the ``...ForCausalLM`` class from a GGUF file: there the full model is loaded and its base
kept.) A weight the file did not fill is never left at random: that is a one-line refusal. transformers
needs the ``accelerate`` and ``gguf`` packages for this: the optional extra ``attnscope[gguf]``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnscope.errors import FormatError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .maps import MapModel

#: packages transformers needs to load a GGUF file (the ``gguf`` extra)
GGUF_RUNTIME = ("accelerate", "gguf")
GGUF_FIX = "pip install 'attnscope[gguf]'"


def open_runnable(source: str | os.PathLike, device: str = "cpu") -> "MapModel | None":
    """A MapModel for a GGUF file; one-line refusal for CTranslate2 / ONNX; None for anything else."""
    from attnscope.sources.ctranslate2 import CT2Source
    from attnscope.sources.gguf import GGUFSource
    from attnscope.sources.onnxgraph import ONNXSource

    spec = str(Path(str(source)).expanduser())
    if GGUFSource.detect(spec):
        return open_gguf(spec, device)
    if CT2Source.detect(spec):
        raise UnsupportedError(
            f"{source}: a CTranslate2 model cannot be run for attention maps here (weights only: use "
            "`attnscope geometry`); give the Hugging Face directory or hub id of the same model"
        )
    if ONNXSource.detect(spec) and not _has_hf_weights(Path(spec)):
        raise UnsupportedError(
            f"{source}: an ONNX graph cannot be run for attention maps here (weights only: use "
            "`attnscope geometry`); give the Hugging Face directory or hub id of the same model"
        )
    return None


def _has_hf_weights(path: Path) -> bool:
    """A directory holding PyTorch weights next to its config (an HF directory with an ONNX export too)."""
    if not path.is_dir() or not (path / "config.json").is_file():
        return False
    return any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))


def missing_gguf_runtime() -> list[str]:
    """The packages of :data:`GGUF_RUNTIME` that are not installed."""
    return [name for name in GGUF_RUNTIME if importlib.util.find_spec(name) is None]


def open_gguf(path: str | os.PathLike, device: str = "cpu") -> "MapModel":
    """Load a GGUF file with transformers (dequantised, eager attention) and wrap it as a MapModel."""
    from .maps import MapModel

    p = Path(path)
    missing = missing_gguf_runtime()
    if missing:
        raise UnsupportedError(f"{p}: running a GGUF file needs {', '.join(missing)}: {GGUF_FIX}")
    from attnscope.memory import release_free_memory

    model, tok = _load_gguf(p)
    release_free_memory()  # the loader's dequantisation buffers (about 0.9 GB for a 0.5B model)
    model = model.to(device)
    return MapModel.from_hf(model, tok, name=str(p))


def _load_gguf(p: Path, lm_head: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) from one GGUF file, progress bars and chatter of transformers silenced.

    ``lm_head``: keep the whole ``...ForCausalLM`` (its output matrix: the loss of
    :mod:`attnscope.interventions`) instead of the base model the maps need."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def load(cls: Any) -> tuple[Any, list[str]]:
        """(model, the names of its weights the file did not fill: left at random init by transformers)."""
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # its dequantisation bar is a bare tqdm
                model, info = cls.from_pretrained(str(p.parent), gguf_file=p.name, attn_implementation="eager",
                                                  trust_remote_code=False, output_loading_info=True)
        except Exception as exc:  # transformers raises ValueError/KeyError/... for architectures it cannot map
            raise UnsupportedError(f"{p}: transformers cannot load this GGUF file ({_first_line(exc)})") from None
        return model, [k for k in info.get("missing_keys", ()) if lm_head or not k.startswith("lm_head")]

    model, missing = load(AutoModelForCausalLM) if lm_head else load(AutoModel)
    if missing and not lm_head:  # transformers 4.x maps GGUF tensor names onto the ...ForCausalLM class only
        del model
        full, missing = load(AutoModelForCausalLM)
        model = full.base_model  # the head is dropped with ``full``
        del full
    if missing:
        n = len(missing)
        raise UnsupportedError(f"{p}: {n} weight{'s' if n != 1 else ''} of the model (e.g. {sorted(missing)[0]}) "
                               f"{'are' if n != 1 else 'is'} not filled from this GGUF file (missing from it, or named "
                               f"in a way transformers {transformers.__version__} does not map); its maps would come "
                               "from random weights")
    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    except Exception as exc:
        raise FormatError(f"{p}: the tokenizer in this GGUF file cannot be rebuilt ({_first_line(exc)})") from None
    return model.eval(), tok


def _first_line(exc: BaseException) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {msg[:200]}"
