"""attnscope compare: speed-up metric, score summaries, table and figures, on hand-written run directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.training.compare import compare, load_run, score_summary, score_table, speedup


def geometry(step: int, n_layers: int, sym: float, stack: str) -> list[dict]:
    out = []
    for layer in range(n_layers):
        s = sym + 0.1 * layer
        out.append({"stack": stack, "level": "layer", "layer": layer, "head": None, "symmetry": s,
                    "directionality": -s / 2})
        out.append({"stack": stack, "level": "head", "layer": layer, "head": 0, "symmetry": s, "directionality": 0.0})
    return out


def write_run(root: Path, name: str, losses: list[float], objective="mlm", init="default", every=10, n_layers=3) -> Path:
    d = root / name
    d.mkdir(parents=True)
    stack = "encoder" if objective == "mlm" else "decoder"
    lines = []
    for i, loss in enumerate(losses):
        rec = {"step": i * every, "loss": loss, "geometry": geometry(i * every, n_layers, 0.01 * i, stack)}
        if i % 2 == 0:
            rec["eval_loss"] = loss + 0.1
        lines.append(json.dumps(rec))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (d / "run.json").write_text(json.dumps({"objective": objective, "init": init, "data": "builtin",
                                            "model": {"n_layers": n_layers, "n_heads": 4, "d_model": 32}}))
    return d


def test_speedup_definition():
    base = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 5.0, 4.0, 3.0, 2.5]})
    fast = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 4.0, 2.4, 2.0, 1.9]})
    assert speedup(fast, base) == (20, pytest.approx(0.5))
    slow = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 6.0, 5.0, 2.6, 2.5]})
    assert speedup(slow, base) == (None, None)  # equal to the baseline's final loss is not "below"
    assert speedup(base, base) == (None, None)
    # step 0 (before training) never counts, even if its loss happens to be low
    odd = pd.DataFrame({"step": [0, 10, 20], "loss": [1.0, 3.0, 2.0]})
    assert speedup(odd, base) == (20, pytest.approx(0.0))
    # one lucky interval decides the raw rule; a 2-point mean does not fall for it
    dip = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 5.0, 2.0, 3.5, 2.6]})
    assert speedup(dip, base) == (20, pytest.approx(0.5))
    assert speedup(dip, base, smooth=2) == (None, None)  # means 3.5, 2.75, 3.05: none below the baseline mean 2.75
    with pytest.raises(InputError):
        speedup(dip, base, smooth=0)


def test_score_summary_matches_numpy_quantiles(tmp_path):
    run = load_run(write_run(tmp_path, "a", [5, 4, 3], n_layers=5))
    scores = score_table([run])
    summ = score_summary(scores)
    assert len(summ) == 3 and set(summ["stack"]) == {"encoder"}
    row = summ[summ["step"] == 20].iloc[0]
    vals = 0.02 + 0.1 * np.arange(5)
    assert row["symmetry_median"] == pytest.approx(np.median(vals))
    assert row["symmetry_q1"] == pytest.approx(np.quantile(vals, 0.25))
    assert row["directionality_q3"] == pytest.approx(np.quantile(-vals / 2, 0.75))


def test_compare_tables_figures_and_baselines(tmp_path):
    runs = [
        write_run(tmp_path, "enc-default", [9, 5, 4, 3, 2.5]),
        write_run(tmp_path, "enc-symmetric", [9, 4, 2.4, 2.0, 1.9], init="symmetric"),
        write_run(tmp_path, "dec-default", [9, 5, 4, 3], objective="clm"),
        write_run(tmp_path, "dec-symmetric", [9, 6, 5, 4], objective="clm", init="symmetric"),
    ]
    res = compare(runs, out=tmp_path / "cmp")
    s = res["summary"].set_index("run")
    assert s.loc["enc-symmetric", "baseline"] == "enc-default"
    assert s.loc["dec-symmetric", "baseline"] == "dec-default"
    assert s.loc["enc-symmetric", "speedup"] == pytest.approx(0.5)
    assert s.loc["dec-symmetric", "speedup"] is None or np.isnan(s.loc["dec-symmetric", "speedup"])
    assert s.loc["enc-default", "final_eval_loss"] == pytest.approx(2.6)
    md = res["markdown"]
    assert "| enc-symmetric | mlm | symmetric | 40 | 2.500 -> 1.900 | 50% |" in md
    assert "| dec-symmetric | clm | symmetric | 30 | 3.000 -> 4.000 | none |" in md
    for f in ("loss_curves.png", "scores_median.png", "scores_per_layer.png", "table.md", "summary.csv"):
        assert (tmp_path / "cmp" / f).stat().st_size > 100
    assert (tmp_path / "cmp" / "table.md").read_text() == md
    # an explicit baseline applies to every run
    res2 = compare(runs[:2], baseline=str(runs[1]))
    assert res2["summary"].set_index("run").loc["enc-default", "baseline"] == "enc-symmetric"


def test_compare_bad_input(tmp_path):
    with pytest.raises(InputError, match="not a training run directory"):
        compare([tmp_path])
    with pytest.raises(InputError, match="at least one"):
        compare([])
    a = write_run(tmp_path, "a", [3, 2])
    with pytest.raises(InputError, match="baseline"):
        compare([a], baseline="zzz")


def test_compare_cli_json(tmp_path, capsys, monkeypatch):
    from attnscope.cli import main

    a = write_run(tmp_path, "a", [3, 2])
    b = write_run(tmp_path, "b", [3, 1], init="symmetric")
    monkeypatch.setattr(sys, "argv", ["attnscope", "compare", str(a), str(b), "--json"])
    try:
        main()
    except SystemExit as exc:
        assert not exc.code
    rows = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in rows] == ["a", "b"] and rows[1]["speedup"] == pytest.approx(0.0)
    monkeypatch.setattr(sys, "argv", ["attnscope", "compare", str(tmp_path / "nope")])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
