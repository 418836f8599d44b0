"""attnscope compare: speed-up metric, pairing by seed, intervals over seeds, score summaries, hostile run
directories, the CLI tables and figures, on hand-written run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import FormatError, InputError
from attnscope.training.compare import compare, load_run, loss_at, score_summary, score_table, speedup, t_interval
from tests.conftest import invoke_cli


def geometry(step: int, n_layers: int, sym: float, stack: str) -> list[dict]:
    out = []
    for layer in range(n_layers):
        s = sym + 0.1 * layer
        out.append({"stack": stack, "level": "layer", "layer": layer, "head": None, "symmetry": s,
                    "directionality": -s / 2})
        out.append({"stack": stack, "level": "head", "layer": layer, "head": 0, "symmetry": s, "directionality": 0.0})
    return out


def write_run(root: Path, name: str, losses: list[float], objective="mlm", init="default", every=10, n_layers=3,
              seed=None, eval_every=2, steps=None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    stack = "encoder" if objective == "mlm" else "decoder"
    lines = []
    for i, loss in enumerate(losses):
        rec = {"step": i * every, "loss": loss, "geometry": geometry(i * every, n_layers, 0.01 * i, stack)}
        if i % eval_every == 0:
            rec["eval_loss"] = loss + 0.1
        lines.append(json.dumps(rec))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    config = {"objective": objective, "init": init, "data": "builtin", "out": str(d),
              "model": {"n_layers": n_layers, "n_heads": 4, "d_model": 32}}
    if seed is not None:
        config["seed"] = seed
    if steps is not None:
        config["steps"] = steps
    (d / "run.json").write_text(json.dumps(config))
    return d


def test_speedup_definition():
    base = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 5.0, 4.0, 3.0, 2.5]})
    fast = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 4.0, 2.4, 2.0, 1.9]})
    assert speedup(fast, base, method="paper") == (20, pytest.approx(0.5))
    slow = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 6.0, 5.0, 2.6, 2.5]})
    assert speedup(slow, base, method="paper") == (None, None)  # equal to the baseline's final loss is not "below"
    assert speedup(base, base, method="paper") == (None, None)
    # step 0 (before training) never counts, even if its loss happens to be low
    odd = pd.DataFrame({"step": [0, 10, 20], "loss": [1.0, 3.0, 2.0]})
    assert speedup(odd, base, method="paper") == (20, pytest.approx(0.0))
    # one lucky interval decides the raw rule; a 2-point mean does not fall for it
    dip = pd.DataFrame({"step": [0, 10, 20, 30, 40], "loss": [9.0, 5.0, 2.0, 3.5, 2.6]})
    assert speedup(dip, base, method="paper") == (20, pytest.approx(0.5))
    assert speedup(dip, base, smooth=2, method="paper") == (None, None)  # means 3.5, 2.75, 3.05: none below the baseline mean 2.75
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
    res = compare(runs)
    s = res.runs.set_index("run")
    assert s.loc["enc-symmetric", "baseline"] == "enc-default"
    assert s.loc["dec-symmetric", "baseline"] == "dec-default"
    assert s.loc["enc-symmetric", "speedup"] == pytest.approx(0.5)
    assert s.loc["dec-symmetric", "speedup"] is None or np.isnan(s.loc["dec-symmetric", "speedup"])
    assert s.loc["enc-default", "final_eval_loss"] == pytest.approx(2.6)
    md = res.markdown
    # the held-out curve is logged at steps 0, 20, 40: the speed-up rests on 2 points (steps > 0), and says so
    assert s.loc["enc-symmetric", "curve"] == "held-out" and s.loc["enc-symmetric", "curve_points"] == 2
    assert list(res.runs.columns).index("curve_points") == list(res.runs.columns).index("speedup") + 1
    assert np.isnan(s.loc["enc-default", "curve_points"])  # the baseline has no speed-up over itself
    assert "| enc-symmetric | - | mlm | symmetric | 40 | 2.500 -> 1.900 | 50.0% (2 points) |" in md
    assert "(N points): the logged points (steps > 0) of the shorter of the two curves" in md
    train = compare(runs, curve="train").runs.set_index("run")
    assert train.loc["enc-symmetric", "curve_points"] == 4  # the training loss at steps 10..40
    assert "| dec-symmetric | - | clm | symmetric | 30 | 3.000 -> 4.000 | never reaches 3.000 |" in md
    # four groups of one run each: one note per group, no intervals
    assert sum("no interval" in n for n in res.notes) == 4
    assert res.stats["ci_low"].isna().all()
    # an explicit baseline applies to every run
    res2 = compare(runs[:2], baseline=str(runs[1]))
    assert res2.runs.set_index("run").loc["enc-default", "baseline"] == "enc-symmetric"


T_975_DF2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (from a t table)


def seeds_experiment(root: Path) -> list[Path]:
    """Three seeds x {default, symmetric}; the defaults' final losses differ by seed, so a wrong pairing
    gives different speed-ups. Logged every 10 steps to 40."""
    default = {0: [9, 5, 4, 3, 2.5], 1: [9, 6, 5, 4, 3.5], 2: [9, 4, 3, 2, 1.5]}
    # symmetric seed s falls below its own default's final loss at step 20 / 30 / 10
    symmetric = {0: [9, 4, 2.4, 2.0, 1.9], 1: [9, 5, 4, 3.4, 3.0], 2: [9, 1.4, 1.3, 1.2, 1.1]}
    runs = []
    for seed in (0, 1, 2):
        runs.append(write_run(root, f"default-s{seed}", default[seed], seed=seed))
        runs.append(write_run(root, f"symmetric-s{seed}", symmetric[seed], init="symmetric", seed=seed))
    return runs


def test_seeds_are_paired_and_summarised_with_t_intervals(tmp_path):
    res = compare(seeds_experiment(tmp_path), at=[15, 40])
    runs = res.runs.set_index("run")
    # matched speed-up on the held-out curve (loss + 0.1, logged at steps 20 and 40): each baseline reaches
    # its final held-out loss at step 40; symmetric seed 0 is at 2.5 <= 2.6 at step 20, seed 1 passes 3.6
    # halfway between 4.1 (step 20) and 3.1 (step 40), i.e. at step 30, seed 2 is at 1.4 <= 1.6 at step 20
    for seed, star, sp in ((0, 20, 0.5), (1, 30, 0.25), (2, 20, 0.5)):
        row = runs.loc[f"symmetric-s{seed}"]
        assert row["baseline"] == f"default-s{seed}" and row["seed"] == seed and row["curve"] == "held-out"
        assert row["step_star"] == pytest.approx(star) and row["baseline_steps"] == 40
        assert row["speedup"] == pytest.approx(sp)
    assert set(runs["group"]) == {"init=symmetric", "init=default"}
    stats = res.stats.set_index(["group", "metric"])
    sp = stats.loc[("init=symmetric", "speedup")]
    sd = np.std([0.5, 0.25, 0.5], ddof=1)
    half = T_975_DF2 * sd / np.sqrt(3)
    assert sp["n"] == 3 and sp["mean"] == pytest.approx(1.25 / 3) and sp["sd"] == pytest.approx(sd)
    assert (sp["ci_low"], sp["ci_high"]) == (pytest.approx(1.25 / 3 - half), pytest.approx(1.25 / 3 + half))
    assert (sp["estimator"], sp["interval"]) == ("mean", "95% t")
    steps = stats.loc[("init=symmetric", "steps_to_target")]
    assert steps["mean"] == pytest.approx(70 / 3) and steps["sd"] == pytest.approx(np.std([20, 30, 20], ddof=1))
    # loss at step 15: halfway between the losses logged at 10 and 20
    at15 = stats.loc[("init=default", "loss@15")]
    assert at15["mean"] == pytest.approx(np.mean([4.5, 5.5, 3.5]))
    final = stats.loc[("init=default", "final_loss")]
    assert final["mean"] == pytest.approx(2.5) and final["ci_high"] - 2.5 == pytest.approx(T_975_DF2 * 1 / np.sqrt(3))
    assert ("init=default", "speedup") not in stats.index  # a baseline has no speed-up over itself
    # paired differences, run minus its own seed's baseline: at 15 (interpolated) -1.5, -1.0, -2.6
    d15 = stats.loc[("init=symmetric", "dloss@15")]
    diffs = [(4 + 2.4) / 2 - 4.5, (5 + 4) / 2 - 5.5, (1.4 + 1.3) / 2 - 3.5]
    mean, sd = np.mean(diffs), np.std(diffs, ddof=1)
    dhalf = T_975_DF2 * sd / np.sqrt(3)
    assert (d15["mean"], d15["sd"]) == (pytest.approx(mean), pytest.approx(sd))
    assert (d15["ci_low"], d15["ci_high"]) == (pytest.approx(mean - dhalf), pytest.approx(mean + dhalf))
    # final eval losses are the final losses + 0.1 here: differences -0.6, -0.5, -0.4
    dev = stats.loc[("init=symmetric", "dfinal_eval_loss")]
    assert dev["mean"] == pytest.approx(-0.5) and dev["sd"] == pytest.approx(0.1)
    assert ("init=default", "dloss@15") not in stats.index
    # curves: mean over the three seeds at every logged step, the band from the same t-interval
    curves = res.curves[(res.curves["metric"] == "loss") & (res.curves["group"] == "init=default")]
    assert list(curves["step"]) == [10, 20, 30, 40]
    c10 = curves.iloc[0]
    mean, sd, lo, hi = t_interval([5, 6, 4])
    assert c10["mean"] == pytest.approx(5) and (c10["ci_low"], c10["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert hi - 5 == pytest.approx(T_975_DF2 * 1 / np.sqrt(3))
    assert not any("no interval" in n for n in res.notes)
    assert "| init=symmetric | 3 |" in res.markdown
    assert f"41.7% [{100 * (1.25 / 3 - half):.1f}%, {100 * (1.25 / 3 + half):.1f}%] (mean, 95% t, n=3)" in res.markdown


def test_explicit_target_and_a_seed_that_never_reaches_it(tmp_path):
    runs = seeds_experiment(tmp_path)
    res = compare(runs, target=3.0, speedup="paper")
    r = res.runs.set_index("run")
    # symmetric-s1 first logs a loss below 3.0 never (3.0 is not below 3.0): no step, no speed-up
    assert r.loc["symmetric-s1", "step_star"] is None or np.isnan(r.loc["symmetric-s1", "step_star"])
    # with a target, baselines get a step too and the speed-up is 1 - step*(run) / step*(baseline)
    assert r.loc["default-s0", "step_star"] == 40 and r.loc["symmetric-s0", "step_star"] == 20
    assert r.loc["symmetric-s0", "speedup"] == pytest.approx(0.5)
    assert r.loc["default-s2", "step_star"] == 30 and r.loc["symmetric-s2", "speedup"] == pytest.approx(1 - 10 / 30)
    sp = res.stats.set_index(["group", "metric"]).loc[("init=symmetric", "speedup")]
    assert sp["n"] == 2 and sp["n_runs"] == 3 and np.isnan(sp["mean"])  # never reached is not averaged away
    assert "2/3 seeds" in res.markdown


def test_loss_at_interpolates_inside_the_logged_range_only():
    df = pd.DataFrame({"step": [0, 10, 20], "loss": [99.0, 4.0, 2.0]})
    assert loss_at(df, 15) == pytest.approx(3.0) and loss_at(df, 20) == pytest.approx(2.0)
    assert np.isnan(loss_at(df, 5)) and np.isnan(loss_at(df, 25))


def test_pairing_errors(tmp_path):
    a = write_run(tmp_path, "sym-s0", [3, 2], init="symmetric", seed=0)
    b = write_run(tmp_path, "def-s1", [3, 2], seed=1)
    with pytest.raises(InputError, match="sym-s0 .*no default-init run"):
        compare([a, b])  # the only default run has another seed: no paired baseline
    c = write_run(tmp_path, "def-s1-copy", [3, 2.5], seed=1)
    with pytest.raises(InputError, match="same settings and seed"):
        compare([b, c])
    with pytest.raises(InputError, match="at least one"):
        compare([])
    with pytest.raises(InputError, match="baseline"):
        compare([b], baseline="zzz")
    for kwargs in ({"smooth": 0}, {"at": [0]}, {"target": float("nan")}):
        with pytest.raises(InputError):
            compare([b], **kwargs)


def test_hostile_run_directories(tmp_path):
    good = write_run(tmp_path, "good", [3, 2, 1.5], seed=0)
    with pytest.raises(InputError, match="not a training run directory"):
        compare([tmp_path])
    with pytest.raises(InputError, match="not a directory"):
        compare([good / "run.json"])
    # a torn last line (a crash mid-write) is ignored with a note
    torn = write_run(tmp_path, "torn", [3, 2, 1.5], seed=1)
    with open(torn / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 30, "loss": 1.')
    run = load_run(torn)
    assert [r["step"] for r in run.records] == [0, 10, 20] and "torn last line 4" in run.notes[0]
    assert any("torn" in n for n in compare([good, torn]).notes)
    # a bad line before the end, a record without a step, a string loss: one clear error
    bad = write_run(tmp_path, "bad", [3, 2, 1.5], seed=2)
    lines = (bad / "metrics.jsonl").read_text().splitlines()
    for broken, match in (("{oops", "line 2 is not JSON"), ('{"loss": 1}', "integer 'step'"),
                          ('{"step": 10, "loss": "five"}', "not a number")):
        (bad / "metrics.jsonl").write_text("\n".join([lines[0], broken, lines[2]]) + "\n")
        with pytest.raises(FormatError, match=match):
            load_run(bad)
    # a corrupt or foreign run.json
    for text in ('{"objective": "mlm", ', "[1, 2]", '{"model": 3}'):
        (bad / "run.json").write_text(text)
        with pytest.raises(FormatError, match="run.json"):
            load_run(bad)
    (bad / "metrics.jsonl").write_text("\n")
    (bad / "run.json").write_text("{}")
    with pytest.raises(InputError, match="no records"):
        load_run(bad)


def cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    return invoke_cli(monkeypatch, capsys, "compare", *args)


def test_compare_cli_json_out_and_one_line_errors(tmp_path, capsys, monkeypatch):
    runs = seeds_experiment(tmp_path)
    code, out, err = cli(monkeypatch, capsys, *runs, "--json", "--at", "20")
    assert code == 0
    doc = json.loads(out)
    assert [r["run"] for r in doc["runs"]] == [p.name for p in runs]
    sp = [r for r in doc["stats"] if r["group"] == "init=symmetric" and r["metric"] == "speedup"][0]
    assert sp["mean"] == pytest.approx(1.25 / 3) and any(r["metric"] == "loss@20" for r in doc["stats"])
    assert [v["group"] for v in doc["verdicts"]] == ["init=symmetric"]
    code, out, err = cli(monkeypatch, capsys, *runs, "--json", "--speedup", "paper")
    sp = [r for r in json.loads(out)["stats"] if r["group"] == "init=symmetric" and r["metric"] == "speedup"][0]
    assert code == 0 and sp["mean"] == pytest.approx(0.5)  # 1 - (20, 30, 10) / 40
    dest = tmp_path / "cmp"
    code, out, err = cli(monkeypatch, capsys, *runs, "--out", dest)
    assert code == 0 and "| init=symmetric | 3 |" in out and "wrote 5 figures" in err
    for f in ("loss_curves.png", "loss_differences.png", "loss_bands.png", "scores_median.png", "scores_per_layer.png",
              "table.md",
              "summary.csv", "stats.csv", "curves.csv", "losses.csv", "score_summary.csv"):
        assert (dest / f).stat().st_size > 100, f
    assert (dest / "table.md").read_text() == out
    assert pd.read_csv(dest / "stats.csv").shape[0] > 0
    # bad input: one line on stderr, exit 2, nothing half-written
    (tmp_path / "afile").write_text("x")
    with open(runs[0] / "run.json", "a") as fh:
        fh.write("garbage")
    for args in ([tmp_path / "nope"], [runs[0], runs[1]], runs[1:4:2], [runs[1], "--at", "x"],
                 [runs[1], "--speedup", "fast"], [runs[1], "--curve", "valid"],
                 [runs[2], "--out", tmp_path / "afile"], [runs[2], "--out", tmp_path / "afile" / "sub"]):
        code, out, err = cli(monkeypatch, capsys, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)
        assert out == ""  # refused before any table is printed
        assert "Traceback" not in err


def test_loss_bands_figure_holds_the_curves(tmp_path):
    from matplotlib.figure import Figure

    from attnscope.plots.training import loss_bands

    res = compare(seeds_experiment(tmp_path))
    fig = loss_bands(res.curves)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    train = lines["init=default (train, 3 seeds)"]
    assert list(train.get_xdata()) == [10, 20, 30, 40]
    assert list(train.get_ydata()) == pytest.approx([5, 4, 3, 2.5])
    assert len(ax.collections) == 4  # a band per group and metric
    own = Figure()
    target = own.subplots()
    assert loss_bands(res.curves, ax=target) is own and len(target.get_lines()) == 4


def test_paired_difference_curves_and_figure(tmp_path):
    from attnscope.plots.training import loss_differences

    res = compare(seeds_experiment(tmp_path))
    d = res.curves[(res.curves["metric"] == "dloss") & (res.curves["group"] == "init=symmetric")].sort_values("step")
    assert list(d["step"]) == [10, 20, 30, 40]
    # step 20: symmetric 2.4 / 4 / 1.3 minus default 4 / 5 / 3 of the same seed
    diffs = [2.4 - 4, 4 - 5, 1.3 - 3]
    mean, _, lo, hi = t_interval(diffs)
    row = d[d["step"] == 20].iloc[0]
    assert (row["mean"], row["ci_low"], row["ci_high"]) == (pytest.approx(mean), pytest.approx(lo), pytest.approx(hi))
    ev = res.curves[(res.curves["metric"] == "deval_loss") & (res.curves["group"] == "init=symmetric")]
    assert list(ev["step"]) == [20, 40] and ev["mean"].iloc[-1] == pytest.approx(-0.5)  # evaluated every 2nd log
    assert not ((res.curves["group"] == "init=default") & res.curves["metric"].str.startswith("d")).any()
    fig = loss_differences(res.curves)
    ax = fig.axes[0]
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "init=symmetric (train, 3 seeds)")
    assert list(line.get_ydata()) == pytest.approx(list(d["mean"]))
    single = compare([p for p in seeds_experiment(tmp_path / "b") if "default" in p.name])
    assert loss_differences(single.curves) is None  # baselines only: nothing to draw


def test_group_labels_leave_out_what_the_objective_implies(tmp_path):
    from attnscope.training.compare import group_labels

    runs = []
    for objective, causal, vocab in (("mlm", False, 257), ("clm", True, 256)):
        for init in ("default", "symmetric"):
            d = write_run(tmp_path, f"{objective}-{init}", [5, 4, 3], objective=objective, init=init, seed=0)
            conf = json.loads((d / "run.json").read_text())
            conf["model"].update(causal=causal, vocab_size=vocab)
            conf["steps"] = 2000 if objective == "mlm" else 1000  # a real difference: kept
            (d / "run.json").write_text(json.dumps(conf))
            runs.append(load_run(d))
    labels = group_labels(runs)
    assert labels["mlm-symmetric"] == "init=symmetric objective=mlm steps=2000"
    assert labels["clm-default"] == "init=default objective=clm steps=1000"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def rewrite(run: Path, recs: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def no_effect_experiment(root: Path) -> list[Path]:
    """Three seeds x {default, symmetric} to step 300 (logged every 50): each symmetric run falls below its
    baseline's final loss 2.0 at step 250 (speed-up 1/6) and ends 0.1 below it."""
    runs = []
    for seed in (0, 1, 2):
        default = [9, 6, 5, 4, 3, 2.5 + 0.1 * seed, 2.0]
        runs.append(write_run(root, f"default-s{seed}", default, seed=seed, every=50, steps=300))
        runs.append(write_run(root, f"symmetric-s{seed}", [*default[:5], 1.95, 1.9], init="symmetric", seed=seed,
                              every=50, steps=300))
    return runs


