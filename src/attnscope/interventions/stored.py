"""What a run keeps in its results store and reads back: the keys of a layer's rows and per-token rows, the
screen's per-window rows as one stored table, the per-window deltas behind the table's means, and the per-token
table of the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .exact import _token_frame
from .subject import Subject

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch


#: the results store's key of the screen's per-window rows
_SCREEN_KEY = "screen"


def _screen_record(rows: "pd.DataFrame", patterns: "pd.DataFrame") -> "pd.DataFrame":
    """The screen's per-window rows and pattern changes as one stored table (pattern changes as rows of
    measure ``pattern_change``, in ``delta``)."""
    import pandas as pd

    pat = patterns.rename(columns={"pattern_change": "delta", "output_change": "value"}).assign(
        measure="pattern_change", clean=np.nan)  # (output_change rides in value)
    return pd.concat([rows, pat[rows.columns]], ignore_index=True)


def _stored_screen(results: Any) -> tuple["pd.DataFrame | None", "pd.DataFrame | None"]:
    """The stored screen of a resumed run as (rows, pattern changes), or (None, None)."""
    if results is None or not results.is_done(_SCREEN_KEY):
        return None, None
    df = results.read(_SCREEN_KEY)
    pat = df["measure"] == "pattern_change"
    patterns = df[pat].rename(columns={"delta": "pattern_change", "value": "output_change"})[
        ["layer", "head", "intervention", "window", "pattern_change", "output_change"]]
    return df[~pat].reset_index(drop=True), patterns.reset_index(drop=True)


def _key(layer: int, heads: Sequence[int]) -> str:
    return f"layer={layer};heads={','.join(map(str, heads))}"


def _token_key(layer: int, heads: Sequence[int]) -> str:
    return f"tokens;{_key(layer, heads)}"


def _per_window(screen_rows: "pd.DataFrame", token_frames: "list[pd.DataFrame]") -> "pd.DataFrame":
    """The per-window deltas behind the table's means: the behaviour rows as the screen measured them (exact), and
    each exactly measured head's loss change per window (the mean of its per-position changes)."""
    import pandas as pd

    cols = ["layer", "head", "intervention", "measure", "window", "delta"]
    parts = [screen_rows.loc[screen_rows["measure"] != "loss", cols]]
    tokens = [f for f in token_frames if len(f)]
    if tokens:
        per = (pd.concat(tokens, ignore_index=True).groupby(["layer", "head", "intervention", "window"], as_index=False)
               ["delta_loss"].mean().rename(columns={"delta_loss": "delta"}).assign(measure="loss"))
        parts.append(per[cols])
    return pd.concat(parts, ignore_index=True)


def _token_effects(subject: Subject, text: "torch.Tensor", frames: list["pd.DataFrame"]) -> "pd.DataFrame":
    """The layers' per-position changes in loss -> :attr:`InterventionResult.token_effects` (model first, the
    token's text beside its position; text [w, i] the text windows' ids)."""
    import pandas as pd

    from attnscope.heads.tokens import token_texts

    df = (pd.concat(frames, ignore_index=True) if frames else _token_frame(0, []))
    texts = np.empty(tuple(text.shape), dtype=object)  # [w, i]
    for w, row in enumerate(text.tolist()):
        texts[w, :] = token_texts(subject.maps.tokenizer, row)
    df.insert(0, "model", subject.name)
    df.insert(len(df.columns) - 1, "token", texts[df["window"].to_numpy(), df["position"].to_numpy()]
              if len(df) else np.array([], dtype=object))
    return df
