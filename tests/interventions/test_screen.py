"""The screen (interventions/screen.py): its first-order part is the loss's directional derivative along the
head's exact output change (checked by finite differences in float64 against an explicit slow reference of the
symmetric / antisymmetric head), its second-order part the Gauss-Newton form of that change (a slow reference
by finite differences of the logits), its behaviour rows are the exact pass's, exact= chooses the heads it says, and
a screened value is never passed off as a measurement."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)
SMALL = dict(windows=3, length=40, random_windows=2, random_length=10)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("screen")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=3, d=32, n_heads=4, n_kv=2))


def _double_subject(path):
    from attnscope.interventions import open_subject

    subject = open_subject(str(path))
    subject.model.double()
    subject.out_weight = subject.out_weight.detach().double()
    for module in subject.model.modules():  # transformers' RMSNorm computes in float32 whatever the input: not here
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = lambda x, m=module: m.weight * (x * (x.pow(2).mean(-1, keepdim=True)
                                                                  + m.variance_epsilon).rsqrt())
    return subject


def _reference_head(q, k, v, head: int, groups: int, scale: float, kind: str):
    """Slow reference: one head's output [i, d] with its scores (q k^T) replaced by their symmetric /
    antisymmetric part, causal mask, softmax (q [h, i, d], k and v [g, j, d], float64)."""
    import torch

    s = q[head] @ k[head // groups].T
    s = (s + s.T) / 2 if kind == "sym" else (s - s.T) / 2 if kind == "anti" else s
    n = s.shape[0]
    s = (s * scale).masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v[head // groups]


def _output_change(subject, ctl, tok, layer: int, head: int, kind: str, clean):
    """The head's exact output change dO [i, d] under ``kind`` (sym/anti from the slow reference, float64)."""
    import torch

    from attnscope.interventions.attention import Plan
    from attnscope.interventions.clean import forward

    got = {}
    ctl.plan = Plan(on_attention=lambda l, call, out, probs: got.update(
        {l: (call.query[0].detach(), call.key[0].detach(), call.value[0].detach(), out[0].detach(),
             call.kwargs["scaling"])}) if l == layer else None)
    with torch.no_grad():
        forward(subject, tok)
    q, k, v, out, scale = got[layer]
    o = out[:, head]  # [i, d]
    if kind in ("sym", "anti"):
        return _reference_head(q, k, v, head, q.shape[0] // k.shape[0], scale, kind) - o
    return -o if kind == "ablate" else clean.means[layer][head].double() - o


def _logits_with(subject, ctl, tok, layer: int, head: int, delta, eps: float):
    """The logits [i - 1, v] (float64) with eps x ``delta`` added to the head's output at the output projection's
    input."""
    import torch

    from attnscope.interventions.attention import Plan, layer_list
    from attnscope.interventions.clean import forward
    from attnscope.interventions.loss import clean_logits

    attn = layer_list(subject.model)[layer].self_attn
    d = attn.head_dim

    def pre(mod, args):
        x = args[0].clone()
        x[0, :, head * d:(head + 1) * d] += eps * delta
        return (x,)

    ctl.plan = Plan()
    handle = attn.o_proj.register_forward_pre_hook(pre)
    try:
        with torch.no_grad():
            hidden = forward(subject, tok)
    finally:
        handle.remove()
    return clean_logits(subject, hidden[0]).double()


@needs_gguf
@pytest.mark.parametrize("kind", ["sym", "anti", "ablate", "mean"])
def test_the_screen_is_the_derivative_of_the_loss_along_the_heads_exact_output_change(tiny_gguf, kind, monkeypatch):
    """(L(O + eps dO) - L(O - eps dO)) / 2 eps, with dO the head's output change from the slow reference, injected
    at the output projection's input, equals the screen's estimate (the model in float64, the screen's
    cross-entropy in float32: to ~1e-5 relative)."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.clean import clean_pass
    from attnscope.interventions.screen import screen_pass

    softmax = torch.nn.functional.softmax  # the eager attention's float32 softmax: in the input's float64 here
    monkeypatch.setattr(torch.nn.functional, "softmax", lambda x, dim=-1, dtype=None, **kw: softmax(x, dim=dim))
    subject = _double_subject(tiny_gguf)
    layer, head = 1, 2
    wins = {"text": make_windows(subject.maps, "builtin", 1, 24)}
    tok = wins["text"][:1]
    with patched(subject.model) as ctl:
        with torch.inference_mode():
            clean = clean_pass(subject, wins, ctl)
        rows, _ = screen_pass(subject, wins, {layer: [head]}, [kind], clean, ctl)
        est = float(rows[(rows["measure"] == "loss")]["delta"].iloc[0])
        delta = _output_change(subject, ctl, tok, layer, head, kind, clean)

        def loss_with(eps: float) -> float:  # float64 here (the screen's own loss: float32)
            logits = _logits_with(subject, ctl, tok, layer, head, delta, eps)
            return float(torch.nn.functional.cross_entropy(logits, tok[0, 1:]))

        eps = 1e-4
        fd = (loss_with(eps) - loss_with(-eps)) / (2 * eps)
    assert abs(est) > 1e-6  # a real effect
    assert est == pytest.approx(fd, rel=1e-4, abs=1e-8)


@needs_gguf
def test_behaviour_rows_are_the_exact_passes_and_loss_rows_carry_both(tiny_gguf):
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym,anti,ablate", exact="all", workers=1, data="builtin", **SMALL)
    t = res.table
    # the exact layer pass with its behaviour (as before the screen) gives the same behaviour numbers
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import random_windows
    from attnscope.interventions import open_subject
    from attnscope.interventions.attention import patched
    from attnscope.interventions.clean import clean_pass
    from attnscope.interventions.exact import layer_pass

    subject = open_subject(str(tiny_gguf))
    wins = {"text": make_windows(subject.maps, "builtin", 3, 40), "random": random_windows(subject.maps, 2, 10, seed=0)}
    with torch.inference_mode(), patched(subject.model) as ctl:
        clean = clean_pass(subject, wins, ctl)
        old = layer_pass(subject, 1, [0, 1, 2, 3], ("sym", "anti"), wins, clean, ctl)
    from attnscope.interventions.summary import summarise

    old = summarise(old)
    old = old[old["measure"] != "loss"].set_index(["layer", "head", "intervention", "measure"]).sort_index()
    new = t[(t["layer"] == 1) & (t["measure"] != "loss")].set_index(["layer", "head", "intervention", "measure"])
    new = new.loc[old.index]
    np.testing.assert_allclose(new["delta"], old["delta"], atol=1e-5)
    assert new["exact"].all()
    loss = t[t["measure"] == "loss"]
    assert loss["exact"].all() and loss["delta"].notna().all() and loss["delta_screen"].notna().all()
    assert (loss["n"] == 3).all() and (loss["n_screen"] == 3).all()
    assert ((loss["ci_low_screen"] <= loss["delta_screen"]) & (loss["delta_screen"] <= loss["ci_high_screen"])).all()
    assert (loss["p_bh_screen"] >= loss["p_screen"] - 1e-12).all()
    score = loss[loss["intervention"].isin(["sym", "anti"])]
    assert score["pattern_change"].between(0, 1).all() and (score["pattern_change"] > 0).all()
    assert loss[loss["intervention"] == "ablate"]["pattern_change"].isna().all()
    agree = res.info["agreement"]
    assert set(agree) == {"sym", "anti", "ablate", "scale:0.5"} and agree["sym"]["heads"] == 12
    assert -1 <= agree["sym"]["spearman_rho"] <= 1 and agree["sym"]["largest_disagreement"]["head"].startswith("L")
    assert res.screen is not None and (res.screen["measure"] == "loss").any()


@needs_gguf
def test_exact_zero_is_the_screen_alone_and_never_a_measured_value(tiny_gguf, tmp_path):
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym,ablate", exact=0, workers=1, **SMALL)
    loss = res.table[res.table["measure"] == "loss"]
    assert not loss["exact"].any() and loss["delta"].isna().all() and (loss["n"] == 0).all()
    assert loss["value"].isna().all() and loss["ci_low"].isna().all() and loss["p_bh"].isna().all()
    assert loss["delta_screen"].notna().all() and loss["exact_reason"].eq("screened only").all()
    assert loss["interval"].str.startswith("not measured exactly").all()
    assert res.token_effects is not None and len(res.token_effects) == 0  # per-token effects: exact heads only
    assert "agreement" not in res.info
    # the same screen numbers as a run that then measures every head
    full = intervene(str(tiny_gguf), interventions="sym,ablate", exact="all", workers=1, **SMALL)
    key = ["layer", "head", "intervention", "measure"]
    a = res.table.set_index(key).sort_index()
    b = full.table.set_index(key).sort_index()
    np.testing.assert_allclose(a["delta_screen"].dropna(), b["delta_screen"].dropna(), rtol=1e-6, atol=1e-9)


@needs_gguf
def test_a_resumed_run_reuses_the_stored_screen(tiny_gguf, tmp_path, monkeypatch):
    from attnscope.interventions import intervene, run

    store = tmp_path / "store"
    first = intervene(str(tiny_gguf), interventions="sym", exact=3, store=store, workers=1, **SMALL)
    monkeypatch.setattr(run, "screen_pass", lambda *a, **k: (_ for _ in ()).throw(AssertionError("screened again")))
    monkeypatch.setattr(run, "layer_pass", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    again = intervene(str(tiny_gguf), interventions="sym", exact=3, store=store, workers=1, **SMALL)
    pd.testing.assert_frame_equal(first.table, again.table)


def _as_written_by_the_first_order_code(store) -> int:
    """Rewrite every file of ``store`` with the settings the 2026-11-28 code recorded (its screen named, no draws)."""
    import json

    import pyarrow.parquet as pq

    from attnscope.interventions.run import OLD_SCREEN

    n = 0
    for path in (store / "tasks").glob("*.parquet"):
        t = pq.read_table(path)
        meta = json.loads(t.schema.metadata[b"attnscope"])
        meta["settings"].pop("screen_samples", None)
        meta["settings"]["screen"] = OLD_SCREEN
        pq.write_table(t.replace_schema_metadata({**t.schema.metadata, b"attnscope": json.dumps(meta).encode()}), path)
        n += 1
    return n


@needs_gguf
def test_exact_layers_stored_by_the_first_order_code_are_reused_in_full_precision(tiny_gguf, tmp_path, monkeypatch):
    """A store of yesterday's code: its screen is made again (another screen), its exact layers are reused (they
    do not depend on the screen), the table's exact columns unchanged; in bf16-delta (whose loss routing changed
    since) they are computed again."""
    from attnscope.interventions import intervene, run

    store = tmp_path / "store"
    opts = dict(interventions="sym", exact="all", store=store, workers=1, **SMALL)
    first = intervene(str(tiny_gguf), precision="full", **opts)
    assert _as_written_by_the_first_order_code(store) >= 4  # the screen, 3 layers and their tokens
    monkeypatch.setattr(run, "layer_pass", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    again = intervene(str(tiny_gguf), precision="full", **opts)
    exact_cols = ["layer", "head", "intervention", "measure", "delta", "ci_low", "ci_high", "p", "n"]
    pd.testing.assert_frame_equal(first.table[exact_cols], again.table[exact_cols])
    assert not list((store / "set-aside").glob("layer=*"))  # only the screen was set aside
    monkeypatch.undo()
    low = tmp_path / "low"
    intervene(str(tiny_gguf), precision="bf16-delta", **{**opts, "store": low})
    _as_written_by_the_first_order_code(low)
    monkeypatch.setattr(run, "layer_pass", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    with pytest.raises(AssertionError, match="recomputed"):
        intervene(str(tiny_gguf), precision="bf16-delta", **{**opts, "store": low})


def _screen_table(deltas: dict[tuple[int, int], float], patterns: dict[tuple[int, int], float]) -> pd.DataFrame:
    rows = [dict(layer=l, head=h, intervention="sym", measure="loss", delta=v, pattern_change=patterns[(l, h)])
            for (l, h), v in deltas.items()]
    return pd.DataFrame(rows)


def test_choose_exact_takes_each_interventions_largest_and_the_named_but_none_for_the_controls():
    from attnscope.interventions.screen import AUTO_LEAST, choose_exact

    heads = [(l, h) for l in range(10) for h in range(10)]  # 100 heads: auto takes each intervention's 10
    rng = np.random.default_rng(0)
    deltas = {p: float(v) for p, v in zip(heads, rng.normal(size=100))}
    other = {p: float(v) for p, v in zip(heads, rng.normal(size=100))}
    control = {p: float(v) for p, v in zip(heads, rng.normal(size=100))}
    patterns = {p: 0.5 for p in heads}
    table = pd.concat([_screen_table(deltas, patterns), _screen_table(other, patterns).assign(intervention="ablate"),
                       _screen_table(control, patterns).assign(intervention="scale:0.5")])

    def largest(d, k):
        return set(sorted(heads, key=lambda p: -abs(d[p]))[:k])

    auto = choose_exact(table, "auto", named=[(9, 9)], skip=["scale:0.5"])
    assert {p for p, why in auto.items() if why == "top"} == (largest(deltas, 10) | largest(other, 10)) - {(9, 9)}
    assert auto[(9, 9)] == "named"
    with_control = choose_exact(table, "auto")  # not skipped: the control's own largest come in too
    assert set(with_control) == largest(deltas, 10) | largest(other, 10) | largest(control, 10)
    three = choose_exact(table, 3, skip=["scale:0.5"])
    assert set(three) == largest(deltas, 3) | largest(other, 3) and set(three.values()) == {"top"}
    assert choose_exact(table, 0) == {} and choose_exact(table, 0, named=[(1, 1)]) == {(1, 1): "named"}
    assert set(choose_exact(table, "all")) == set(heads)
    small = _screen_table({(0, h): float(h) for h in range(6)}, {(0, h): 0.1 for h in range(6)})
    assert set(choose_exact(small, "auto")) == {(0, h) for h in range(6 - AUTO_LEAST, 6)}
    tiny = _screen_table({(0, h): float(h) for h in range(2)}, {(0, h): 0.1 for h in range(2)})
    assert set(choose_exact(tiny, "auto")) == {(0, 0), (0, 1)}  # fewer than AUTO_LEAST: all of them


@pytest.mark.parametrize("exact, needle", [("some", "auto, all or a number"), (-1, "at least 0"), (1.5, "float"),
                                           (True, "bool")])
def test_a_bad_exact_is_one_line_before_the_load(exact, needle):
    from attnscope.errors import AttnscopeError
    from attnscope.interventions import intervene

    with pytest.raises((AttnscopeError, TypeError, ValueError), match=needle):
        intervene("/no/such/model.gguf", exact=exact)


def _same_tables(a: pd.DataFrame, b: pd.DataFrame) -> None:
    key = ["layer", "head", "intervention", "measure"]
    a, b = a.set_index(key).sort_index(), b.set_index(key).sort_index()
    assert a.index.equals(b.index) and a["exact"].equals(b["exact"])
    for col in ("delta", "ci_low", "ci_high", "delta_screen"):
        np.testing.assert_allclose(a[col].to_numpy(float), b[col].to_numpy(float), rtol=1e-5, atol=1e-7)


@needs_gguf
def test_the_exact_passes_as_jobs_equal_the_in_process_ones_and_resume(tiny_gguf, tmp_path, monkeypatch):
    """executor="local" (a process pool through run_tasks: the path Slurm jobs take) gives the same table and
    per-token changes; a rerun submits nothing."""
    from attnscope.interventions import intervene
    from attnscope.interventions import jobs as jobs_mod

    opts = dict(interventions="sym,ablate", exact=3, **SMALL)
    here = intervene(str(tiny_gguf), workers=1, **opts)
    jobs = intervene(str(tiny_gguf), executor="local", workers=2, store=tmp_path / "s", **opts)
    _same_tables(here.table, jobs.table)
    tkey = ["layer", "head", "intervention", "window", "position"]
    pd.testing.assert_frame_equal(here.token_effects[tkey], jobs.token_effects[tkey])
    monkeypatch.setattr(jobs_mod, "exact_job", lambda *a, **k: (_ for _ in ()).throw(AssertionError("submitted again")))
    again = intervene(str(tiny_gguf), executor="local", workers=2, store=tmp_path / "s", **opts)
    _same_tables(jobs.table, again.table)


def test_jobs_need_a_store_and_a_model_they_can_load_themselves():
    from attnscope.errors import AttnscopeError
    from attnscope.interventions import intervene

    with pytest.raises(AttnscopeError, match="give store= too"):
        intervene("/no/such.gguf", executor="slurm")
    with pytest.raises(AttnscopeError, match="executor must be one of"):
        intervene("/no/such.gguf", executor="cluster", store="/tmp/x")


@needs_gguf
@pytest.mark.slurm
def test_slurm_runs_the_exact_passes_as_jobs_on_a_real_cluster(tiny_gguf, tmp_path, slurm_cluster):
    from attnscope.interventions import intervene

    opts = dict(interventions="sym,ablate", exact=3, **SMALL)
    here = intervene(str(tiny_gguf), workers=1, **opts)
    slurm = {"partition": slurm_cluster["partition"], "time_min": 10}
    jobs = intervene(str(tiny_gguf), executor="slurm", slurm=slurm, store=tmp_path / "s", **opts)
    assert list((tmp_path / "s" / "slurm").glob("*_submission.sh"))  # it went through sbatch
    _same_tables(here.table, jobs.table)


@needs_gguf
@pytest.mark.parametrize("kind", ["sym", "ablate"])
def test_the_second_order_term_is_half_the_gauss_newton_form_of_the_output_change(tiny_gguf, kind, monkeypatch):
    """The screen with label draws minus the screen without is 1/2 dz^T (diag p - p p^T) dz / positions summed over
    positions, dz the logits' change along the head's output change (by finite differences, float64): the
    Gauss-Newton form, an explicit slow reference; Monte Carlo over 600 draws (relative sd ~6%): to 25%. It is
    never negative, and the same seed gives the same draws."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.clean import clean_pass
    from attnscope.interventions.screen import screen_pass

    softmax = torch.nn.functional.softmax
    monkeypatch.setattr(torch.nn.functional, "softmax", lambda x, dim=-1, dtype=None, **kw: softmax(x, dim=dim))
    subject = _double_subject(tiny_gguf)
    layer, head = 0, 1
    wins = {"text": make_windows(subject.maps, "builtin", 1, 24)}
    tok = wins["text"][:1]
    with patched(subject.model) as ctl:
        with torch.inference_mode():
            clean = clean_pass(subject, wins, ctl)

        def screened(samples: int, seed: int = 0) -> float:
            rows, _ = screen_pass(subject, wins, {layer: [head]}, [kind], clean, ctl, samples=samples, seed=seed)
            return float(rows[rows["measure"] == "loss"]["delta"].iloc[0])

        first, second = screened(0), screened(600)
        assert screened(600) == second and screened(600, seed=1) != second  # seeded draws
        # the head's exact output change, then the logits' change along it by central differences
        delta = _output_change(subject, ctl, tok, layer, head, kind, clean)
        eps = 1e-5
        dz = (_logits_with(subject, ctl, tok, layer, head, delta, eps)
              - _logits_with(subject, ctl, tok, layer, head, delta, -eps)) / (2 * eps)  # [i - 1, v]
        p = torch.softmax(_logits_with(subject, ctl, tok, layer, head, delta, 0.0), -1)
    form = ((p * dz * dz).sum(-1) - (p * dz).sum(-1) ** 2).mean()  # dz^T (diag p - p p^T) dz, over positions
    reference = 0.5 * float(form)
    assert reference > 1e-6 and second - first >= 0
    assert second - first == pytest.approx(reference, rel=0.25)


