"""The mean-field map of the 1-bit self-attention network: the readable numpy reference.

Owns the compiled form of a config (:class:`MeanField`), the two independent evaluations of the
semantic-column average (column-pattern correlations vs the segment / direct column form), the
dynamical :class:`State` (context window of m^v, m^k plus A, batched over parameter values), its
initialisation from x_0 or a checkpoint file, and :func:`step` / :func:`simulate_reference`, the pure
numpy batch implementation that the numba kernels in :mod:`attnscope.dynamics.kernels` are tested
against.

Map (t >= 1, phase phi = t mod C), per batch element b with parameters (beta_o, g, eps):
    T_k      = tanh(beta_o * sum_c U[k,c] A_{t-1,c})                 semantic column groups k
    m^a_t    = (1-eps) * sum_k Cf[a,:,k] T_k + eps * pos[a, phi]     a in (o, v, q, k)
    window[phi] <- (m^v_t, m^k_t)
    A_t      = sum_tau softmax_tau(g * m^q_t . m^k_tau) m^v_tau      over filled slots
    m^o_se,t = sum_k Cf[o,:,k] T_k                                    the plotted observable

Legend: b batch of parameter values, a matrix (o, v, q, k), c/m features (M), k column group (K),
s context slot (C), phi positional phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnscope.errors import ConfigError, FormatError, InputError, check_type

from .model import MATRICES, DynamicsConfig, positional_code

O, V, Q, K_ = 0, 1, 2, 3  # matrix indices in the stacked arrays


@dataclass(frozen=True)
class MeanField:
    """Compiled map: U [K', M] o-patterns, Cf [4, M, K'] coefficients, pos [4, C, M], m0 [4, M]."""

    U: np.ndarray
    Cf: np.ndarray
    pos: np.ndarray
    m0: np.ndarray
    M: int
    C: int


def pattern_correlations(cfg: DynamicsConfig) -> tuple[np.ndarray, np.ndarray]:
    """Group semantic columns by their W^o sign pattern modulo a global sign (tanh is odd).

    Returns U [n_pat, M] (first entry +1) and Cf [4, M, n_pat] with
    Cf[a, b, u] = (1/N_se) sum_{i: W^o_i = s u} s W^a_{b,i}: the column-pattern correlations.
    """
    cols_o = cfg.columns["o"]  # [M, K]
    sign = np.where(cols_o[0] >= 0, 1.0, -1.0)  # [K]
    canon = cols_o * sign  # [M, K], first row +1
    U, inverse = np.unique(canon.T, axis=0, return_inverse=True)  # U [n_pat, M]
    inverse = np.asarray(inverse).reshape(-1)
    w = cfg.counts * sign / cfg.N_se  # [K]
    Cf = np.zeros((4, cfg.M, U.shape[0]))
    for ai, a in enumerate(MATRICES):
        for k in range(cfg.K):
            Cf[ai, :, inverse[k]] += w[k] * cfg.columns[a][:, k]
    return U.astype(np.float64), Cf


def compile_config(cfg: DynamicsConfig) -> MeanField:
    """The compiled map used by every simulation path (pattern-correlation form)."""
    check_type(cfg, DynamicsConfig, "cfg", 'a DynamicsConfig (e.g. dynamics.load_preset("paper"))')
    U, Cf = pattern_correlations(cfg)
    C = cfg.C
    codes = positional_code(np.arange(C), cfg.P)  # [C, P]
    pos = np.zeros((4, C, cfg.M))
    for ai, a in enumerate(MATRICES):
        if cfg.P:
            pos[ai] = codes @ cfg.positional[a].T / cfg.P  # [C, M]
    # t = 0: plain overlap of x_0 with all N bits (no eps weighting)
    x = cfg.x0_columns()  # [K]
    p0 = positional_code(0, cfg.P)  # [P]
    m0 = np.stack([(cfg.columns[a] @ (cfg.counts * x) + (cfg.positional[a] @ p0 if cfg.P else 0.0)) / cfg.N
                   for a in MATRICES])
    return MeanField(U=U, Cf=Cf, pos=pos, m0=m0, M=cfg.M, C=C)


def average_patterns(mf: MeanField, beta: np.ndarray, A: np.ndarray) -> np.ndarray:
    """<W^a_b tanh(beta W^o . A)> over semantic columns, pattern form. A [B, M] -> [B, 4, M]."""
    T = np.tanh(beta[:, None] * (A @ mf.U.T))  # [B, K']
    return np.einsum("amk,bk->bam", mf.Cf, T)


def average_columns(cfg: DynamicsConfig, beta: np.ndarray, A: np.ndarray) -> np.ndarray:
    """The same average straight from the column groups (segment form: (1/n_seg) sum_s sigma tanh)."""
    W = np.stack([cfg.columns[a] for a in MATRICES])  # [4, M, K]
    T = np.tanh(beta[:, None] * (A @ cfg.columns["o"]))  # [B, K]
    return np.einsum("amk,k,bk->bam", W, cfg.counts / cfg.N_se, T)


@dataclass
class State:
    """Batched dynamical state: window mv, mk [B, C, M] (slot = t mod C), A [B, M], next time t."""

    mv: np.ndarray
    mk: np.ndarray
    A: np.ndarray
    t: int

    @property
    def filled(self) -> int:
        return min(self.mv.shape[1], self.t)

    def copy(self) -> "State":
        return State(self.mv.copy(), self.mk.copy(), self.A.copy(), self.t)

    def take(self, idx) -> "State":
        return State(self.mv[idx].copy(), self.mk[idx].copy(), self.A[idx].copy(), self.t)

    def broadcast(self, B: int) -> "State":
        """Repeat a single state (B = 1) B times."""
        if self.mv.shape[0] == B:
            return self.copy()
        if self.mv.shape[0] != 1:
            raise InputError(f"cannot broadcast a batch of {self.mv.shape[0]} states to {B}")
        rep = lambda x: np.repeat(x, B, axis=0)  # noqa: E731
        return State(rep(self.mv), rep(self.mk), rep(self.A), self.t)


def initial_state(mf: MeanField, B: int = 1) -> State:
    """t = 0: one token x_0, slot 0 = (m^v_0, m^k_0), A_0 = m^v_0; the next step is t = 1."""
    mv = np.zeros((B, mf.C, mf.M))
    mk = np.zeros((B, mf.C, mf.M))
    mv[:, 0] = mf.m0[V]
    mk[:, 0] = mf.m0[K_]
    return State(mv=mv, mk=mk, A=np.repeat(mf.m0[V][None], B, axis=0), t=1)


INIT_KEYS = ("mv_window", "mk_window", "mq_window", "att_window")


def load_state(path: str | Path, mf: MeanField) -> State:
    """Read a checkpoint npz (mv_window [C,M], mk_window [C,M], mq_window [M], att_window [M]).

    Oldest slot first; the run continues at t = C (or at the saved ``t`` when the file has one).
    A leading batch axis [B, ...] is accepted too.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such init-state file: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: np.asarray(z[k], dtype=np.float64) for k in z.files}
    except Exception as exc:
        raise FormatError(f"cannot read init-state {path}: {exc.__class__.__name__}: {exc}") from exc
    missing = [k for k in INIT_KEYS if k not in data]
    if missing:
        raise FormatError(f"init-state {path} lacks key(s) {', '.join(missing)} "
                          f"(needs {', '.join(INIT_KEYS)})")
    C, M = mf.C, mf.M
    batched = data["mv_window"].ndim == 3
    lead = (data["mv_window"].shape[0],) if batched else ()
    want = {"mv_window": (*lead, C, M), "mk_window": (*lead, C, M), "mq_window": (*lead, M),
            "att_window": (*lead, M)}
    for k, shape in want.items():
        if data[k].shape != shape:
            raise FormatError(f"init-state {path}: {k} has shape {list(data[k].shape)}, expected "
                              f"{list(shape)} (C = {C}, M = {M})")
        if not np.all(np.isfinite(data[k])):
            raise FormatError(f"init-state {path}: {k} has non-finite values")
    t = int(data["t"]) if "t" in data else C
    add = (lambda x: x) if batched else (lambda x: x[None])
    return State(mv=add(data["mv_window"]).copy(), mk=add(data["mk_window"]).copy(),
                 A=add(data["att_window"]).copy(), t=t)