def test_unfinished_baseline_is_left_out_of_the_paired_statistics(tmp_path):
    runs = no_effect_experiment(tmp_path)
    rewrite(runs[0], records(runs[0])[:4])  # default-s0 has logged only up to step 150 of its 300
    res = compare(runs, at=[100, 200], speedup="paper")  # the pairing, with the paper's simple numbers
    r = res.runs.set_index("run")
    # the old code paired symmetric-s0's step 300 with default-s0's step 150: target 4.0, speed-up 1/3
    assert not r.loc["symmetric-s0", "paired"] and r.loc["symmetric-s1", "paired"]
    assert np.isnan(r.loc["symmetric-s0", "speedup"]) and np.isnan(r.loc["symmetric-s0", "step_star"])
    assert r.loc["symmetric-s1", "speedup"] == pytest.approx(1 / 6)
    assert "run default-s0 is unfinished: logged 150 of its 300 steps" in res.notes
    pair = [n for n in res.notes if n.startswith("pair symmetric-s0 / default-s0 left out")]
    assert len(pair) == 1 and "symmetric-s0 ends at step 300, default-s0 at step 150" in pair[0]
    stats = res.stats.set_index(["group", "metric"])
    for metric, n_runs in (("speedup", 2), ("steps_to_target", 2), ("dfinal_eval_loss", 2), ("dloss@200", 2),
                           ("dloss@100", 3), ("final_loss", 3), ("loss@100", 3)):
        assert stats.loc[("init=symmetric", metric), "n_runs"] == n_runs, metric
    sp = stats.loc[("init=symmetric", "speedup")]
    assert sp["mean"] == pytest.approx(1 / 6) and sp["sd"] == pytest.approx(0)
    assert stats.loc[("init=symmetric", "dfinal_eval_loss"), "mean"] == pytest.approx(-0.1)
    assert "| default-s0 | 0 | mlm | default | 150 of 300 |" in res.markdown
    assert "| n/a (unpaired) |" in res.markdown and "(2 of 3 pairs)" in res.markdown


