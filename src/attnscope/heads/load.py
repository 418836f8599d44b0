"""Opening model FILES for attention maps: GGUF through transformers, weights-only formats refused.

:func:`open_runnable` is asked first by :func:`attnscope.heads.maps.open_model`. It returns a
:class:`~attnscope.heads.maps.MapModel` for a GGUF file (llama.cpp / Ollama), raises one line for a
source that has no runnable form here (CTranslate2, ONNX), and returns None for everything else (HF
directories, hub ids and attnscope checkpoints stay with ``open_model``).

A GGUF file is loaded with transformers' own GGUF support
(``AutoModel.from_pretrained(dir, gguf_file=name)``), which dequantises every tensor to float32 and
rebuilds the tokenizer from the file's vocabulary; the weights are therefore the file's quantised
values, not the original checkpoint's. transformers' GGUF reader holds the whole header in memory, so
the header is walked and checked first (:mod:`attnscope.sources.gguf_header`): a file whose counts,
lengths or offsets do not fit it is refused in one line before transformers opens it. Only the base
model is kept: attention maps never need the language-model head, whose [vocab, d_model] matrix (untied in many GGUF files) would add a second
embedding-sized float32 matrix (0.5 GB for Qwen2.5-0.5B) and a logits tensor per forward. (transformers
4.x fills only the ``...ForCausalLM`` class from a GGUF file: there the full model is loaded and its base
kept.) A weight the file did not fill is never left at random: that is a one-line refusal. transformers
needs the ``accelerate`` and ``gguf`` packages for this: the optional extra ``attnscope[gguf]``.

Before any model is built, a GGUF file or HF directory is checked with what loads in seconds:
:func:`check_weights` holds its config to its weights (:func:`attnscope.families.check_against_weights`:
a config that claims a million layers or zero heads is one line, not a hang or a raw error), and a
:class:`WindowPlan` holds the windows the run will ask for to the tokenizer (loaded first) and the
model's maximum length, so a corpus too short for ``windows x length`` is refused before the weights load.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from attnscope.errors import AttnscopeError, FormatError, InputError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .maps import MapModel

#: packages transformers needs to load a GGUF file (the ``gguf`` extra)
GGUF_RUNTIME = ("accelerate", "gguf")
GGUF_FIX = "pip install 'attnscope[gguf]'"


@dataclass(frozen=True)
class WindowPlan:
    """The windows a run will ask of a model, checked against its tokenizer and maximum length before its
    weights load (:meth:`check`); the same one-line refusals :func:`~attnscope.heads.maps.make_windows` and
    :func:`~attnscope.heads.probes.random_windows` give later, without the model load in front of them."""

    data: str | None = None  # corpus of the text windows (None: no text windows)
    windows: int = 1
    length: int | None = None  # tokens per text window; None: min(default_length, the model's maximum)
    default_length: int = 512
    random_length: int | None = None  # T of the random probe (2T + 1 tokens) when given

    def check(self, tokenizer: Any, max_len: int | None) -> None:
        """Refuse (InputError, one line) what cannot run: a window longer than ``max_len``, more text windows
        than the corpus's held-out split holds in ``tokenizer``'s tokens (counted as :func:`heldout_windows` counts)."""
        from attnscope.training.data import heldout_windows, open_corpus

        from .maps import _special_ids
        from .probes import check_random_length

        if self.random_length is not None:
            check_random_length(self.random_length, max_len)
        if self.data is None:
            return
        length = self.length
        if length is None:
            if max_len is None:
                return  # the model's default length is decided once it is loaded
            length = min(self.default_length, max_len)
        if max_len is not None and length > max_len:
            raise InputError(f"window length {length} is longer than the model's maximum {max_len}")
        body = length - 2 if {"cls", "sep"} <= set(_special_ids(tokenizer)) else length  # [CLS] + text + [SEP]
        if body < 1:  # a window with no room for text is refused by make_windows, naming the model
            return
        from .maps import HELDOUT_MAX_BYTES

        corpus = open_corpus(self.data)
        held_out = min(sum(hi - lo for lo, hi in corpus.ranges("valid")), HELDOUT_MAX_BYTES)  # bytes the windows use
        longest = _longest_token(tokenizer)
        if longest is not None and held_out // longest >= self.windows * body:
            return  # it surely holds enough tokens: a large corpus is not tokenized twice
        heldout_windows(corpus, tokenizer, body, self.windows, max_bytes=HELDOUT_MAX_BYTES)


def _longest_token(tokenizer: Any) -> int | None:
    """The most UTF-8 bytes of one vocabulary entry (so a text of B bytes holds at least B // it tokens, but
    for unknown-word tokens); None when the tokenizer does not list its vocabulary."""
    vocab = getattr(getattr(tokenizer, "tok", None), "get_vocab", None)
    if vocab is None:
        return None
    return max((len(t.encode("utf-8")) for t in vocab(with_added_tokens=False)), default=None) or None


def check_weights(open_source: Callable[[], Any], name: str) -> dict[str, Any]:
    """The config of the source ``open_source()`` opens, checked against its weights
    (:func:`attnscope.families.check_against_weights`); returns the config. A model that no family spec reads
    (only transformers knows it) is not checked here."""
    from attnscope.families import check_against_weights

    with open_source() as src:
        try:
            check_against_weights(src)
        except UnsupportedError:
            pass
        except AttnscopeError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise FormatError(f"{name}: its config and weights do not agree ({_first_line(exc)})") from None
        return dict(src.config)


def open_runnable(source: str | os.PathLike, device: str = "cpu", plan: WindowPlan | None = None) -> "MapModel | None":
    """A MapModel for a GGUF file; one-line refusal for CTranslate2 / ONNX; None for anything else."""
    from attnscope.sources.ctranslate2 import CT2Source
    from attnscope.sources.gguf import GGUFSource
    from attnscope.sources.onnxfile import ONNXSource

    spec = str(Path(str(source)).expanduser())
    if GGUFSource.detect(spec):
        return open_gguf(spec, device, plan)
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


def open_gguf(path: str | os.PathLike, device: str = "cpu", plan: WindowPlan | None = None) -> "MapModel":
    """Load a GGUF file with transformers (dequantised, eager attention) and wrap it as a MapModel; its config
    is checked against its weights, and ``plan`` against its tokenizer, before the weights load."""
    from attnscope.geometry.offsets import context_length
    from attnscope.sources.gguf import GGUFSource

    from .maps import MapModel

    p = Path(path)
    config = check_weights(lambda: GGUFSource.open(str(p)), str(p))
    missing = missing_gguf_runtime()
    if missing:
        raise UnsupportedError(f"{p}: running a GGUF file needs {', '.join(missing)}: {GGUF_FIX}")
    from attnscope.heap import release_free_memory

    model, tok = _load_gguf(p, None if plan is None else (lambda t: plan.check(t, context_length(config))))
    release_free_memory()  # the loader's dequantisation buffers (about 0.9 GB for a 0.5B model)
    model = model.to(device)
    return MapModel.from_hf(model, tok, name=str(p))


def _load_gguf(p: Path, before_weights: Callable[[Any], None] | None = None, lm_head: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) from one GGUF file, progress bars and chatter of transformers silenced; the tokenizer
    comes first, and ``before_weights(tokenizer)`` (training-lab interface) runs before the weights load.

    ``lm_head``: keep the whole ``...ForCausalLM`` (its output matrix: the loss of
    :mod:`attnscope.interventions`) instead of the base model the maps need."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    from attnscope.sources.gguf_header import read_gguf_header

    from .maps import _as_tokenizer

    if p.is_file():  # a token listed twice: refused before transformers rebuilds the tokenizer from the file
        read_gguf_header(p, keep=lambda key: False, unique_vocabulary=True)

    from attnscope.progress import phase

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        with phase(f"{p.name}: rebuilding its tokenizer (transformers)"):
            tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    except Exception as exc:
        raise FormatError(f"{p}: the tokenizer in this GGUF file cannot be rebuilt ({_first_line(exc)})") from None
    if before_weights is not None:
        before_weights(_as_tokenizer(tok, str(p)))

    def load(cls: Any) -> tuple[Any, list[str]]:
        """(model, the names of its weights the file did not fill: left at random init by transformers)."""
        try:  # its dequantisation bar is a bare tqdm: counted on attnscope's display instead (or silenced)
            with _conversion_progress(p.name) as hooked, \
                    (contextlib.nullcontext() if hooked else contextlib.redirect_stderr(io.StringIO())):
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
    return model.eval(), tok


@contextlib.contextmanager
def _conversion_progress(name: str) -> "Iterator[bool]":
    """transformers' loop over a GGUF file's tensors (dequantising each: most of a load's minute) counted on
    attnscope's progress display while it runs; yields whether the loop is hooked (a transformers without it:
    False, the caller silences its bar)."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield False
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield False
        return
    from attnscope.progress import phase

    def counted(iterable: Any, *args: Any, **kwargs: Any) -> "Iterator[Any]":
        items = iterable if hasattr(iterable, "__len__") else list(iterable)
        with phase(f"{name}: transformers dequantises its tensors", total=len(items), unit="tensors") as bar:
            for item in items:
                yield item
                bar.advance()

    gguf_utils.tqdm = counted
    try:
        yield True
    finally:
        gguf_utils.tqdm = original


def _first_line(exc: BaseException) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {msg[:200]}"
