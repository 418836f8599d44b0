"""Survey figures on a tiny hand-made summary table: points and error bars are the table's numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.plots.survey import plot_encoder_decoder, plot_scores_vs_params


def summary_table() -> pd.DataFrame:
    rows = [  # model, stack, modality, type, params, s (med, q1, q3), d (med, q1, q3), paper s med
        ("gpt2", "decoder", "text", "decoder", 124e6, (0.15, 0.1, 0.2), (-0.5, -0.6, -0.4), 0.15),
        ("bert-base-uncased", "encoder", "text", "encoder", 110e6, (0.6, 0.5, 0.7), (0.1, 0.0, 0.2), 0.55),
        ("openai/whisper-tiny", "encoder", "audio", "encoder-decoder", 39e6, (0.3, 0.2, 0.4), (0.0, -0.1, 0.1), None),
        ("openai/whisper-tiny", "decoder", "audio", "encoder-decoder", 39e6, (0.1, 0.0, 0.2), (-0.3, -0.4, -0.2), None),
        ("openai/whisper-tiny", "cross", "audio", "encoder-decoder", 39e6, (0.0, -0.1, 0.1), (-0.2, -0.3, -0.1), None),
        ("/x/local/model", "encoder", "text", "encoder", None, (0.9, 0.8, 1.0), (0.9, 0.8, 1.0), None),
    ]
    recs = []
    for model, stack, mod, typ, params, s, d, paper in rows:
        rec = dict(model=model, stack=stack, modality=mod, type=typ, params=params, paper_symmetry_median=paper)
        for col, (med, q1, q3) in (("symmetry", s), ("directionality", d)):
            rec.update({f"{col}_median": med, f"{col}_q1": q1, f"{col}_q3": q3})
        recs.append(rec)
    return pd.DataFrame(recs)


def test_scores_vs_params_points_and_bars_are_the_summary():
    s = summary_table()
    fig = plot_scores_vs_params(s)
    assert len(fig.axes) == 4  # 2 scores x (text, audio); the model without params is left out
    text_s = fig.axes[0]
    enc = next(c for c in text_s.containers if c.get_label().startswith("encoders ("))
    x, y = enc.lines[0].get_data()
    np.testing.assert_array_equal(x, [110e6])
    np.testing.assert_array_equal(y, [0.6])
    segs = enc.lines[2][0].get_segments()
    np.testing.assert_allclose(segs[0], [[110e6, 0.5], [110e6, 0.7]])  # the 25-75 % bar
    paper = next(ln for ln in text_s.lines if ln.get_label() == "encoders, paper")
    np.testing.assert_array_equal(paper.get_ydata(), [0.55])
    assert {t.get_text() for t in text_s.texts} == {"gpt2", "bert-base-uncased"}
    plain = plot_scores_vs_params(s, show_paper=False)
    assert not any("paper" in ln.get_label() for ax in plain.axes for ln in ax.lines)


def test_scores_vs_params_without_a_parameter_count_draws_nothing():
    assert plot_scores_vs_params(summary_table().assign(params=None)) is None


def test_encoder_decoder_is_the_encoder_decoder_models_only():
    s = summary_table()
    fig = plot_encoder_decoder(s)
    sym = fig.axes[0]
    meds = {c.get_label(): c.lines[0].get_ydata()[0] for c in sym.containers}
    assert meds == {"encoder": 0.3, "decoder": 0.1, "cross": 0.0}
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["whisper-tiny"]
    assert plot_encoder_decoder(s[s.model == "gpt2"]) is None
