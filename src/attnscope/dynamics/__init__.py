"""Mean-field dynamics of a 1-bit self-attention network (Poc-Lopez & Aguilera, arXiv 2406.07247).

Rooms: ``model`` (config, weights, presets), ``meanfield`` (the map: numpy reference, state,
checkpoints), ``kernels`` (numba fast path), ``simulate`` (batched runs, trajectories and their file
format), ``lyapunov`` (Benettin/QR spectra and their block error), ``regimes`` (labels that follow
that error), ``sweeps`` (bifurcation, phase diagrams through attnscope.runs), ``finite`` (finite-N
sampler). Quick start::

    from attnscope import dynamics as dyn
    cfg = dyn.load_preset("paper")
    traj = dyn.trajectory(cfg, beta_o=1.27, steps=5000)
    lam = dyn.lyapunov_table(cfg, [1.255, 1.27], transient=20000, steps=20000)
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".finite": ["finite_size_table", "simulate_finite"],
    ".lyapunov": ["LyapunovEstimate", "lyapunov_estimate"],
    ".meanfield": ["State", "compile_config", "initial_state", "load_state", "save_state"],
    ".model": ["DynamicsConfig", "apply_overrides", "from_dict", "load_config", "load_preset", "random_config",
               "resolve_config"],
    ".regimes": ["classify", "lyapunov_regime"],
    ".simulate": ["advance", "load_trajectory", "save_trajectory", "trajectory", "trajectory_summary"],
    ".sweeps": ["bifurcation", "lyapunov_table", "phase", "protocol_checkpoint", "sweep_values"],
})
