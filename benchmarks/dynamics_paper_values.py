"""The regimes at the paper's trajectory values, as docs/dynamics.md tabulates them ("Regimes at the
paper's trajectory values"), without running the whole 4001-value zoom diagram first.

Every value of the zoom window starts from the same protocol checkpoint (the largest value, 1.28, run
from x_0 for 120,000 steps), so one value's row of the diagram does not depend on the others. This
script builds that checkpoint once and prints:

* the Lyapunov table: 3 exponents after 100,000 transient + 100,000 averaged steps, i.e. what
  ``attnscope dynamics lyapunov --init-state zoom/checkpoint.npz --transient 100000 --steps 100000
  --exponents 3`` prints for these values;
* each value's row of the default zoom diagram (``bifurcation`` with the CLI's defaults, the values taken
  from the zoom window's ``linspace(1.24, 1.28, 4001)`` so they are bit for bit the diagram's): the
  distinct-value count of the saved steps, the default lambda_1 +- its error, and the labels; then the
  same for the exact decimal values, as tests/dynamics/test_regimes.py runs them (1.26405 is not on
  the grid: its grid value is 1.2640500000000001, and a torus's distinct count and error feel that).

    PYTHONPATH=src python benchmarks/dynamics_paper_values.py      # seconds with a warm numba cache (2026-11-25)
"""

from __future__ import annotations

import time

import numpy as np

from attnscope.dynamics import bifurcation, load_preset, lyapunov_table, protocol_checkpoint

VALUES = (1.255, 1.26405, 1.266, 1.27, 1.28)
EXTRA = (1.4,)  # outside the zoom window: Lyapunov table only


def main() -> None:
    cfg = load_preset("paper")
    t0, c0 = time.perf_counter(), time.process_time()
    zoom = np.linspace(1.24, 1.28, 4001)
    ck = protocol_checkpoint(cfg, "beta_o", zoom, 120_000)
    lyap = lyapunov_table(cfg, [*VALUES, *EXTRA], init=ck, transient=100_000, steps=100_000, k=3)
    print("| beta_o | lambda_1 | lambda_2 | lambda_3 | regime (Lyapunov) |")
    print("|---|---|---|---|---|")
    for row in lyap.itertuples():
        lam = " | ".join(f"{x:+.4g}" for x in row.lyapunov)
        print(f"| {row.beta_o:g} | {lam} | {row.regime} |")
    picked = zoom[[int(round((v - 1.24) / 1e-5)) for v in VALUES]]
    for name, values in (("zoom grid", picked), ("exact", np.array(VALUES))):
        diagram = bifurcation(cfg, values).table
        print(f"\n| beta_o ({name}) | distinct values (heuristic) | default lambda_1 +- err | label |")
        print("|---|---|---|---|")
        for row in diagram.itertuples():
            print(f"| {row.beta_o!r} | {int(row.n_distinct)}, {row.regime_distinct} | "
                  f"{row.lambda_1:+.2g} +- {row.lambda_1_err:.2g} | {row.regime} |")
    print(f"\n{time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU (numba compile included)")


if __name__ == "__main__":
    main()
