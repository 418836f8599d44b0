"""Attention maps out of models, streamed layer by layer into per-head metrics.

Einstein legend: b batch (windows), h head, l layer, i/j query/key positions, L window length.

Two kinds of source:

* a Hugging Face model directory or hub id: loaded with ``attn_implementation="eager"`` (the only
  implementation that forms probabilities). A short probe forward finds the innermost modules whose
  output carries a [b, h, L, L] probability tensor (e.g. ``BertSelfAttention``); forward hooks on those
  hand each layer's map to the metrics as it is produced, so ``output_attentions`` (which would keep
  every layer's maps until the end of the forward) is never requested. Models where no such module
  is found fall back to ``output_attentions=True`` (all layers held at once: noted in the result).
* an attnscope checkpoint (a ``checkpoints/step-N`` directory, or a run directory: its latest
  checkpoint): the model's ``attn_callback`` hands over each layer's maps.

Either way, only ONE layer's maps for ONE batch of windows are alive at a time; per-window metric
values are kept (tiny) so means and spreads are exact. :func:`extract` is the whole pipeline.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from attnscope.errors import FormatError, InputError, OfflineError, UnsupportedError, check_type

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

    from .load import WindowPlan

LayerFn = Callable[[int, "torch.Tensor"], None]

_DECODER_ARCH_SUFFIXES = ("ForCausalLM", "LMHeadModel")
_ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert", "longformer")
_PROBE_LEN = 5  # tokens in the probe forward that finds the map-emitting modules
#: parameters a checkpoint may lack without changing any attention map (BERT's pooler comes after the last layer)
_NOT_ON_THE_MAP_PATH = ("pooler.",)
#: the longest window ``heads`` measures by default (:meth:`MapModel.default_length`), in tokens: 10 of them
#: fit the built-in corpus's held-out split with any tokenizer here (SmolLM2's holds 5869 tokens)
DEFAULT_MAX_WINDOW = 512
#: the default window of byte-level models, in bytes
DEFAULT_BYTE_WINDOW = 1024


@dataclass
class MapModel:
    """A model that can hand over its attention maps layer by layer."""

    name: str
    kind: str  # "hf" | "attnscope"
    n_layers: int
    n_heads: int
    causal: bool
    max_len: int | None
    tokenizer: Any  # attnscope.training.tokenizers interface (encode_array, name, vocab_size)
    byte_level: bool
    cls_id: int | None = None
    sep_id: int | None = None
    source: str = ""  # the path or id as given (``name`` is the canonical id); "" for a model loaded in memory
    streaming: bool = True  # False: HF fallback through output_attentions (all layers at once)
    _forward: Callable[["torch.Tensor", LayerFn], None] | None = field(default=None, repr=False)

    def run(self, idx: "torch.Tensor", on_layer: LayerFn) -> None:
        """Forward ``idx`` [b, L]; ``on_layer(layer, probs [b, h, L, L])`` is called once per layer."""
        import torch

        if self.max_len is not None and idx.shape[1] > self.max_len:
            raise InputError(f"window length {idx.shape[1]} is longer than the model's maximum {self.max_len}")
        from attnscope.heap import release_free_memory

        with torch.inference_mode():
            self._forward(idx, on_layer)
        release_free_memory()  # or the resident size drifts up by chance from window to window

    @classmethod
    def from_hf(cls, model: Any, tokenizer: Any, *, name: str | None = None) -> "MapModel":
        """A transformers model already loaded in memory, with its tokenizer (a transformers fast
        tokenizer, a ``tokenizers.Tokenizer``, or a ``tokenizer.json`` path / directory).

        The model stays where it is (its device) and as it is: each forward runs it in eval mode with
        eager attention (the only implementation that forms probabilities) and restores its own
        training flag and attention implementation afterwards.
        """
        return _from_loaded_hf(model, tokenizer, name)

    def default_length(self) -> int:
        """The window ``heads`` measures when not told: the model's maximum length, at most
        :data:`DEFAULT_MAX_WINDOW` tokens (a long-context model's full window would hold h x L x L maps per
        layer: 2.4 GB for 9 heads at 8192 tokens, and need a far longer corpus); byte models
        :data:`DEFAULT_BYTE_WINDOW` bytes."""
        if self.byte_level:
            return min(DEFAULT_BYTE_WINDOW, self.max_len or DEFAULT_BYTE_WINDOW)
        if self.max_len is None:
            raise InputError(f"{self.name}: the model does not say its maximum length; pass length", params="length")
        return min(DEFAULT_MAX_WINDOW, self.max_len)


# --------------------------------------------------------------------------- opening models


def _is_attnscope_dir(path: Path) -> Path | None:
    """The checkpoint directory for an attnscope checkpoint or run directory, else None."""
    import json

    cfg = path / "config.json"
    if cfg.is_file():
        try:
            mt = json.loads(cfg.read_text()).get("model_type")
        except (OSError, ValueError, AttributeError, RecursionError):  # not an attnscope config
            return None
        return path if mt == "attnscope" else None
    if (path / "checkpoints").is_dir():
        from attnscope.training.trainer import list_checkpoints

        ckpts = list_checkpoints(path)
        if not ckpts:
            raise InputError(f"{path}: run directory without checkpoints")
        return ckpts[-1][1]
    return None


def open_model(source: str | os.PathLike, device: str = "cpu", plan: "WindowPlan | None" = None) -> MapModel:
    """Open an attnscope checkpoint / run directory, a Hugging Face model directory / hub id (a zoo id:
    its installed copy), or a GGUF file. Its ``name`` is the canonical id (:func:`attnscope.naming.model_label`;
    an attnscope run: the run's name), its ``source`` the spec as given.

    A GGUF file or HF directory has its config checked against its weights, and ``plan`` (the windows the
    run will ask for) against its tokenizer, before its weights load (:mod:`attnscope.heads.load`).
    """
    from attnscope.naming import model_label
    from attnscope.zoo.registry import resolve_spec

    model = _open_spec(resolve_spec(source), device, plan)
    model.source = str(source)
    if model.kind != "attnscope":
        model.name = model_label(str(source))
    return model


def _open_spec(source: "str | os.PathLike", device: str, plan: "WindowPlan | None") -> MapModel:
    from attnscope.sources.base import check_local_path

    from .load import open_runnable

    check_local_path(str(source))  # unreadable, a FIFO or device, a missing x.gguf: one line, now
    path = Path(str(source)).expanduser()
    runnable = open_runnable(path, device, plan)  # GGUF files; CTranslate2 / ONNX refused in one line
    if runnable is not None:
        return runnable
    if path.is_dir():
        ckpt = _is_attnscope_dir(path)
        if ckpt is not None:
            return _open_attnscope(ckpt, device)
        if not (path / "config.json").is_file():
            raise InputError(f"{source}: neither a model directory (no config.json) nor an attnscope run")
        return _open_hf(str(path), path, device, plan)
    if path.exists():
        raise InputError(f"{source}: not a file attnscope can run (a model is a directory, a hub id or a GGUF file)")
    if str(source).startswith((".", "/", "~")) or str(source).count("/") > 1:
        raise InputError(f"{source}: no such file or directory")
    return _open_hf(str(source), _hub_dir(str(source)), device, plan)


def _hub_dir(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(
                repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]
            )
        )
    except Exception as exc:
        name = exc.__class__.__name__
        if "Offline" in name or "LocalEntryNotFound" in name or "Connection" in name:
            raise OfflineError(f"{repo_id}: not in the local Hugging Face cache and the hub is unreachable") from None
        raise InputError(f"{repo_id}: cannot fetch from the Hugging Face hub ({name})") from None


def _open_attnscope(ckpt: Path, device: str) -> MapModel:
    import json

    from attnscope.training.model import load_model
    from attnscope.training.tokenizers import load_tokenizer

    model, cfg = load_model(ckpt, device=device)
    raw = json.loads((ckpt / "config.json").read_text())
    if (ckpt / "tokenizer.json").is_file():
        tok = load_tokenizer(ckpt / "tokenizer.json")
    else:
        spec = raw.get("tokenizer") or ("bytes" if cfg.vocab_size == 256 else None)
        if spec is None:
            raise FormatError(f"{ckpt}: checkpoint does not say which tokenizer it was trained with")
        tok = load_tokenizer(spec)
    byte_level = getattr(tok, "name", "") == "bytes"

    def forward(idx: "torch.Tensor", on_layer: LayerFn) -> None:
        model(idx.to(device), attn_callback=on_layer)

    ids = _special_ids(tok)
    return MapModel(
        name=str(raw.get("run") or ckpt.name),
        kind="attnscope",
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        causal=bool(cfg.causal),
        max_len=cfg.max_seq_len,
        tokenizer=tok,
        byte_level=byte_level,
        cls_id=ids.get("cls"),
        sep_id=ids.get("sep"),
        _forward=forward,
    )


def _special_ids(tok: Any) -> dict[str, int]:
    inner = getattr(tok, "tok", None)
    out: dict[str, int] = {}
    if inner is None:
        return out
    for key, names in (("cls", ("[CLS]", "<s>")), ("sep", ("[SEP]", "</s>"))):
        for n in names:
            tid = inner.token_to_id(n)
            if tid is not None:
                out[key] = int(tid)
                break
    return out


def _max_len(config: Any) -> int | None:
    """The longest input a config (a transformers config or its dict) allows, in tokens; None when unstated."""
    def get(attr: str) -> Any:
        return config.get(attr) if isinstance(config, dict) else getattr(config, attr, None)

    for attr in ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_length"):
        val = get(attr)
        if isinstance(val, int) and not isinstance(val, bool) and val > 0:
            if attr == "max_position_embeddings" and get("model_type") in _ROBERTA_LIKE:
                val -= 2  # padding offset of RoBERTa-style position ids
            return val
    return None


def _open_hf(name: str, local: Path, device: str, plan: "WindowPlan | None" = None) -> MapModel:
    import transformers
    from transformers import AutoConfig, AutoModel

    from attnscope.training.tokenizers import load_tokenizer

    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:  # pragma: no cover - older transformers
        pass
    from attnscope.sources.hf import HFDirectorySource, check_indexes

    from .load import check_weights

    check_indexes(local)  # transformers would follow a shard name out of the folder
    raw = check_weights(lambda: HFDirectorySource.open(str(local), name=name), name)  # before transformers reads it
    try:
        tok = load_tokenizer(local)
    except Exception as exc:
        raise InputError(f"{name}: no usable tokenizer next to the model ({exc})") from None
    if plan is not None:
        plan.check(tok, _max_len(raw))
    try:
        config = AutoConfig.from_pretrained(str(local), trust_remote_code=False)
    except Exception as exc:
        raise FormatError(f"{name}: cannot read the model config ({exc.__class__.__name__})") from None
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedError(f"{name}: encoder-decoder models are not supported by `heads` yet (self-attention stacks only)")
    try:
        model, info = AutoModel.from_pretrained(str(local), attn_implementation="eager", trust_remote_code=False,
                                                output_loading_info=True)
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        if "eager" in msg or "attn_implementation" in msg:
            raise UnsupportedError(f"{name}: model cannot return attention maps (no eager attention): {msg}") from None
        if "ignore_mismatched_sizes" in msg:  # transformers' report went to a silenced log: say what it means
            raise FormatError(f"{name}: config.json does not fit the weights: some tensors of the checkpoint have "
                              "other shapes than config.json gives them (compare its vocab_size, hidden_size and "
                              "intermediate_size with the weights)") from None
        raise FormatError(f"{name}: cannot load the model ({exc.__class__.__name__}: {msg[:200]})") from None
    unfilled = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(_NOT_ON_THE_MAP_PATH))
    if unfilled:  # transformers initialises them at random and only logs it: maps would be of random weights
        raise FormatError(f"{name}: the checkpoint has no weights for {len(unfilled)} parameter(s) of "
                          f"{type(model).__name__} (e.g. {unfilled[0]}); its maps would come from random weights")
    model = model.to(device).eval()
    return _hf_map_model(name, model, tok, device)


def _hf_map_model(name: str, model: Any, tok: Any, device: "str | torch.device") -> MapModel:
    """Probe a loaded (eager-attention) HF model for the modules that emit maps; wrap it as a MapModel."""
    config = model.config
    ids = _special_ids(tok)
    inner, upper = _probe_map_modules(name, model, ids.get("cls", 0), device)
    causal = _declared_causal(model) or (bool(upper) and max(upper) == 0.0)  # a base decoder names no LM head
    if inner:
        forward, n_layers, streaming = _hooked_forward(model, inner, device), len(inner), True
    else:
        forward, n_layers, fallback_causal = _fallback_forward(name, model, ids.get("cls", 0), device)
        causal, streaming = causal or fallback_causal, False
    return MapModel(
        name=name,
        kind="hf",
        n_layers=n_layers,
        n_heads=int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0) or 0),
        causal=causal,
        max_len=_max_len(config),
        tokenizer=tok,
        byte_level=False,
        cls_id=ids.get("cls"),
        sep_id=ids.get("sep"),
        streaming=streaming,
        _forward=forward,
    )


def _declared_causal(model: Any) -> bool:
    """The config or class says decoder (``is_decoder``, a ``...ForCausalLM`` / ``...LMHeadModel``)."""
    config = model.config
    archs = [*(getattr(config, "architectures", None) or []), type(model).__name__]
    return bool(getattr(config, "is_decoder", False)) or any(a.endswith(_DECODER_ARCH_SUFFIXES) for a in archs)


def _probe_ids(first: int, vocab_size: int) -> "torch.Tensor":
    """The probe's [1, _PROBE_LEN] token ids: ``first`` (the [CLS] id where there is one), then small ids."""
    import torch

    probe = torch.full((1, _PROBE_LEN), first, dtype=torch.long)
    probe[0, 1:] = torch.arange(1, _PROBE_LEN) + (100 if vocab_size > 200 else 0)
    return probe


def _probe_map_modules(name: str, model: Any, first_id: int, device: Any) -> tuple[list[Any], list[float]]:
    """The innermost modules whose output carries a [b, h, t, t] probability tensor, in call order,
    and each hit's attention mass above the diagonal (0 everywhere for a causal model)."""
    import torch

    seen: list[Any] = []
    upper: list[float] = []

    def note(m: Any, i: Any, o: Any) -> None:
        probs = _probs_in(o, _PROBE_LEN)
        if probs is not None:
            seen.append(m)
            upper.append(float(torch.triu(probs.float(), diagonal=1).abs().sum()))

    handles = [mod.register_forward_hook(note) for mod in model.modules()]
    try:
        with torch.inference_mode():
            model(_probe_ids(first_id, model.config.vocab_size).to(device), output_attentions=False)
    except Exception as exc:
        if isinstance(exc, TypeError) and "output_attentions" in str(exc):  # transformers 4.x mamba: no such argument
            raise UnsupportedError(f"{name}: model cannot return attention maps (no output_attentions)") from None
        raise UnsupportedError(f"{name}: probe forward failed ({exc.__class__.__name__}: {str(exc)[:160]})") from None
    finally:
        for hd in handles:
            hd.remove()
    matched = set(map(id, seen))
    inner: list[Any] = []
    for m in seen:
        if any(id(c) in matched for c in m.modules() if c is not m):
            continue  # an outer module that only passes an inner module's maps on
        if all(m is not x for x in inner):
            inner.append(m)
    return inner, upper


def _hooked_forward(model: Any, inner: list[Any], device: Any) -> Callable[["torch.Tensor", LayerFn], None]:
    """A forward that hands each hooked module's maps to ``on_layer`` as the module produces them."""
    order = {id(m): li for li, m in enumerate(inner)}

    def forward(idx: "torch.Tensor", on_layer: LayerFn) -> None:
        hs = [
            m.register_forward_hook(lambda mod, i, o: on_layer(order[id(mod)], _probs_in(o, idx.shape[1])))
            for m in inner
        ]
        try:
            model(idx.to(device), output_attentions=False)
        finally:
            for h in hs:
                h.remove()

    return forward


def _fallback_forward(name: str, model: Any, first_id: int, device: Any) -> tuple[Callable[["torch.Tensor", LayerFn], None], int, bool]:
    """(forward, n_layers, causal-from-maps) through ``output_attentions=True`` (all layers at once)."""
    import torch

    try:
        with torch.inference_mode():
            out = model(_probe_ids(first_id, model.config.vocab_size).to(device), output_attentions=True)
    except Exception as exc:
        raise UnsupportedError(f"{name}: model cannot return attention maps ({exc.__class__.__name__})") from None
    atts = getattr(out, "attentions", None)
    if not atts or atts[0] is None:
        raise UnsupportedError(f"{name}: model cannot return attention maps (no eager attention probabilities)")
    causal = float(torch.triu(atts[0].float(), diagonal=1).abs().sum()) == 0.0

    def forward(idx: "torch.Tensor", on_layer: LayerFn) -> None:
        res = model(idx.to(device), output_attentions=True)
        for li, a in enumerate(res.attentions):
            on_layer(li, a)

    return forward, len(atts), causal


def _as_tokenizer(tokenizer: Any, name: str) -> Any:
    """A user's tokenizer in the training-lab interface (a copy: the user's own is never reconfigured)."""
    from tokenizers import Tokenizer as RustTokenizer

    from attnscope.training.tokenizers import ByteTokenizer, HFTokenizer, load_tokenizer

    if isinstance(tokenizer, (ByteTokenizer, HFTokenizer)):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    backend = tokenizer if isinstance(tokenizer, RustTokenizer) else getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, RustTokenizer):
        raise InputError(
            f"{name}: tokenizer must be a transformers fast tokenizer, a tokenizers.Tokenizer or a tokenizer.json "
            f"path, not {type(tokenizer).__name__}"
        )
    return HFTokenizer(RustTokenizer.from_str(backend.to_str()), name)