def save_state(path: str | Path, state: State, mq: np.ndarray | None = None) -> Path:
    """Write a checkpoint npz (atomically) in the format :func:`load_state` reads.

    The window is stored slot-indexed (slot k holds the token at t = k mod C), which is oldest-first
    whenever t is a multiple of C; ``t`` is stored so a run resumes in phase.
    """
    from attnscope.tables import atomic_write_bytes

    return atomic_write_bytes(path, state_bytes(state, mq))


def state_bytes(state: State, mq: np.ndarray | None = None) -> bytes:
    """The bytes :func:`save_state` writes."""
    import io

    B = state.mv.shape[0]
    squeeze = (lambda x: x[0]) if B == 1 else (lambda x: x)
    mq = np.zeros_like(state.A) if mq is None else mq
    buf = io.BytesIO()
    np.savez(buf, mv_window=squeeze(state.mv), mk_window=squeeze(state.mk), mq_window=squeeze(mq),
             att_window=squeeze(state.A), t=np.int64(state.t))
    return buf.getvalue()


def params_arrays(cfg: DynamicsConfig, beta_o=None, gamma=None, eps=None) -> tuple[np.ndarray, ...]:
    """Broadcast per-value parameters to (beta [B], g [B], eps [B]) float64 arrays."""
    beta = np.atleast_1d(np.asarray(cfg.beta_o if beta_o is None else beta_o, dtype=np.float64))
    gam = np.atleast_1d(np.asarray(cfg.gamma if gamma is None else gamma, dtype=np.float64))
    ep = np.atleast_1d(np.asarray(cfg.eps if eps is None else eps, dtype=np.float64))
    try:
        beta, gam, ep = np.broadcast_arrays(beta, gam, ep)
    except ValueError as exc:
        raise InputError("beta_o, gamma and eps value lists must have the same length (or one value)") from exc
    for name, arr in (("beta_o", beta), ("gamma", gam), ("eps", ep)):
        if arr.size == 0:
            raise InputError(f"no {name} values given")
        if not np.all(np.isfinite(arr)):
            raise ConfigError(f"{name} must be finite")
    if np.any((ep < 0) | (ep > 1)):
        raise ConfigError("eps must be in [0, 1]")
    return beta.copy(), gam / np.sqrt(cfg.M), ep.copy()


