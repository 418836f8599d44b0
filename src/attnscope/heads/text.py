"""A head's attention on real text, token by token: the weights behind the head view.

Einstein legend: b window, h head, i/j query/key position, L window length, k keys kept per query, W windows.

* :func:`text_weights` -- one head's (or one layer's heads') exact weights on a user's own text (``text=``
  or token ids): a tidy table, one row per (window, query, key) a query can see (causal: keys up to the
  query), with the tokens as people read them (:mod:`attnscope.heads.tokens`).
* :class:`TextViews` -- what the atlas keeps of its held-out text windows for the head view: the first
  :data:`VIEW_WINDOWS` windows' token ids and, per head, each query's top-``k`` keys and their weights
  (``k`` chosen by :func:`choose_k` so that the page stays within :data:`VIEW_BYTES`; every key where a row
  has no more than ``k`` of them, so exact there), the attention mass each token receives and the
  mean attention distance. It is filled one layer at a time while the windows stream
  (:func:`attnscope.heads.probes.measure_windows`' ``views=``): the run's memory grows by the kept views only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attnscope.errors import ArgumentTypeError, InputError, check_type

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

    from .maps import MapModel

#: text windows the atlas keeps per head for its head view
VIEW_WINDOWS = 4
#: the page bytes the kept views may take (each kept key: a 16-bit position and a 16-bit weight, base64)
VIEW_BYTES = 16_000_000
#: page bytes per kept (query, key) entry: 4 bytes as base64
ENTRY_BYTES = 16 / 3
#: tidy columns of :func:`text_weights` and :meth:`TextViews.table`
COLUMNS = ("layer", "head", "window", "query", "key", "query_token", "key_token", "weight")


def choose_k(n_heads: int, windows: int, length: int, budget: float = VIEW_BYTES) -> int:
    """Keys kept per query so that ``n_heads`` x ``windows`` x ``length`` queries fit ``budget`` page bytes:
    at least 1, at most ``length`` (every key: exact)."""
    per_k = max(1, n_heads * windows * length) * ENTRY_BYTES
    return int(max(1, min(length, budget // per_k)))


@dataclass
class TextViews:
    """Per head, the top-``k`` keys of every query of a few text windows (see the module docstring)."""

    ids: np.ndarray  # [W, L] token ids
    k: int
    causal: bool
    labels: list[list[str]] = field(default_factory=list)  # [W][L] readable token labels (visible whitespace)
    texts: list[list[str]] = field(default_factory=list)  # [W][L] the text each token stands for
    special: list[list[bool]] = field(default_factory=list)  # [W][L] True for special tokens ([CLS], <s>)
    keys: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [h, W, L, k] int16, -1 = none
    weights: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [h, W, L, k] float32
    received: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [h, W, L] sum over queries
    distance: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [h, W] mean over queries
    info: dict[str, Any] = field(default_factory=dict)  # data, probe: where the windows came from
    #: (distinct labels, each token's index into them): :meth:`top_tokens`' pooling, made once
    _codes: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def n_windows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def length(self) -> int:
        return int(self.ids.shape[1])

    @property
    def exact(self) -> bool:
        """True when every key of every row is kept."""
        return self.k >= self.length

    @property
    def heads(self) -> list[tuple[int, int]]:
        return [(layer, h) for layer in sorted(self.keys) for h in range(self.keys[layer].shape[0])]

    def nbytes(self) -> int:
        """Memory the views hold."""
        arrays = [*self.keys.values(), *self.weights.values(), *self.received.values(), *self.distance.values()]
        return int(self.ids.nbytes + sum(a.nbytes for a in arrays))

    def on_layer(self, layer: int, b0: int, probs: "torch.Tensor") -> None:
        """Keep what the view needs of ``probs`` [b, h, L, L] (windows ``b0`` .. ``b0 + b - 1``) of ``layer``."""
        import torch

        W, L = self.n_windows, self.length
        take = min(probs.shape[0], W - b0)
        if take <= 0:
            return
        p = probs[:take].float()  # [b, h, L, L]
        h = p.shape[1]
        if layer not in self.keys:
            k = min(self.k, L)
            self.keys[layer] = np.full((h, W, L, k), -1, dtype=np.int16)
            self.weights[layer] = np.zeros((h, W, L, k), dtype=np.float32)
            self.received[layer] = np.zeros((h, W, L), dtype=np.float32)
            self.distance[layer] = np.zeros((h, W), dtype=np.float32)
        k = self.keys[layer].shape[-1]
        w, j = torch.topk(p, k, dim=-1)  # [b, h, L, k]
        if self.causal:  # a key after its query carries no weight: not a key of the row at all
            j = torch.where(j > torch.arange(L, device=j.device)[:, None], torch.full_like(j, -1), j)
            w = torch.where(j < 0, torch.zeros_like(w), w)
        sl = slice(b0, b0 + take)
        self.keys[layer][:, sl] = j.transpose(0, 1).to(torch.int16).cpu().numpy()
        self.weights[layer][:, sl] = w.transpose(0, 1).cpu().numpy()
        self.received[layer][:, sl] = p.sum(-2).transpose(0, 1).cpu().numpy()
        pos = torch.arange(L, device=p.device, dtype=p.dtype)
        dist = (p * (pos[:, None] - pos[None, :]).abs()).sum(-1).mean(-1)  # [b, h]
        self.distance[layer][:, sl] = dist.transpose(0, 1).cpu().numpy()

    def name_tokens(self, tokenizer: Any) -> None:
        """Fill :attr:`labels` and :attr:`texts` from the windows' ids."""
        from .tokens import special_mask, token_texts, visible

        self.texts = [token_texts(tokenizer, row) for row in self.ids.tolist()]
        self.special = [special_mask(tokenizer, row) for row in self.ids.tolist()]
        self._codes = None  # the labels changed: pooled anew by top_tokens
        self.labels = [[visible(t) or "\u2205" for t in row] for row in self.texts]

    def check_head(self, layer: int, head: int) -> None:
        check_type(layer, Integral, "layer", "a layer index")
        check_type(head, Integral, "head", "a head index")
        if layer not in self.keys:
            raise InputError(f"layer must be one of {sorted(self.keys)[0]}..{sorted(self.keys)[-1]}, not {layer}",
                             params="layer")
        n = self.keys[layer].shape[0]
        if not 0 <= head < n:
            raise InputError(f"head must be 0..{n - 1}, not {head}", params="head")

    def table(self, layer: int, head: int) -> "pd.DataFrame":
        """The kept weights of one head as a tidy table (:data:`COLUMNS`): every kept (window, query, key);
        a query's weights not kept (``k`` < its keys) sum to one minus the row's total."""
        self.check_head(layer, head)
        keys, weights = self.keys[layer][head], self.weights[layer][head]  # [W, L, k]
        win, q, _ = np.nonzero(keys >= 0)
        key = keys[keys >= 0].astype(np.int64)
        return _tidy(layer, head, win, q, key, weights[keys >= 0], self.labels)

    def top_tokens(self, layer: int, head: int, n: int = 8) -> list[tuple[str, float, int]]:
        """The ``n`` tokens that receive the most of the head's attention over the kept windows: (label, share
        of all its attention, occurrences), most first. Occurrences of one token text are pooled."""
        self.check_head(layer, head)
        names, codes = self._label_codes()
        got = self.received[layer][head].ravel()  # [W * L]
        mass = np.bincount(codes, weights=got, minlength=len(names))
        count = np.bincount(codes, minlength=len(names))
        total = float(got.sum()) or 1.0
        best = np.argsort(-mass, kind="stable")[:n]
        return [(str(names[i]), float(mass[i]) / total, int(count[i])) for i in best]

    def _label_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct labels, each token's index into them [W * L]), computed once."""
        if self._codes is None:
            flat = np.asarray([lab for row in self.labels for lab in row], dtype=object)
            names, codes = np.unique(flat.astype(str), return_inverse=True)
            self._codes = (names, codes.ravel())
        return self._codes

    def mean_distance(self, layer: int, head: int) -> float:
        """Mean over the kept windows' queries of sum_j A_ij |i - j| (tokens)."""
        self.check_head(layer, head)
        return float(self.distance[layer][head].mean())