@contextmanager
def _eager_eval(model: Any) -> Iterator[None]:
    """Run ``model`` in eval mode with eager attention; put back its mode and implementation after."""
    training = model.training
    impl = getattr(model.config, "_attn_implementation", None)
    switch = impl not in (None, "eager")
    if switch:
        try:
            model.set_attn_implementation("eager")
        except Exception as exc:
            msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            raise UnsupportedError(f"model cannot return attention maps (no eager attention): {msg[:160]}") from None
    model.eval()
    try:
        yield
    finally:
        model.train(training)
        if switch:
            model.set_attn_implementation(impl)


def _from_loaded_hf(model: Any, tokenizer: Any, name: str | None) -> MapModel:
    import torch

    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not hasattr(config, "to_dict"):
        raise InputError(f"expected a loaded transformers model (torch module with .config), not {type(model).__name__}")
    name = name or str(getattr(config, "_name_or_path", "") or f"<{type(model).__name__}>")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedError(f"{name}: encoder-decoder models are not supported by `heads` yet (self-attention stacks only)")
    tok = _as_tokenizer(tokenizer, name)
    device = next(model.parameters()).device
    with _eager_eval(model):
        mm = _hf_map_model(name, model, tok, device)
    inner = mm._forward

    def forward(idx: "torch.Tensor", on_layer: LayerFn) -> None:
        with _eager_eval(model):
            inner(idx, on_layer)

    mm._forward = forward
    return mm