@pytest.mark.parametrize("softcap", [None, 3.0])
def test_the_drawn_gradients_share_the_output_product_and_equal_autograd_of_the_drawn_loss(softcap):
    """Each draw's gradient (the output matrix's part shared between the draws) equals autograd's gradient of the
    mean cross-entropy against the same drawn tokens, with and without a final softcap (float64)."""
    import types

    import torch

    from attnscope.interventions.loss import clean_logits, position_cross_entropy
    from attnscope.interventions.screen import _drawn_grads

    g = torch.Generator().manual_seed(3)
    i, e, v = 7, 5, 11
    w = torch.randn(v, e, generator=g, dtype=torch.float64)
    a = torch.randn(e, e, generator=g, dtype=torch.float64)
    subject = types.SimpleNamespace(softcap=softcap, out_weight=w)
    leaf = torch.randn(i, e, generator=g, dtype=torch.float64, requires_grad=True)
    hidden = torch.tanh(leaf @ a) * 3  # [i, e] a model below the output
    got = list(_drawn_grads(subject, hidden, [leaf], 4, seed=5))
    z = clean_logits(subject, hidden.detach())
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    y = torch.multinomial(torch.softmax(z.float(), -1), 4, replacement=True,
                          generator=torch.Generator().manual_seed(5)).T  # the same draws
    for k in range(4):
        h = torch.tanh(leaf @ a) * 3
        want = torch.autograd.grad(position_cross_entropy(subject, clean_logits(subject, h), y[k]).mean(), leaf)[0]
        torch.testing.assert_close(got[k][0], want, rtol=1e-5, atol=1e-7)  # (the softmax in float32)
    assert list(_drawn_grads(subject, torch.tanh(leaf @ a), [leaf], 0, seed=5)) == []