def _tidy(layer: int, head: int, win: np.ndarray, q: np.ndarray, key: np.ndarray, weight: np.ndarray,
          labels: Sequence[Sequence[str]]) -> "pd.DataFrame":
    import pandas as pd

    lab = np.empty((len(labels), len(labels[0]) if len(labels) else 0), dtype=object)  # [W, L] (rows of one length)
    lab[:] = [list(row) for row in labels]
    qt, kt = lab[win, q], lab[win, key]
    n = len(win)
    return pd.DataFrame({"layer": np.full(n, layer, dtype=np.int64), "head": np.full(n, head, dtype=np.int64),
                         "window": win.astype(np.int64), "query": q.astype(np.int64), "key": key.astype(np.int64),
                         "query_token": qt, "key_token": kt, "weight": weight.astype(np.float64)})


def check_text_args(text: str | None, ids: Any, length: int | None) -> None:
    """What :func:`text_ids` can check without the model, so that it fails before a load: one of ``text`` / ``ids``,
    ``text`` a string of characters (a lone surrogate is none: one line naming its position), ``ids`` integers in
    one or two dimensions, ``length`` a whole number >= 1."""
    if (text is None) == (ids is None):
        raise InputError("give text= or ids= (one of them)", params="text")
    if text is not None:
        check_type(text, str, "text", "a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"text holds a lone surrogate {text[exc.start]!r} at character {exc.start} (half of a "
                             "UTF-16 pair, no character): fix the text's decoding", params="text") from None
    else:
        try:
            seq = np.asarray(ids)
        except Exception:  # noqa: BLE001 -- ragged lists
            raise ArgumentTypeError("ids must be a sequence of token ids or a 2-D array of windows", params="ids") from None
        if seq.size == 0:
            raise InputError("ids is empty", params="ids")
        if seq.dtype.kind not in "iu" or seq.ndim not in (1, 2):
            raise ArgumentTypeError(f"ids must be integer token ids (1-D) or windows (2-D), not {seq.dtype} of "
                                    f"{seq.ndim} dimension(s)", params="ids")
        if seq.min() < 0:
            raise InputError(f"ids must be token ids >= 0, not {int(seq.min())}", params="ids")
    if length is not None:
        check_type(length, Integral, "length", "a whole number of tokens")
        if length < 1:
            raise InputError(f"length must be at least 1, not {length}", params="length")


def text_ids(model: "MapModel", text: str | None, ids: Any, length: int | None) -> list[np.ndarray]:
    """The windows (1-D id arrays) a user's ``text`` (tokenised by the model's tokenizer) or ``ids`` make: a 1-D
    sequence is cut into windows of ``length`` tokens (default: all of it, up to the model's maximum; the last
    window may be shorter and is then run on its own); a 2-D array is taken as windows. BERT-style encoders
    get [CLS] ... [SEP] around each window cut from ``text``."""
    check_text_args(text, ids, length)
    wrap = False
    if text is not None:
        seq = np.asarray(model.tokenizer.encode(text), dtype=np.int64)
        wrap = model.kind == "hf" and model.cls_id is not None and model.sep_id is not None and not model.causal
    else:
        try:
            seq = np.asarray(ids)
        except Exception:  # noqa: BLE001 -- ragged lists
            raise ArgumentTypeError("ids must be a sequence of token ids or a 2-D array of windows", params="ids") from None
        if seq.dtype.kind not in "iu" or seq.ndim not in (1, 2):
            raise ArgumentTypeError(f"ids must be integer token ids (1-D) or windows (2-D), not {seq.dtype} of "
                                    f"{seq.ndim} dimension(s)", params="ids")
        if seq.size and (seq.min() < 0 or seq.max() >= int(model.tokenizer.vocab_size)):
            raise InputError(f"ids must lie in 0..{int(model.tokenizer.vocab_size) - 1} (the vocabulary)", params="ids")
    if seq.size == 0:
        raise InputError("the text gives no tokens" if text is not None else "ids is empty", params="text" if text is not None else "ids")
    if length is not None:
        check_type(length, Integral, "length", "a whole number of tokens")
        if length < 1:
            raise InputError(f"length must be at least 1, not {length}", params="length")
    if seq.ndim == 2:
        return list(seq.astype(np.int64))
    room = (model.max_len or len(seq) + 2) - (2 if wrap else 0)
    step = min(length or room, room)
    if model.max_len is not None and length is not None and length + (2 if wrap else 0) > model.max_len:
        raise InputError(f"length {length} is longer than the model's maximum {model.max_len}", params="length")
    pieces = [seq[s : s + step] for s in range(0, len(seq), step)]
    if wrap:
        pieces = [np.concatenate([[model.cls_id], p, [model.sep_id]]) for p in pieces]
    return pieces


def text_weights(
    source: Any,
    layer: int,
    head: int | None = None,
    *,
    text: str | None = None,
    ids: Any = None,
    length: int | None = None,
    tokenizer: Any = None,
    device: str = "cpu",
) -> "pd.DataFrame":
    """One head's attention weights on your own text: a tidy table with columns :data:`COLUMNS`.

    ``source``: a model path / hub id / GGUF file, a :class:`~attnscope.heads.maps.MapModel`, or a loaded
    transformers model with ``tokenizer=``. ``text`` is tokenised by the model's tokenizer; ``ids`` are token
    ids (1-D: cut into windows of ``length``; 2-D: one window per row). ``head=None``: every head of ``layer``.
    One row per (window, query, key) the query can see (causal models: keys up to the query), exact weights;
    ``query_token`` / ``key_token`` are readable labels (:func:`attnscope.heads.tokens.token_labels`).
    """
    import pandas as pd

    from .maps import resolve_model

    check_type(layer, Integral, "layer", "a layer index")
    if head is not None:
        check_type(head, Integral, "head", "a head index")
    check_text_args(text, ids, length)  # and the device (resolve_model): all before the model loads
    model = resolve_model(source, tokenizer, device)
    if not 0 <= layer < model.n_layers:
        raise InputError(f"layer must be 0..{model.n_layers - 1}, not {layer}", params="layer")
    if head is not None and not 0 <= head < model.n_heads:
        raise InputError(f"head must be 0..{model.n_heads - 1}, not {head}", params="head")
    import torch

    windows = text_ids(model, text, ids, length)
    got: dict[str, np.ndarray] = {}

    def keep(at: int, probs: "torch.Tensor") -> None:  # probs [1, h, L, L]
        if at == layer:
            got["a"] = probs[0].float().cpu().numpy()

    frames = []
    for w, row in enumerate(windows):
        labels = [_labels(model.tokenizer, row)]
        model.run(torch.as_tensor(np.asarray(row, dtype=np.int64))[None], keep)
        a = got.pop("a")  # [h, L, L]
        L = a.shape[-1]
        qi, kj = np.nonzero(np.tril(np.ones((L, L), dtype=bool)) if model.causal else np.ones((L, L), dtype=bool))
        for h in range(a.shape[0]) if head is None else [head]:
            frames.append(_tidy(layer, h, np.full(len(qi), 0), qi, kj, a[h][qi, kj], labels).assign(window=w))
    return pd.concat(frames, ignore_index=True)


def _labels(tokenizer: Any, row: Any) -> list[str]:
    from .tokens import token_labels

    return token_labels(tokenizer, np.asarray(row).tolist())