def _probs_in(out: Any, t: int) -> "torch.Tensor | None":
    """The first [b, h, t, t] tensor in a module output whose rows sum to 1, else None."""
    import torch

    items = out if isinstance(out, (tuple, list)) else (out,)
    for o in items:
        if isinstance(o, torch.Tensor) and o.dim() == 4 and o.shape[-1] == t and o.shape[-2] == t:
            if o.is_floating_point() and torch.allclose(o.sum(-1), torch.ones((), dtype=o.dtype), atol=1e-3):
                return o
    return None


# --------------------------------------------------------------------------- windows


#: the most bytes of a corpus split that heads and atlas tokenise for their windows (memory stays bounded by
#: it, not by the corpus: a 3 GB text file took 16 GB; above enwik8's 5 MB held-out split); a larger split gives
#: its windows from this prefix
HELDOUT_MAX_BYTES = 8 << 20


def window_corpora(corpus: str, n: int) -> list[str]:
    """The corpus of each of ``n`` windows of ``corpus`` (one name, or several joined by commas taking turns)."""
    names = [c.strip() for c in str(corpus).split(",") if c.strip()] or [str(corpus)]
    return [names[w % len(names)] for w in range(n)]


def make_windows(model: MapModel, corpus: str, n: int, length: int, split: str = "valid") -> "torch.Tensor":
    """``n`` held-out windows [n, length] tokenised with the model's tokenizer (from at most the first
    :data:`HELDOUT_MAX_BYTES` of the split). Several corpora joined by commas (``"builtin,builtin-code"``:
    prose and code) share the windows in turn: window w from corpus w mod k (:func:`window_corpora`).

    For models whose tokenizer has [CLS]/[SEP] (BERT-style encoders) each window is
    ``[CLS] + (length - 2) corpus tokens + [SEP]``, the input such models were trained on.
    """
    import torch

    from attnscope.training.data import heldout_windows, open_corpus

    if n < 1:
        raise InputError(f"windows must be at least 1, not {n}", params="windows")
    if length < 2:
        raise InputError(f"length must be at least 2, not {length}", params="length")
    if model.max_len is not None and length > model.max_len:
        raise InputError(f"window length {length} is longer than the model's maximum {model.max_len}")
    wrap = model.kind == "hf" and model.cls_id is not None and model.sep_id is not None and not model.causal
    if wrap and length < 3:
        raise InputError(f"length must be at least 3 for {model.name}, whose windows are [CLS] + text + [SEP], "
                         f"not {length}", params="length")
    names = window_corpora(corpus, n)
    parts = []
    for name in dict.fromkeys(names):
        corp = open_corpus(name)
        parts.append(heldout_windows(corp, model.tokenizer, length - 2 if wrap else length, names.count(name),
                                     split=split, max_bytes=HELDOUT_MAX_BYTES))
    order = [i for name in dict.fromkeys(names) for i, other in enumerate(names) if other == name]
    body = torch.cat(parts)[torch.argsort(torch.tensor(order))] if len(parts) > 1 else parts[0]
    if len(body) == 0 or body.shape[1] == 0:
        raise InputError(f"corpus {corpus!r} gives no tokens in its {split} split")
    if wrap:
        cls = torch.full((n, 1), model.cls_id, dtype=torch.long)
        sep = torch.full((n, 1), model.sep_id, dtype=torch.long)
        body = torch.cat([cls, body, sep], dim=1)
    return body