def step(mf: MeanField, state: State, beta: np.ndarray, g: np.ndarray, eps: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray]:
    """Advance every batch element by one step in place; returns (m [B, 4, M], mo_se [B, M])."""
    phi = state.t % mf.C
    avg = average_patterns(mf, beta, state.A)  # [B, 4, M]
    m = (1.0 - eps)[:, None, None] * avg + eps[:, None, None] * mf.pos[:, phi][None]
    attend(state, m, g)
    return m, avg[:, O]


def attend(state: State, m: np.ndarray, g: np.ndarray) -> None:
    """Store (m^v_t, m^k_t) [B, M] in slot t mod C, then A_t = softmax-weighted m^v over filled slots."""
    phi = state.t % state.mv.shape[1]
    state.mv[:, phi] = m[:, V]
    state.mk[:, phi] = m[:, K_]
    state.t += 1
    n = state.filled
    s = g[:, None] * np.einsum("bm,bsm->bs", m[:, Q], state.mk[:, :n])  # [B, n]
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=1, keepdims=True)
    state.A = np.einsum("bs,bsm->bm", p, state.mv[:, :n])


def simulate_reference(mf: MeanField, state: State, beta, g, eps, n_steps: int) -> dict[str, np.ndarray]:
    """Run ``n_steps`` steps with the numpy reference; returns m [B,n,4,M], mo_se [B,n,M], A [B,n,M]."""
    B = state.A.shape[0]
    out = {"m": np.empty((B, n_steps, 4, mf.M)), "mo_se": np.empty((B, n_steps, mf.M)),
           "A": np.empty((B, n_steps, mf.M))}
    for i in range(n_steps):
        m, mo = step(mf, state, beta, g, eps)
        out["m"][:, i], out["mo_se"][:, i], out["A"][:, i] = m, mo, state.A
    return out
