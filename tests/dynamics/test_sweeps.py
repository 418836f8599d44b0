"""Sweeps: the paper's checkpoint protocol, continuation, resumable chunked runs, Slurm."""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.dynamics import meanfield as mfm
from attnscope.dynamics import model as dm
from attnscope.dynamics import sweeps
from attnscope.dynamics.regimes import REGIMES
from attnscope.errors import InputError


@pytest.fixture(scope="module")
def paper():
    return dm.load_preset("paper")


def test_protocol_checkpoint_and_shared_start(paper):
    values = np.array([1.25, 1.3, 1.27])
    steps, transient = 32, 8
    res = sweeps.bifurcation(paper, values, steps=steps, transient=transient, lyap_steps=0, n_tail=20)
    mf = mfm.compile_config(paper)
    # the checkpoint: the LARGEST value (1.3) from x_0, time points t = 0..steps-1
    b, g, e = mfm.params_arrays(paper, beta_o=[1.3])
    s = mfm.initial_state(mf, 1)
    mfm.simulate_reference(mf, s, b, g, e, steps - 1)
    assert s.t == steps
    np.testing.assert_allclose(res.checkpoint.mv, s.mv, atol=1e-12)
    np.testing.assert_allclose(res.checkpoint.A, s.A, atol=1e-12)
    assert res.checkpoint.t == paper.C  # every value continues at t = C
    # every value starts from that checkpoint: compare with the numpy reference value by value
    for v in values:
        b, g, e = mfm.params_arrays(paper, beta_o=[v])
        start = mfm.State(s.mv.copy(), s.mk.copy(), s.A.copy(), paper.C)
        ref = mfm.simulate_reference(mf, start, b, g, e, steps)["mo_se"][0, transient:]
        row = res.table[res.table.beta_o == v].iloc[0]
        assert row.mo_se0_max == pytest.approx(ref[:, 0].max(), abs=1e-11)
        assert row.mo_se1_mean == pytest.approx(ref[:, 1].mean(), abs=1e-11)
        tail = res.points[(res.points.beta_o == v) & (res.points.kind == "tail")]
        np.testing.assert_allclose(tail[["mo_se0", "mo_se1", "mo_se2"]].to_numpy(), ref[-20:], atol=1e-11)
    assert list(res.table.beta_o) == list(values)


def test_continuation_both_directions(paper):
    values = [1.0, 1.2, 1.4]
    res = sweeps.bifurcation(paper, values, steps=30, transient=10, mode="continuation", lyap_steps=20)
    assert list(res.table.direction) == ["up"] * 3 + ["down"] * 3
    assert list(res.table.beta_o) == values + values[::-1]
    mf = mfm.compile_config(paper)
    s = mfm.initial_state(mf, 1)
    for v in values[:2]:  # up: 1.2 starts where 1.0 ended (after its run, before the Lyapunov part)
        b, g, e = mfm.params_arrays(paper, beta_o=[v])
        ref = mfm.simulate_reference(mf, s, b, g, e, 30)["mo_se"][0, 10:]
    row = res.table[(res.table.direction == "up") & (res.table.beta_o == 1.2)].iloc[0]
    assert row.mo_se2_min == pytest.approx(ref[:, 2].min(), abs=1e-12)
    s = mfm.initial_state(mf, 1)
    for v in values[::-1][:2]:  # down: 1.2 starts where 1.4 ended
        b, g, e = mfm.params_arrays(paper, beta_o=[v])
        ref = mfm.simulate_reference(mf, s, b, g, e, 30)["mo_se"][0, 10:]
    row = res.table[(res.table.direction == "down") & (res.table.beta_o == 1.2)].iloc[0]
    assert row.mo_se0_max == pytest.approx(ref[:, 0].max(), abs=1e-12)
    pts = res.points[res.points.kind == "tail"]
    assert set(pts.direction) == {"up", "down"} and len(pts) == 6 * 20
    assert set(res.table.regime) <= set(REGIMES)