def test_runs_stopped_at_the_same_step_stay_paired(tmp_path):
    runs = no_effect_experiment(tmp_path)[:2]
    for run in runs:  # both mid-training at step 250: compared at equal progress, with a note each
        rewrite(run, records(run)[:6])
    res = compare(runs)
    assert bool(res.runs.set_index("run").loc["symmetric-s0", "paired"])
    assert sum("is unfinished: logged 250 of its 300 steps" in n for n in res.notes) == 2
    assert not any(n.startswith("pair ") for n in res.notes)
    # both identical up to step 250, so both reach the baseline's last held-out loss (3.1) at step 200:
    # the matched speed-up is exactly 0 (the paper's rule: the baseline's last training loss 2.5 at step 250)
    row = res.runs.set_index("run").loc["symmetric-s0"]
    assert row["step_star"] == 200 and row["speedup"] == 0.0
    row = compare(runs, speedup="paper").runs.set_index("run").loc["symmetric-s0"]
    assert row["step_star"] == 250 and row["speedup"] == pytest.approx(0)


@pytest.mark.parametrize("edit, message", [
    (lambda recs: recs[-1].update(loss=float("nan")), "line 7: loss nan is not a finite non-negative number"),
    (lambda recs: recs[-1].update(eval_loss=float("nan")), "line 7: eval_loss nan is not a finite non-negative"),
    (lambda recs: recs[2].update(loss=float("inf")), "line 3: loss inf is not a finite non-negative number"),
    (lambda recs: recs[3].update(loss=-0.5), "line 4: loss -0.5 is not a finite non-negative number"),
    (lambda recs: recs[4].update(eval_loss="2.0"), "line 5: eval_loss '2.0' is not a number"),
    (lambda recs: recs[5].update(step=150), "line 6: step 150 appears twice"),
    (lambda recs: recs[5].update(step=1000000), "line 6: step 1000000 is beyond the run's 300 steps"),
    (lambda recs: recs[0].update(step=-50), "line 1: step -50 is negative"),
    (lambda recs: recs[1]["geometry"][0].update(symmetry=float("inf")), "line 2: symmetry score inf is not a finite"),
    (lambda recs: recs[1].update(geometry=3), "line 2: geometry is not a list"),
])
def test_records_the_trainer_never_writes_are_one_line_errors(tmp_path, capsys, monkeypatch, edit, message):
    runs = no_effect_experiment(tmp_path)
    recs = records(runs[0])
    edit(recs)
    rewrite(runs[0], recs)
    with pytest.raises(FormatError, match=f"metrics.jsonl: {message}"):
        load_run(runs[0])
    code, out, err = cli(monkeypatch, capsys, *runs)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_records_out_of_order_are_sorted_and_steps_checked_against_run_json(tmp_path):
    run = no_effect_experiment(tmp_path)[0]
    recs = records(run)
    rewrite(run, recs[3:] + recs[:3])
    assert [r["step"] for r in load_run(run).records] == [0, 50, 100, 150, 200, 250, 300]
    conf = json.loads((run / "run.json").read_text())
    for bad in (0, "300", 2.5):
        (run / "run.json").write_text(json.dumps({**conf, "steps": bad}))
        with pytest.raises(FormatError, match="run.json: steps .* is not a positive integer"):
            load_run(run)


