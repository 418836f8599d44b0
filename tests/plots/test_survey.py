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


def test_point_names_do_not_overlap_and_stay_inside_the_axes():
    """The text panel of the offline-real survey (docs/survey.md), where fixed offsets overlapped."""
    models = [  # name, stack, params, s median, d median
        ("sentence-transformers/paraphrase-MiniLM-L3-v2", "encoder", 17.4e6, 0.55, -0.07),
        ("sentence-transformers/all-MiniLM-L6-v2", "encoder", 22.7e6, 0.49, -0.10),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "decoder", 135e6, 0.10, -0.25),
        ("google/gemma-3-270m", "decoder", 268e6, 0.04, 0.01),
        ("Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ", "decoder", 494e6, 0.15, -0.07),
    ]
    rows = [dict(model=m, stack=st, modality="text", type=st, params=p, paper_symmetry_median=None,
                 symmetry_median=s_, symmetry_q1=s_ - 0.05, symmetry_q3=s_ + 0.05,
                 directionality_median=d_, directionality_q1=d_ - 0.05, directionality_q3=d_ + 0.05)
            for m, st, p, s_, d_ in models]
    fig = plot_scores_vs_params(pd.DataFrame(rows))
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(boxes) == len(models)
        inside = ax.get_window_extent(renderer)
        for i, a in enumerate(boxes):
            assert a.x0 >= inside.x0 - 1 and a.x1 <= inside.x1 + 1, ax.texts[i].get_text()
            for b in boxes[i + 1:]:  # at most a sliver (the boxes include the glyphs' padding)
                w = max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0))
                h = max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))
                assert w * h < 0.1 * min(a.width * a.height, b.width * b.height), ax.texts[i].get_text()


def test_size_ticks_read_as_counts():
    fig = plot_scores_vs_params(summary_table())
    fig.draw_without_rendering()
    labels = [t.get_text() for t in fig.axes[2].get_xticklabels() if t.get_text()]
    assert labels and all(lab[-1] in "kMBT" or lab.isdigit() for lab in labels), labels
