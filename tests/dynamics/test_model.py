"""Config, presets, weights and bad input of attnscope.dynamics.model."""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.dynamics import model as dm
from attnscope.errors import ConfigError, InputError


def test_paper_preset_matches_reference():
    cfg = dm.load_preset("paper")
    assert (cfg.M, cfg.P, cfg.C, cfg.N_se, cfg.N) == (3, 2, 4, 99, 101)
    assert cfg.eps == 0.02 and cfg.gamma == 220.0
    assert cfg.g == pytest.approx(220.0 / np.sqrt(3))
    W = cfg.full_matrices()
    assert W["o"].shape == (3, 101)
    # row 1 of W^o: segments (-1, 1, -1) of 33 bits, then PE (1, -1)
    np.testing.assert_array_equal(W["o"][1, :33], -1)
    np.testing.assert_array_equal(W["o"][1, 33:66], 1)
    np.testing.assert_array_equal(W["o"][1, 99:], [1, -1])
    np.testing.assert_array_equal(cfg.positional["q"], [[1, -1], [1, 1], [-1, -1]])


def test_positional_code_msb_first():
    np.testing.assert_array_equal(dm.positional_code(np.arange(4), 2),
                                  [[-1, -1], [-1, 1], [1, -1], [1, 1]])
    np.testing.assert_array_equal(dm.positional_code(5, 2), [-1, 1])  # 5 mod 4 = 1


def test_roundtrip_dict_and_toml(tmp_path):
    cfg = dm.load_preset("paper")
    again = dm.from_dict(cfg.to_dict())
    for a in dm.MATRICES:
        np.testing.assert_array_equal(again.columns[a], cfg.columns[a])
    toml = tmp_path / "c.toml"
    toml.write_text('features = 1\npositional_bits = 1\neps = 0.1\ngamma = 2.0\nbeta_o = 0.5\n'
                    'segment_length = 4\n'
                    '[weights.o]\nsegments = [[1, -1]]\npositional = [[1]]\n'
                    '[weights.v]\nsegments = [[1, 1]]\npositional = [[-1]]\n'
                    '[weights.q]\nsegments = [[-1, 1]]\npositional = [[1]]\n'
                    '[weights.k]\nsegments = [[1, -1]]\npositional = [[1]]\n')
    c = dm.load_config(toml)
    assert (c.M, c.C, c.N_se) == (1, 2, 8)


def test_full_matrices_form_and_random_seed():
    r1, r2 = dm.random_config(M=4, P=3, n_segments=5, seed=7), dm.random_config(M=4, P=3, n_segments=5, seed=7)
    np.testing.assert_array_equal(r1.columns["k"], r2.columns["k"])
    W = r1.full_matrices()
    full = dm.from_dict({"features": 4, "positional_bits": 3, "gamma": 1.0,
                         "weights": {a: {"full": W[a].tolist()} for a in dm.MATRICES}})
    assert full.K == W["o"].shape[1] - 3 and full.C == 8


def test_overrides():
    cfg = dm.apply_overrides(dm.load_preset("paper"), ["beta_o=1.3", "eps=0.05"])
    assert cfg.beta_o == 1.3 and cfg.eps == 0.05
    with pytest.raises(ConfigError, match="cannot override"):
        dm.apply_overrides(cfg, ["M=4"])


def _paper_dict():
    return dm.load_preset("paper").to_dict()


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(features=4), "rows but M = 4"),
    (lambda d: d.update(positional_bits=3), r"positional part has shape \[3, 2\], expected \[M=3, P=3\]"),
    (lambda d: d.update(beta_o=float("nan")), "beta_o must be finite"),
    (lambda d: d.update(gamma=float("inf")), "gamma must be finite"),
    (lambda d: d["weights"]["v"].update(columns=[[1, 2, 1]] * 3), r"only \+1 and -1"),
    (lambda d: d["weights"]["q"].update(columns=[[1, 1]] * 3), "2 semantic columns, expected 3"),
    (lambda d: d.update(x0={"matrix": "z", "row": 0}), "x0 matrix"),
    (lambda d: d.update(eps=2.0), r"eps must be in \[0, 1\]"),
])
def test_bad_config_one_line(mutate, match):
    d = _paper_dict()
    mutate(d)
    with pytest.raises(ConfigError, match=match) as exc:
        dm.from_dict(d)
    assert "\n" not in str(exc.value)


def test_non_finite_override_and_unknown_preset():
    with pytest.raises(ConfigError, match="finite"):
        dm.apply_overrides(dm.load_preset("paper"), {"beta_o": float("nan")})
    with pytest.raises(InputError, match="unknown dynamics preset"):
        dm.load_preset("nope")
