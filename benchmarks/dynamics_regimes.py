"""Validation of the bifurcation diagram's regime labels against long runs, and the cost of the error
estimate. Reproduces the numbers in docs/dynamics.md ("Regime labels").

For every value of the zoom window (or every ``--every``-th of the 4001), the default label comes from
``attnscope.dynamics.bifurcation`` exactly as the CLI runs it (paper protocol, 120,000 steps, the last
20,000 saved, 5000 Lyapunov steps). The long-run label of the same value continues from the same
protocol start: 120,000 steps (distinct count of the last 20,000), then 20,000 steps aligning the
tangent vectors and ``--long`` averaged Lyapunov steps; it is the same combined rule with that run's
error, 20x smaller (``uncertain`` where even the long run cannot resolve the value: agreement is
reported over the resolved values).

    PYTHONPATH=src python benchmarks/dynamics_regimes.py [--every 1] [--long 100000] [--out FILE.parquet]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from attnscope.dynamics import bifurcation, compile_config, load_preset, protocol_checkpoint
from attnscope.dynamics.lyapunov import lyapunov_estimate
from attnscope.dynamics.meanfield import params_arrays
from attnscope.dynamics.regimes import classify
from attnscope.dynamics.simulate import advance

PAPER_VALUES = (1.255, 1.26405, 1.266, 1.27, 1.28)
PAPER_QUASI = (1.255, 1.26405)


def long_run(cfg, values: np.ndarray, long_steps: int, chunk: int = 512) -> pd.DataFrame:
    """Long-run labels (see module docstring) for ``values`` of the zoom window."""
    mf = compile_config(cfg)
    ck = protocol_checkpoint(cfg, "beta_o", np.linspace(1.24, 1.28, 4001), 120_000)
    rows = []
    for i in range(0, values.size, chunk):
        v = values[i:i + chunk]
        beta, g, eps = params_arrays(cfg, beta_o=v)
        s = ck.broadcast(v.size)
        obs = advance(mf, s, beta, g, eps, 120_000, transient=100_000, n_tail=0, max_section=300)
        est = lyapunov_estimate(mf, s, beta, g, eps, n_steps=long_steps, k=2, transient=20_000, blocks=10)
        for j in range(v.size):
            lab = classify(est.exponents[j], est.error[j], long_steps, obs.n_distinct[j], len(obs.section[j]))
            rows.append({"beta_o": v[j], "long_lambda_1": est.exponents[j, 0], "long_error_1": est.error[j, 0],
                         "long_regime": lab})
    return pd.DataFrame(rows)


def error_cost(cfg, n: int = 512, lyap_steps: int = 5000, repeats: int = 3) -> tuple[float, float]:
    """Seconds of the Lyapunov estimate with 1 block (no error) and with 10, interleaved; min of repeats."""
    mf = compile_config(cfg)
    beta, g, eps = params_arrays(cfg, beta_o=np.linspace(1.24, 1.28, n))
    ck = protocol_checkpoint(cfg, "beta_o", beta, 2000)
    times = {1: [], 10: []}
    for _ in range(repeats):
        for blocks in (1, 10):
            s = ck.broadcast(n)
            t0 = time.perf_counter()
            lyapunov_estimate(mf, s, beta, g, eps, n_steps=lyap_steps, k=2, blocks=blocks)
            times[blocks].append(time.perf_counter() - t0)
    return min(times[1]), min(times[10])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=1, help="validate every n-th of the 4001 zoom values")
    ap.add_argument("--long", type=int, default=100_000, help="averaged Lyapunov steps of the long run")
    ap.add_argument("--out", default=None, help="also write the per-value comparison here (.parquet)")
    a = ap.parse_args()
    cfg = load_preset("paper")
    full = np.linspace(1.24, 1.28, 4001)
    values = np.unique(np.round(np.concatenate([full[::a.every], PAPER_VALUES]), 10))
    t0 = time.perf_counter()
    res = bifurcation(cfg, values, steps=120_000, transient=100_000, lyap_steps=5000,
                      checkpoint_steps=120_000)
    t_default = time.perf_counter() - t0
    # the protocol checkpoint comes from the largest value: 1.28 in both runs
    default = res.table[["beta_o", "regime", "regime_lyapunov", "regime_distinct", "lambda_1", "lambda_1_err",
                         "n_distinct", "n_section"]]
    t0 = time.perf_counter()
    long = long_run(cfg, values, a.long)
    t_long = time.perf_counter() - t0
    df = default.merge(long, on="beta_o")
    unresolved = int((df["long_regime"] == "uncertain").sum())
    resolved = df[df["long_regime"] != "uncertain"]
    agree = float(np.mean(resolved["regime"] == resolved["long_regime"]))
    uncertain = int((df["regime"] == "uncertain").sum())
    wrong = resolved[(resolved["regime"] != resolved["long_regime"]) & (resolved["regime"] != "uncertain")]
    print(f"{len(df)} values (every {a.every}-th of the zoom window + the paper's), default {t_default:.0f} s, "
          f"long runs {t_long:.0f} s")
    print(f"long run unresolved: {unresolved}; over the {len(resolved)} resolved: default label = long-run label "
          f"{agree:.2%}; default uncertain: {uncertain}; confidently different: {len(wrong)}")
    print(pd.crosstab(df["long_regime"], df["regime"]).to_string())
    print("confidently different:\n" + (wrong.to_string(index=False) if len(wrong) else "none"))
    paper = df[np.isin(df["beta_o"].round(6), PAPER_VALUES)]
    print(paper[["beta_o", "regime", "lambda_1", "lambda_1_err", "long_regime", "long_lambda_1"]].to_string(index=False))
    old = resolved["regime_distinct"].eq(resolved["long_regime"]).mean()
    print(f"(the distinct-value heuristic alone agrees on {old:.2%})")
    t1, t10 = error_cost(cfg)
    print(f"Lyapunov estimate, 512 values x 5000 steps: no error {t1:.2f} s, with the block error {t10:.2f} s "
          f"({t10 / t1:.3f}x)")
    if a.out:
        df.to_parquet(a.out)


if __name__ == "__main__":
    main()