def test_runs_the_trainer_writes_pass_the_checks(tmp_path):
    from attnscope.training.trainer import TrainConfig, train

    runs = []
    for init in ("default", "symmetric"):  # an mlm probe batch this small may select no position (null loss)
        cfg = TrainConfig.from_sources(None, n_layers=1, n_heads=2, d_model=16, d_ff=32, batch_size=1, seq_len=4,
                                       eval_windows=2, progress=False, threads=1, steps=4, warmup=1, log_every=1,
                                       mask_prob=0.01, init=init, out=str(tmp_path / init))
        train(cfg)
        runs.append(tmp_path / init)
    assert records(runs[0])[0]["step"] == 0 and "NaN" not in (runs[0] / "metrics.jsonl").read_text()
    res = compare(runs)
    assert list(res.runs["steps"]) == [4, 4] and not any("unfinished" in n for n in res.notes)


def test_out_removes_only_the_stale_outputs_of_an_earlier_comparison(tmp_path, capsys, monkeypatch):
    runs = seeds_experiment(tmp_path)
    dest = tmp_path / "cmp"
    code, _, _ = cli(monkeypatch, capsys, *runs, "--out", dest)
    assert code == 0 and (dest / "loss_differences.png").is_file() and (dest / "score_summary.csv").is_file()
    (dest / "notes.txt").write_text("mine")
    (dest / "scores_old.png").write_text("not written by compare")
    baselines = [p for p in runs if "default" in p.name]
    for run in baselines:  # no geometry records: no score tables or figures this time
        recs = records(run)
        rewrite(run, [{k: v for k, v in rec.items() if k != "geometry"} for rec in recs])
    code, _, err = cli(monkeypatch, capsys, *baselines, "--out", dest)
    assert code == 0, err
    left = sorted(p.name for p in dest.iterdir())
    assert left == ["attnscope-manifest.json", "curves.csv", "loss_bands.png", "loss_curves.png", "losses.csv",
                    "notes.txt", "scores_old.png", "stats.csv", "summary.csv", "table.md"]


