"""The torch kernel (live-weight logging) against the slow explicit definitions and the numpy kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.families.base import AttentionFactors
from attnscope.geometry import kernels as npk
from attnscope.geometry import score_factors
from attnscope.geometry import torch_kernels as tk


def factors(seed: int, h: int, g: int, d: int, c: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((h, d, e)).astype(np.float32)
    k = rng.standard_normal((g, c, e)).astype(np.float32)
    q[:, rng.integers(d)] *= 6  # an outlier row, so directionality has something to count
    return q, k


def explicit_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[h + 1, 5] from the explicit matrices and the reference definitions (the slow truth)."""
    r = q.shape[0] // k.shape[0]
    forms = [q[i].astype(np.float64) @ k[i // r].astype(np.float64).T for i in range(q.shape[0])]
    forms.append(sum(forms))
    rows = []
    for m in forms:
        rn, cn = np.linalg.norm(m, axis=1), np.linalg.norm(m, axis=0)
        _, n_r, n_c = npk.directionality(rn[None], cn[None])
        sym = npk.symmetry_ref(m) if m.shape[0] == m.shape[1] else np.nan
        rows.append([sym, npk.directionality_ref(m), np.linalg.norm(m), n_r[0], n_c[0]])
    return np.array(rows)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), g=st.sampled_from([1, 2]), r=st.sampled_from([1, 3]),
       d=st.integers(5, 40), extra_c=st.sampled_from([0, 0, 3]), e=st.integers(1, 6))
def test_scores_match_the_explicit_definitions(seed, g, r, d, extra_c, e):
    q, k = factors(seed, g * r, g, d, d + extra_c, e)
    got = tk.qk_scores([(torch.from_numpy(q), torch.from_numpy(k))])[0].numpy()  # [h + 1, 5]
    want = explicit_scores(q, k)
    np.testing.assert_allclose(got[:, :3], want[:, :3], rtol=2e-5, atol=2e-5)
    assert np.isnan(got[:, 0]).tolist() == np.isnan(want[:, 0]).tolist()  # non-square: NaN symmetry


CUDA = pytest.mark.gpu


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("shape", [(4, 4, 64, 64, 16), (8, 2, 96, 96, 8), (2, 2, 32, 40, 24)])
def test_same_records_as_the_numpy_kernel(shape, device):
    """Both layer routes (factored for small g*e, explicit otherwise) and GQA, as score_factors gives them;
    on a GPU the same numbers to float tolerance."""
    h, g, d, c, e = shape
    q, k = factors(1, h, g, d, c, e)
    got = tk.qk_scores([(torch.from_numpy(q).to(device), torch.from_numpy(k).to(device))])[0].cpu().numpy()
    recs = score_factors(AttentionFactors("encoder", 0, q, k))
    want = np.array([[r["symmetry"], r["directionality"], r["frobenius_norm"], r["n_outlier_rows"],
                      r["n_outlier_cols"]] for r in recs], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_zero_and_non_finite_heads_follow_the_numpy_conventions():
    q, k = factors(2, 4, 2, 16, 16, 4)
    q[1] = 0.0  # a zero head: symmetry 0, directionality 0, norm 0
    q[2, 3, 1] = np.nan  # a non-finite head: NaN, and its layer NaN; the others unaffected
    got = tk.qk_scores([(torch.from_numpy(q), torch.from_numpy(k))])[0].numpy()
    np.testing.assert_array_equal(got[1, :3], [0.0, 0.0, 0.0])
    assert np.isnan(got[2]).all() and np.isnan(got[4]).all()
    clean = explicit_scores(np.nan_to_num(q), k)
    np.testing.assert_allclose(got[[0, 3], :3], clean[[0, 3], :3], rtol=2e-5, atol=2e-5)


def test_bad_factors_are_a_clear_error():
    with pytest.raises(ValueError, match="cannot share"):
        tk.head_stats(torch.zeros(3, 4, 2), torch.zeros(2, 4, 2))
    with pytest.raises(ValueError, match="factors must be"):
        tk.head_stats(torch.zeros(3, 4, 2), torch.zeros(3, 4, 5))