@needs_gguf
def test_controls_custom_and_resample_run_through_both_passes(tiny_gguf):
    """A custom function that returns the scores changes nothing (loss 0 on both passes), one that returns the
    symmetric part equals sym, scale:1 changes nothing, scale:0.5 runs beside sym by default; sym~ keeps each
    query's score spread; resample and anti~ give finite rows."""
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym,anti~,sym~,resample,scale:1,same,mysym", exact="all", workers=1,
                    custom={"same": lambda s, q, k, l, h: s, "mysym": lambda s, q, k, l, h: (s + s.T) / 2}, **SMALL)
    t = res.table
    assert {"scale:0.5", "sym", "sym~", "anti~", "resample", "scale:1", "same", "mysym"} == set(t["intervention"])
    loss = t[t["measure"] == "loss"].set_index(["layer", "head", "intervention"])
    for kind in ("same", "scale:1"):
        sub = loss.xs(kind, level="intervention")
        np.testing.assert_allclose(sub["delta"], 0, atol=1e-6)
        np.testing.assert_allclose(sub["delta_screen"], 0, atol=1e-6)
    np.testing.assert_allclose(loss.xs("mysym", level="intervention")["delta"],  # float32 scores, two routes
                               loss.xs("sym", level="intervention")["delta"], rtol=1e-3, atol=1e-5)
    beh = t[t["measure"] != "loss"].set_index(["layer", "head", "intervention", "measure"])["delta"]
    np.testing.assert_allclose(beh.xs("mysym", level="intervention"), beh.xs("sym", level="intervention"), atol=1e-6)
    assert np.isfinite(loss["delta"]).all() and np.isfinite(loss["delta_screen"]).all()
    assert "resample" not in set(t.loc[t["measure"] != "loss", "intervention"])  # an output intervention
    # what a head becomes is on the table too, on every row of its (head, intervention)
    said = {(r.layer, r.head, r.intervention): r.text for r in res.becomes.itertuples()}
    assert "becomes" in t.columns
    assert [x if isinstance(x, str) else None for x in t["becomes"]] == [
        said.get((r.layer, r.head, r.intervention)) for r in t.itertuples()]