# --------------------------------------------------------------------------- the pipeline


@dataclass
class HeadsResult:
    """What :func:`extract` returns: tidy tables (and a few example maps for figures)."""

    metrics: "pd.DataFrame"  # one row per (layer, head): metric means and <metric>_std
    js: "pd.DataFrame | None" = None  # head-to-head JS divergences (layer_a, head_a, layer_b, head_b, js)
    examples: dict[int, Any] = field(default_factory=dict)  # layer -> [h, L, L] maps of window 0
    info: dict[str, Any] = field(default_factory=dict)


def extract(
    source: "str | MapModel | Any",
    data: str = "builtin",
    windows: int = 10,
    length: int | None = None,
    batch_size: int = 1,
    js_rows: int = 0,
    example_layers: tuple[int, ...] = (),
    example_len: int = 128,
    progress: bool = False,
    device: str = "cpu",
    tokenizer: Any = None,
) -> HeadsResult:
    """Stream the held-out windows of ``data`` through ``source`` and measure every head.

    ``js_rows > 0`` also keeps that many (evenly spaced) query rows of window 0 for every head and
    returns head-to-head Jensen-Shannon divergences (Clark et al. 2019). ``example_layers`` keeps the
    top-left ``example_len`` x ``example_len`` corner of window 0's maps of those layers (for figures).
    ``source`` may also be a transformers model loaded in memory, with ``tokenizer=`` (see
    :meth:`MapModel.from_hf`; it runs on the model's own device, ``device`` is not used then).
    """
    check_extract_args(windows, length, batch_size, js_rows)
    model = resolve_model(source, tokenizer, device, plan=window_plan(data, windows, length))
    length = model.default_length() if length is None else length
    idx = make_windows(model, data, windows, length)  # [n, L]
    sink = _LayerSink(model, n_windows=len(idx), length=length, js_rows=js_rows,
                      example_layers=tuple(example_layers), example_len=example_len)
    _stream(model, idx, batch_size, sink, progress)
    info = {
        "model": model.name,
        "source": model.source or model.name,
        "kind": model.kind,
        "causal": model.causal,
        "windows": int(len(idx)),
        "length": int(length),
        "streaming": model.streaming,
        "n_layers": model.n_layers,
        "n_heads": model.n_heads,
    }
    return HeadsResult(metrics=sink.metrics_table(), js=sink.js_table(), examples=sink.examples, info=info)


