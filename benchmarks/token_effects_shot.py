"""The docs screenshot of the atlas page's per-token view, and the numbers its caption quotes.

Reads an `attnscope atlas ... --interventions` folder (token_effects.parquet, interventions.parquet), picks the
head whose loss rises most under ``--intervention`` (the table's mean change over windows) and the window
holding its largest per-token rise, draws atlas.html's per-token section of that table
(:func:`attnscope.atlas.html.token_effects_section`, by the code as it is now), shows them in headless Chromium
(the section's own selectors, as a reader would pick them) and saves the screenshot. Prints the head's mean change
with its interval, the largest rises with their tokens, and how much of the window's total rise they carry.

    python benchmarks/token_effects_shot.py OUT [--intervention sym] [--shot docs/atlas_figures/token_effects_sym.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pages"))
from _chromium import drive  # noqa: E402  (tests/pages: the headless-Chromium driver the browser tests use)
from head_view_page import ONLY  # noqa: E402  (hide all but one section)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="An `attnscope atlas --interventions` output folder.")
    ap.add_argument("--intervention", default="sym")
    ap.add_argument("--shot", default=None, help="Write the screenshot here (PNG).")
    a = ap.parse_args()
    from attnscope.atlas.html import token_effects_section
    from attnscope.pages import document
    from attnscope.tables import read_table

    out = Path(a.out)
    iv = read_table(out / "interventions.parquet")
    te = read_table(out / "token_effects.parquet")
    loss = iv[(iv["intervention"] == a.intervention) & (iv["measure"] == "loss")].sort_values("delta", ascending=False)
    top = loss.iloc[0]
    layer, head = int(top["layer"]), int(top["head"])
    rows = te[(te["layer"] == layer) & (te["head"] == head) & (te["intervention"] == a.intervention)]
    window = int(rows.loc[rows["delta_loss"].idxmax(), "window"])
    win = rows[rows["window"] == window].sort_values("delta_loss", ascending=False)
    print(f"{top['model']} L{layer}H{head} under {a.intervention}: mean change in loss {top['delta']:+.3f} nats, "
          f"95% CI [{top['ci_low']:+.3f}, {top['ci_high']:+.3f}], n = {int(top['n'])} windows, p_bh {top['p_bh']:.3g}; "
          f"clean loss {top['clean']:.3f}")
    rises = win["delta_loss"].clip(lower=0)
    print(f"window {window}: mean {win['delta_loss'].mean():+.4f} over {len(win)} positions; the 10 largest rises "
          f"carry {rises.iloc[:10].sum() / rises.sum():.0%} of its total rise; "
          f"{(win['delta_loss'] > 0).mean():.0%} of positions rise")
    for r in win.head(10).itertuples():
        print(f"  position {r.position}: {r.delta_loss:+.3f} nats, token {r.token!r}")
    key = f"{top['model']}|{layer},{head}"
    driver = ONLY + f"""
const h = document.querySelector('#atlas-te .te-head'); h.value = {key!r}; h.dispatchEvent(new Event('change'));
const k = document.querySelector('#atlas-te .te-kind'); k.value = {a.intervention!r}; k.dispatchEvent(new Event('change'));
const w = document.querySelector('#atlas-te .te-window'); w.value = '{window}'; w.dispatchEvent(new Event('change'));
const box = document.querySelector('#atlas-te .te-text'), hot = box.querySelector('.te-tok[data-pos="{int(win.iloc[0]['position'])}"]');
box.scrollTop = Math.max(0, hot.offsetTop - box.offsetTop - 120);
const title = document.querySelector('#atlas-te .te-title').textContent;
const first = [...document.querySelectorAll('#atlas-te .te-list')][0].children[0].textContent;
only('#atlas-te');
out({{title, first}});
"""
    with tempfile.TemporaryDirectory() as tmp:
        page = document(str(top["model"]), token_effects_section(te))
        got, _ = drive(page, driver, Path(tmp),
                       screenshot=Path(a.shot) if a.shot else None, size=(1150, 640), name="te")
    print(got)


if __name__ == "__main__":
    main()