def test_options_that_cannot_act_are_refused_or_noted(tmp_path):
    """A target no cross-entropy reaches is refused; an --at past every run, a --smooth wider than the
    logged losses or one on a held-out comparison (not smoothed) each give a note, never silence."""
    runs = seeds_experiment(tmp_path)  # logged at steps 0..40, held-out at 0, 20, 40
    for bad in (0.0, -1.0):
        with pytest.raises(InputError, match="above 0"):
            compare(runs, target=bad)
    res = compare(runs, at=[20, 1000])
    assert any("at step 1000 is past the last logged step of every run (40)" in n for n in res.notes)
    assert not any("at step 20 " in n for n in res.notes)
    res = compare(runs, smooth=3)  # auto: every pair has held-out losses, so smooth changes nothing
    assert any("smooth 3 had no effect" in n for n in res.notes)
    res = compare(runs, smooth=3, curve="train")  # 4 training losses after step 0: enough
    assert not any("smooth" in n for n in res.notes) and res.runs["curve"].eq("train (smooth 3)").all()
    for smooth in (4, 5):  # 4 losses after step 0: smoothing over 4 leaves one point, over 5 none
        res = compare(runs, smooth=smooth, curve="train")
        assert any(f"smooth {smooth} leaves fewer than 2 points of the training-loss curve of default-s0 (4" in n
                   for n in res.notes), res.notes
        assert res.runs["speedup"].isna().all()  # never the 0.0 a single point would give by construction
    assert not any("smooth" in n for n in compare(runs).notes + compare(runs, at=[40]).notes)