def test_norm_matching_keeps_each_querys_spread_over_the_keys_it_sees():
    import torch

    from attnscope.interventions.attention import _spread_ratio

    g = torch.Generator().manual_seed(0)
    s = torch.randn(6, 6, generator=g, dtype=torch.float64)
    part = (s + s.T) / 2
    seen = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    matched = part * _spread_ratio(s, part, seen)[:, None]
    for i in range(1, 6):  # (query 0 sees one key: no spread, ratio 1)
        a, b = s[i, : i + 1], matched[i, : i + 1]
        assert float(b.std(unbiased=False)) == pytest.approx(float(a.std(unbiased=False)), rel=1e-12)
    assert _spread_ratio(s, part, seen)[0] == 1


@pytest.mark.parametrize("custom, needle", [({"sym": lambda *a: a[0]}, "built-in"), ({"x": 3}, "must be a function"),
                                            ({"a,b": lambda *a: a[0]}, "without commas"), ([1], "dict")])
def test_bad_custom_interventions_are_one_line(custom, needle):
    from attnscope.errors import AttnscopeError
    from attnscope.interventions import intervene

    with pytest.raises(AttnscopeError, match=needle):
        intervene("/no/such.gguf", custom=custom)


@pytest.mark.parametrize("kinds, needle", [("scale:-1", "A >= 0"), ("scale:nan", "A >= 0"), ("bogus", "scale:A")])
def test_bad_intervention_names_are_one_line(kinds, needle):
    from attnscope.errors import AttnscopeError
    from attnscope.interventions import intervene

    with pytest.raises(AttnscopeError, match=needle):
        intervene("/no/such.gguf", interventions=kinds)