def window_plan(data: str, windows: int, length: int | None) -> "WindowPlan":
    """The text windows of :func:`extract` (and `attnscope heads`), to be checked before a model's weights load."""
    from .load import WindowPlan

    return WindowPlan(data=data, windows=windows, length=length, default_length=DEFAULT_MAX_WINDOW)


def check_extract_args(windows: int, length: int | None, batch_size: int, js_rows: int) -> None:
    """Types and ranges of :func:`extract`'s options (one line naming the parameter), before any model loads."""
    import numpy as np

    for name, value in (("batch_size", batch_size), ("windows", windows), ("js_rows", js_rows)):
        check_type(value, (int, np.integer), name, "a whole number")
    if length is not None:
        check_type(length, (int, np.integer), "length", "a whole number of tokens")
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, not {batch_size}", params="batch_size")
    if windows < 1:
        raise InputError(f"windows must be at least 1, not {windows}", params="windows")
    if length is not None and length < 2:
        raise InputError(f"length must be at least 2, not {length}", params="length")
    if js_rows < 0:
        raise InputError(f"js_rows must be at least 0, not {js_rows}", params="js_rows")


def resolve_model(source: Any, tokenizer: Any, device: str, plan: "WindowPlan | None" = None) -> MapModel:
    """A MapModel from what :func:`extract` was given (a MapModel, a path / hub id, a loaded model); ``plan``
    is checked before a path's weights load (see :func:`open_model`), and so is ``device`` (a name torch accepts, a
    device this machine has)."""
    from attnscope.devices import check_device

    check_device(device)
    if isinstance(source, MapModel):
        return source
    if isinstance(source, (str, os.PathLike)):
        if tokenizer is not None:
            raise InputError(f"{source}: tokenizer= is for a model loaded in memory; a directory brings its own")
        return open_model(source, device=device, plan=plan)
    if tokenizer is None:
        raise InputError(f"a loaded {type(source).__name__} needs tokenizer= (its transformers tokenizer)")
    return MapModel.from_hf(source, tokenizer)