def test_a_target_that_says_nothing_is_noted_and_named_in_the_caption(tmp_path):
    runs = seeds_experiment(tmp_path)  # first logged training losses 4 .. 6 (step 10), lowest 1.1
    high = compare(runs, target=100, curve="train")
    assert any("target 100 is at or above every run's first logged training loss" in n for n in high.notes)
    low = compare(runs, target=0.5)  # auto: the speed-ups read the held-out loss (training loss + 0.1 here)
    assert any("no run reaches the target 0.5 (lowest logged held-out loss 1.2)" in n for n in low.notes), low.notes
    low = compare(runs, target=0.5, curve="train")
    assert any("no run reaches the target 0.5 (lowest logged training loss 1.1)" in n for n in low.notes)
    mid = compare(runs, target=3.0, curve="train")
    assert not any("target" in n for n in mid.notes)
    assert "at the target loss 3" in mid.markdown and "baseline's final loss" not in mid.markdown
    assert "baseline's final loss" in compare(runs).markdown
    paper = compare(runs, target=3.0, speedup="paper")
    assert "1 - step*(run) / step*(baseline)" in paper.markdown and "at the target loss 3" in paper.markdown


def test_at_past_some_runs_is_noted(tmp_path):
    short = write_run(tmp_path, "short", [9, 5, 4], seed=0)
    long = write_run(tmp_path, "long", [9, 5, 4, 3, 2], init="symmetric", seed=0)
    res = compare([short, long], at=[30])
    assert any("at step 30 is past the last logged step of short: their loss@30 is missing" in n for n in res.notes)


@pytest.mark.parametrize("kw, msg", [(dict(target=True), "target must be a loss"), (dict(target="3"), "target must be"),
                                     (dict(at=[True]), "at must be a list of whole"), (dict(at=[10.5]), "at must be"),
                                     (dict(at=["10"]), "at must be"), (dict(at="10"), "at must be")])
def test_odd_option_types_are_named(tmp_path, kw, msg):
    from attnscope.errors import AttnscopeError

    with pytest.raises(AttnscopeError, match=msg):
        compare(seeds_experiment(tmp_path), **kw)


def test_one_at_step_alone_is_fine(tmp_path):
    assert "loss@20" in set(compare(seeds_experiment(tmp_path), at=20).stats["metric"])