def test_rank_interventions_keep_the_other_part_whole_and_truncate_this_one_optimally():
    import torch

    from attnscope.interventions.attention import _best_rank

    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 8, generator=g, dtype=torch.float64)
    anti = (x - x.T) / 2
    for r in (0, 2, 4, 8):
        low = _best_rank(anti, r)
        assert torch.linalg.matrix_rank(low) <= r
        s = torch.linalg.svdvals(anti)
        # Eckart-Young: the error is the norm of the singular values left out
        assert float(torch.linalg.norm(anti - low)) == pytest.approx(float(s[r:].norm()), abs=1e-10)
    assert torch.equal(_best_rank(anti, 8), anti)


@needs_gguf
def test_full_rank_changes_nothing_and_rank_zero_is_the_other_part(tiny_gguf):
    """anti-rank:R with R at least the window's length keeps the scores (loss 0); anti-rank:0 is sym and
    sym-rank:0 is anti."""
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym,anti,anti-rank:0,sym-rank:0,anti-rank:40", exact="all",
                    workers=1, controls=False, **SMALL)
    loss = res.table[res.table["measure"] == "loss"].set_index(["layer", "head", "intervention"])["delta"]
    np.testing.assert_allclose(loss.xs("anti-rank:40", level="intervention"), 0, atol=1e-6)
    np.testing.assert_allclose(loss.xs("anti-rank:0", level="intervention"), loss.xs("sym", level="intervention"),
                               rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(loss.xs("sym-rank:0", level="intervention"), loss.xs("anti", level="intervention"),
                               rtol=1e-3, atol=1e-5)


def test_a_layer_stored_without_the_bootstrap_columns_joins_with_nan_there():
    """A store written before the window bootstrap holds layers without ci_low_boot / ci_high_boot: the table is
    made, those columns empty (it was a KeyError)."""
    from attnscope.interventions.summary import join_screen

    screen = pd.DataFrame([dict(layer=0, head=0, intervention="sym", measure="loss", n=4, clean=3.0, value=3.1,
                                delta=0.1, ci_low=0.0, ci_high=0.2, p=0.04, sd=0.05, detectable_change=0.1,
                                ci_low_boot=0.05, ci_high_boot=0.15, pattern_change=0.3, output_change=0.2)])
    older = pd.DataFrame([dict(layer=0, head=0, intervention="sym", measure="loss", n=4, clean=3.0, value=3.2,
                               delta=0.2, ci_low=0.1, ci_high=0.3, p=0.01, sd=0.05, detectable_change=0.1)])
    out = join_screen(screen, [older], {(0, 0): "all"})
    row = out.iloc[0]
    assert row["exact"] and row["delta"] == 0.2 and row["delta_screen"] == 0.1
    assert np.isnan(row["ci_low_boot"]) and np.isnan(row["ci_high_boot"])


@needs_gguf
def test_a_zoo_of_models_intervened_on_pools_into_one_table_resumably(tmp_path, monkeypatch, cli_inproc):
    """atlas --zoo GROUP --interventions: every runnable model, one pooled table joined by model, the models side
    by side (interventions_models.csv, the page); a rerun reuses every model."""
    from attnscope.zoo.registry import ZooEntry

    a = write_llama_gguf_model(tmp_path / "a.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2, seed=0))
    b = write_llama_gguf_model(tmp_path / "b.gguf", tiny_llama_model(n_layers=3, d=32, n_heads=4, n_kv=2, seed=1))
    entries = [ZooEntry(id=name, family="llama", modality="text", type="decoder", params=None, groups=("t",),
                        source=str(path)) for name, path in (("tiny-a", a), ("tiny-b", b))]
    import attnscope.zoo.survey  # noqa: F401 - bound before the patch (as tests/atlas/test_atlas.py does)

    monkeypatch.setattr("attnscope.zoo.registry.select", lambda group, path=None: entries)
    out = tmp_path / "z"
    args = ("atlas", "--zoo", "t", "--out", str(out), "--windows", "2", "--length", "40", "--random-windows", "2",
            "--random-length", "10", "--n-boot", "50", "--interventions", "sym,anti", "--intervention-windows", "3",
            "--exact", "all", "--intervention-data", "builtin")
    code, _, err = cli_inproc(*args)
    assert code == 0, err
    iv = pd.read_parquet(out / "interventions.parquet")
    assert set(iv["model"]) == {"tiny-a", "tiny-b"}
    assert len(iv[(iv["measure"] == "loss")]) == (2 * 4 + 3 * 4) * 3  # every head of both x sym, anti, scale:0.5
    assert {"symmetry", "previous_token_random"} <= set(iv.columns)  # joined to each model's atlas rows
    summary = pd.read_csv(out / "interventions_models.csv")
    assert {"tiny-a", "tiny-b", "all"} <= set(summary["model"])
    assert "The models side by side" in (out / "atlas.html").read_text()
    assert (out / "methods.md").is_file()
    code, _, err = cli_inproc(*args)  # resumed: both models reused
    assert code == 0 and err.count("reused from the store") == 2, err
    again = pd.read_parquet(out / "interventions.parquet")
    pd.testing.assert_frame_equal(again, iv)


def test_the_slurm_executor_is_checked_before_any_work(tmp_path, monkeypatch, cli_inproc):
    """--executor slurm with a controller that does not answer: one line before the model loads (it used to come
    after the atlas and the screen, at the first submission)."""
    import os

    from attnscope.interventions import subject as subject_mod

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in ("sbatch", "srun"):
        (bin_dir / cmd).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(subject_mod, "_load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    code, _, err = cli_inproc("atlas", str(gguf), "--out", str(tmp_path / "o"), "--interventions", "sym",
                              "--executor", "slurm")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "Slurm is not reachable (Unable to contact slurm controller)" in err
    assert not (tmp_path / "o").exists()


def test_the_draws_are_made_one_at_a_time_so_a_huge_number_holds_no_more_memory():
    """The draws' gradients come one at a time, as they are used (never all of them held, nor all the labels drawn
    up front): the first of 10^12 draws is there at once, as large as one."""
    import types

    import torch

    from attnscope.interventions.screen import _drawn_grads

    g = torch.Generator().manual_seed(3)
    w = torch.randn(11, 5, generator=g, dtype=torch.float64)
    subject = types.SimpleNamespace(softcap=None, out_weight=w)
    leaf = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    hidden = torch.tanh(leaf) * 3
    first = next(iter(_drawn_grads(subject, hidden, [leaf], 10**12, seed=5)))
    assert first[0].shape == leaf.shape and bool(torch.isfinite(first[0]).all())


@needs_gguf
def test_the_screen_reports_its_progress_draw_by_draw(tiny_gguf):
    """A window with many draws is long: the screen's progress moves within it, and adds up to one per window."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.interventions import open_subject
    from attnscope.interventions.attention import patched
    from attnscope.interventions.clean import clean_pass
    from attnscope.interventions.screen import screen_pass

    subject = open_subject(str(tiny_gguf))
    wins = {"text": make_windows(subject.maps, "builtin", 2, 16)}
    ticks: list[float] = []
    with patched(subject.model) as ctl:
        with torch.inference_mode():
            clean = clean_pass(subject, wins, ctl)
            screen_pass(subject, wins, {0: [1]}, ["sym"], clean, ctl, tick=lambda n=1: ticks.append(n), samples=3)
    assert len(ticks) > 2 and sum(ticks) == pytest.approx(2.0)


@needs_gguf
def test_a_stored_screen_is_not_reused_for_a_custom_intervention_of_other_code(tiny_gguf, tmp_path):
    """The screen's record carries the custom functions' fingerprints, as the exact layers' do: the same name with
    other code is screened again."""
    from attnscope.interventions import intervene

    store = tmp_path / "store"
    small = dict(windows=2, length=24, random_windows=0, exact=0, controls=False, store=store, workers=1)
    same = intervene(str(tiny_gguf), interventions="mine", custom={"mine": lambda s, q, k, l, h: s}, **small)
    zeroed = intervene(str(tiny_gguf), interventions="mine", custom={"mine": lambda s, q, k, l, h: s * 0}, **small)
    loss = lambda r: r.table.loc[r.table["measure"] == "loss", "delta_screen"].abs().max()  # noqa: E731
    assert loss(same) < 1e-6 < loss(zeroed)


@needs_gguf
def test_a_first_order_screen_is_called_first_order_on_the_console_and_in_the_methods(tiny_gguf, tmp_path, cli_inproc):
    """--screen-samples 0 is the first-order screen: the console and methods.md do not call it second order."""
    out = tmp_path / "o"
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(out), "--windows", "2", "--length", "40",
                              "--random-windows", "2", "--random-length", "10", "--n-boot", "50",
                              "--interventions", "sym", "--intervention-windows", "2", "--exact", "0",
                              "--screen-samples", "0")
    assert code == 0, err
    assert "every head to first order" in err and "second order" not in err
    methods = (out / "methods.md").read_text()
    assert "first order after the softmax" in methods and "second order" not in methods and "GGN" not in methods