def _stream(model: MapModel, idx: "torch.Tensor", batch_size: int, sink: "_LayerSink", progress: bool) -> None:
    """Forward ``idx`` [n, L] batch by batch; every layer's maps go to ``sink`` and are dropped."""
    from attnscope.progress import progress as progress_bar

    with progress_bar(len(idx), f"heads {model.name}", enabled=progress, unit="windows") as bar:
        for b0 in range(0, len(idx), batch_size):
            batch = idx[b0 : b0 + batch_size]
            sink.start_batch(b0, batch)
            model.run(batch, sink.on_layer)
            bar.advance(len(batch))
    if not sink.values:
        raise UnsupportedError(f"{model.name}: the model produced no attention maps")


class _LayerSink:
    """Receives one layer's maps at a time and keeps only per-(window, head) metric values.

    The values go into arrays allocated once per layer ([n_windows, h] float64 per metric), never
    into a growing list of small arrays: small objects kept between the layers' large temporaries
    pin the allocator's heap, so the process would grow by tens of MB per layer (measured: 2.4 GB
    instead of ~0.6 GB for MiniLM, 10 windows x 512; ``benchmarks/heads_memory.py``).
    """

    def __init__(self, model: MapModel, n_windows: int, length: int, js_rows: int,
                 example_layers: tuple[int, ...], example_len: int) -> None:
        import torch

        self.model, self.n_windows, self.length = model, n_windows, length
        self.example_layers, self.example_len = example_layers, example_len
        self.rows_sel = (
            torch.linspace(0, length - 1, steps=max(1, min(js_rows, length))).round().long() if js_rows else None
        )
        self.values: dict[int, dict[str, Any]] = {}  # layer -> metric -> [n_windows, h]
        self.js_keep: dict[int, "torch.Tensor"] = {}  # layer -> [h, r, L] rows of window 0
        self.examples: dict[int, Any] = {}  # layer -> [h, e, e] corner of window 0
        self.b0, self.tok = 0, None

    def start_batch(self, b0: int, tok: "torch.Tensor") -> None:
        self.b0, self.tok = b0, tok

    def on_layer(self, layer: int, probs: "torch.Tensor | None") -> None:
        """probs [b, h, L, L] of ``layer`` for the current batch."""
        import numpy as np

        from .metrics import METRICS, window_metrics

        m = self.model
        if probs is None:
            raise UnsupportedError(f"{m.name}: layer {layer} returned no attention probabilities")
        vals = window_metrics(probs, m.causal, token_ids=self.tok, cls_id=m.cls_id, sep_id=m.sep_id)
        if layer not in self.values:
            h = probs.shape[1]
            self.values[layer] = {k: np.full((self.n_windows, h), np.nan) for k in METRICS}
        store, b = self.values[layer], probs.shape[0]
        for k, v in vals.items():
            store[k][self.b0 : self.b0 + b] = v.cpu().numpy()
        if self.b0 == 0:
            self._keep_window0(layer, probs)

    def _keep_window0(self, layer: int, probs: "torch.Tensor") -> None:
        if self.rows_sel is not None:
            self.js_keep[layer] = probs[0][:, self.rows_sel].float().cpu().clone()  # [h, r, L]
        if layer in self.example_layers:
            e = self.example_len
            self.examples[layer] = probs[0, :, :e, :e].float().cpu().numpy().copy()

    def metrics_table(self) -> "pd.DataFrame":
        """One row per (layer, head): the means and spreads over windows."""
        import pandas as pd

        from .metrics import METRICS, summarize_windows

        m = self.model
        frames = [summarize_windows(self.values[layer], layer=layer) for layer in sorted(self.values)]
        df = pd.concat(frames, ignore_index=True)
        df.insert(0, "model", m.name)
        df.insert(1, "source", m.source or m.name)
        df.insert(2, "stack", "decoder" if m.causal else "encoder")
        df["causal"] = m.causal
        df["length"] = self.length
        ordered = ["model", "source", "stack", "layer", "head", "n_windows", *METRICS, *[f"{k}_std" for k in METRICS],
                   "causal", "length"]
        return df[[c for c in ordered if c in df.columns]]

    def js_table(self) -> "pd.DataFrame | None":
        """Head-to-head JS divergences on window 0's kept rows (None without ``js_rows``)."""
        import numpy as np
        import pandas as pd
        import torch

        from .metrics import pairwise_js

        if not self.js_keep:
            return None
        layers = sorted(self.js_keep)
        rows = torch.cat([self.js_keep[l] for l in layers], dim=0)  # [(l h), r, L]
        labels = [(l, h) for l in layers for h in range(self.js_keep[l].shape[0])]
        D = pairwise_js(rows.to(torch.float64)).numpy()
        a, b = np.triu_indices(len(labels), k=1)
        js_df = pd.DataFrame(
            {
                "layer_a": [labels[x][0] for x in a],
                "head_a": [labels[x][1] for x in a],
                "layer_b": [labels[x][0] for x in b],
                "head_b": [labels[x][1] for x in b],
                "js": D[a, b],
            }
        )
        js_df.insert(0, "source", self.model.source or self.model.name)
        js_df.insert(0, "model", self.model.name)
        return js_df
