"""run_zoo(spectra=True): the spectral columns in every model's rows, the setting kept apart in the store, and
`attnscope geometry plot` drawing the rank cascade of such a survey (and only of such a survey)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnscope.errors import InputError
from attnscope.geometry import SPECTRA_COLUMNS, score
from attnscope.zoo import load_registry
from attnscope.zoo.survey import run_zoo
from tests.conftest import invoke_cli


def test_survey_with_spectra_and_its_cascade(fake_zoo, tmp_path, monkeypatch, capsys):
    out = tmp_path / "survey"
    df = run_zoo("fake-text", out, zoo_file=fake_zoo, executor="inline", progress=False, spectra=True)
    assert set(SPECTRA_COLUMNS) <= set(df.columns) and df["anti_rank"].notna().all()
    assert json.loads((out / "survey.json").read_text())["spectra"] is True
    entry = next(e for e in load_registry(fake_zoo) if e.id == "fake/llama-b")
    direct = score(entry.source, spectra=True)
    key = ["stack", "level", "layer", "head"]
    got = df[df["model"] == "fake/llama-b"].sort_values(key)[list(SPECTRA_COLUMNS)].to_numpy(float)
    np.testing.assert_allclose(got, direct.sort_values(key)[list(SPECTRA_COLUMNS)].to_numpy(float), rtol=0, atol=0)
    with pytest.raises(InputError, match=r"spectra=True \(now None\)"):  # one store, one choice
        run_zoo("fake-text", out, zoo_file=fake_zoo, executor="inline", progress=False)
    code, stdout, err = invoke_cli(monkeypatch, capsys, "geometry", "plot", out, "--out", tmp_path / "figs")
    assert code == 0, err
    assert (tmp_path / "figs" / "survey_rank_cascade.png").is_file()
    assert (tmp_path / "figs" / "survey_rank_cascade.csv").is_file()


def test_plain_survey_has_no_cascade(fake_zoo, tmp_path, monkeypatch, capsys):
    out = tmp_path / "plain"
    df = run_zoo("fake-text", out, zoo_file=fake_zoo, executor="inline", progress=False)
    assert not set(SPECTRA_COLUMNS) & set(df.columns)
    assert "spectra" not in json.loads((out / "survey.json").read_text())  # earlier stores stay valid
    code, _, err = invoke_cli(monkeypatch, capsys, "geometry", "plot", out, "--out", tmp_path / "figs")
    assert code == 0, err
    assert not (tmp_path / "figs" / "survey_rank_cascade.png").exists()