@pytest.mark.parametrize("kw,match", [
    ({"values": []}, "at least one point"),
    ({"values": [1.0, float("nan")]}, "finite"),
    ({"values": [1.0], "param": "beta_att"}, "cannot sweep"),
    ({"values": [1.0], "mode": "sideways"}, "unknown bifurcation mode"),
    ({"values": [1.0], "steps": 10, "transient": 10}, "transient"),
])
def test_bad_sweeps(paper, kw, match):
    with pytest.raises(InputError, match=match):
        sweeps.bifurcation(paper, **{"lyap_steps": 0, **kw})


def test_zero_point_range():
    with pytest.raises(InputError, match="at least one point"):
        sweeps.sweep_values(0, 3, 0)


_calls: list[int] = []
_real_chunk = sweeps.run_chunk


def _counting(payload):
    _calls.append(1)
    return _real_chunk(payload)


def _crashing(payload):
    raise RuntimeError("simulated crash")


def test_phase_sweep_resumes_without_recomputing(paper, tmp_path, monkeypatch):
    monkeypatch.setattr(sweeps, "run_chunk", _counting)
    _calls.clear()
    kw = dict(transient=50, steps=50, k=2, chunk=3, store=tmp_path / "store", executor="inline")
    x, y = ("beta_o", [1.0, 1.3]), ("gamma", [100.0, 200.0, 220.0])
    full = sweeps.phase(paper, x, y, **kw)
    assert len(_calls) == 2 and len(full) == 6
    assert set(full.columns) >= {"beta_o", "gamma", "lambda_1", "lambda_2", "regime"}
    # interrupted run: one chunk file missing -> only that chunk is recomputed
    files = sorted((tmp_path / "store" / "tasks").glob("*.parquet"))
    assert len(files) == 2
    files[1].unlink()
    _calls.clear()
    again = sweeps.phase(paper, x, y, **kw)
    assert len(_calls) == 1
    np.testing.assert_allclose(again["lambda_1"], full["lambda_1"], atol=1e-13)
    # a chunk that crashes is reported in one line; the rerun computes just that chunk
    files[0].unlink()
    monkeypatch.setattr(sweeps, "run_chunk", _crashing)
    with pytest.raises(InputError, match="1 chunk") as exc:
        sweeps.phase(paper, x, y, **kw)
    assert "\n" not in str(exc.value)
    monkeypatch.setattr(sweeps, "run_chunk", _counting)
    _calls.clear()
    final = sweeps.phase(paper, x, y, **kw)
    assert len(_calls) == 1
    np.testing.assert_allclose(final["lambda_1"], full["lambda_1"], atol=1e-13)
    # different settings never reuse these chunks
    _calls.clear()
    sweeps.phase(paper, x, y, **{**kw, "steps": 60})
    assert len(_calls) == 2


def test_bifurcation_through_store_matches_direct(paper, tmp_path):
    vals = np.linspace(1.2, 1.3, 5)
    direct = sweeps.bifurcation(paper, vals, steps=40, transient=20, lyap_steps=30)
    stored = sweeps.bifurcation(paper, vals, steps=40, transient=20, lyap_steps=30, chunk=2,
                                store=tmp_path / "s", executor="inline")
    np.testing.assert_allclose(stored.table["lambda_1"], direct.table["lambda_1"], atol=1e-13)
    assert len(list((tmp_path / "s" / "tasks").glob("*.parquet"))) == 3


@pytest.mark.slurm
def test_phase_on_slurm(paper, tmp_path, slurm_cluster):
    df = sweeps.phase(paper, ("beta_o", [1.0, 1.4]), ("eps", [0.02, 0.05]), transient=50, steps=50, chunk=2,
                      store=tmp_path / "store", executor="slurm",
                      slurm={"partition": slurm_cluster["partition"], "time_min": 5})
    assert len(df) == 4 and df["lambda_1"].notna().all()
    local = sweeps.phase(paper, ("beta_o", [1.0, 1.4]), ("eps", [0.02, 0.05]), transient=50, steps=50, chunk=2)
    np.testing.assert_allclose(df["lambda_1"], local["lambda_1"], atol=1e-13)
