"""FlexAttention's kernel options: the measured table per length / device / head dim, autotune once per
signature, and the options reaching the flex_attention call (spied on CPU, where no GPU is needed)."""

import pytest
import torch

from attnscope.errors import ConfigError
from attnscope.sparse import load_pattern, sparse_attention
from attnscope.sparse import tuning
from attnscope.sparse.flex import available

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no FlexAttention")


@pytest.mark.parametrize("L, want", [
    (65536, {"BLOCK_M": 64, "BLOCK_N": 64}),
    (16384, {"BLOCK_M": 64, "BLOCK_N": 64}),
    (8192, {"BLOCK_M": 64, "BLOCK_N": 64}),
    (4096, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}),
    (1024, {"BLOCK_M": 64, "BLOCK_N": 64}),
])
def test_table_picks_the_measured_tiles_by_length(L, want):
    options, why = tuning.table_options("NVIDIA H200", L, 64)
    assert options == want and why
    for o in (options, *tuning.CANDIDATES):  # every option set divides the BlockMask's 128-wide blocks
        assert all(128 % o[k] == 0 for k in o if k.endswith(("BLOCK_M", "BLOCK_N", "M1", "N1", "M2", "N2")))


def test_no_rule_for_a_head_dim_beyond_the_table():
    assert tuning.table_options("NVIDIA H200", 16384, 256) == ({}, "no rule matches: FlexAttention's defaults")


def test_cpu_gets_flexattentions_own_tiling():
    assert tuning.kernel_options(torch.zeros(1, 8, 16384, 64))[0] == {}


@pytest.fixture
def fake_gpu(monkeypatch):
    """Tensors on the CPU that the option choice takes for an H200's; compiled flex replaced by a spy."""
    from torch.nn.attention.flex_attention import flex_attention

    from attnscope.sparse import attention, flex

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("kernel_options"))
        return flex_attention(*args, **kwargs)

    monkeypatch.setattr(tuning, "_on_cuda", lambda q: True)
    monkeypatch.setattr(tuning, "_device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(tuning, "_tuned", {})
    monkeypatch.setattr(tuning, "_mode", [])
    monkeypatch.delenv("ATTNSCOPE_FLEX_TUNE", raising=False)
    monkeypatch.setattr(attention, "_wants_flex", lambda q: flex.usable())
    monkeypatch.setattr(flex, "_compiled_flex", lambda: spy)
    monkeypatch.setattr(flex, "_failed", [])
    monkeypatch.setattr(flex, "_verified", set())
    return calls


def _inputs(L=128, e=8):
    torch.manual_seed(0)
    return [torch.randn(1, 8, L, e) for _ in range(3)]


def test_the_tables_options_reach_flex_attention(fake_gpu):
    q, k, v = _inputs()
    with torch.no_grad():
        out = sparse_attention(q, k, v, "byte-sparse-8h")  # auto on "CUDA": the compiled FlexAttention
        ref = sparse_attention(q, k, v, "byte-sparse-8h", impl="gather")
    assert fake_gpu and all(c == {"BLOCK_M": 64, "BLOCK_N": 64} for c in fake_gpu)  # probe and real call
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_given_options_win_over_the_table(fake_gpu):
    q, k, v = _inputs()
    with torch.no_grad():
        sparse_attention(q, k, v, "byte-sparse-8h", kernel_options={"BLOCK_M": 32, "BLOCK_N": 32})
    assert fake_gpu and all(c == {"BLOCK_M": 32, "BLOCK_N": 32} for c in fake_gpu)


def test_default_mode_passes_no_options(fake_gpu):
    tuning.set_mode("default")
    try:
        q, k, v = _inputs()
        with torch.no_grad():
            sparse_attention(q, k, v, "byte-sparse-8h")
    finally:
        tuning.set_mode(None)
    assert fake_gpu and all(c is None for c in fake_gpu)


def test_explicit_options_reach_eager_flex_on_cpu(monkeypatch):
    import torch.nn.attention.flex_attention as fa

    seen, real = [], fa.flex_attention
    monkeypatch.setattr(fa, "flex_attention", lambda *a, **kw: seen.append(kw.get("kernel_options")) or real(*a, **kw))
    q, k, v = _inputs()
    with torch.no_grad():
        out = sparse_attention(q, k, v, "byte-sparse-8h", impl="flex", kernel_options={"BLOCK_M": 64, "BLOCK_N": 64})
        ref = sparse_attention(q, k, v, "byte-sparse-8h", impl="gather")
        sparse_attention(q, k, v, "byte-sparse-8h", impl="flex")  # CPU and no options given: none passed
    assert seen == [{"BLOCK_M": 64, "BLOCK_N": 64}, None]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_autotune_keeps_the_fastest_candidate_and_skips_failures():
    fastest = tuning.CANDIDATES[2]
    runs = []

    def run(options):
        runs.append(options)
        if options == tuning.CANDIDATES[3]:
            raise RuntimeError("out of shared memory")

    def timer(fn):
        fn()
        return 1.0 if runs[-1] == fastest else 3.0

    options, why = tuning.autotune(run, torch.device("cpu"), repeats=3, timer=timer)
    assert options == fastest and "1 failed to compile" in why
    assert runs.count(tuning.CANDIDATES[0]) == 4  # one untimed compile, then 3 timed


def test_autotune_runs_once_per_signature(fake_gpu, monkeypatch):
    ran = []
    monkeypatch.setattr(tuning, "autotune", lambda run, device: ran.append(1) or ({"BLOCK_M": 32, "BLOCK_N": 32}, "t"))
    tuning.set_mode("autotune")
    try:
        q, k, v = _inputs()
        with torch.no_grad():
            for _ in range(3):
                sparse_attention(q, k, v, "byte-sparse-8h")
            sparse_attention(*_inputs(L=64), "byte-sparse-8h")  # a new shape: tuned again
    finally:
        tuning.set_mode(None)
    assert len(ran) == 2
    assert fake_gpu and all(c == {"BLOCK_M": 32, "BLOCK_N": 32} for c in fake_gpu)


def test_a_bad_mode_is_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="tuning mode must be one of"):
        tuning.set_mode("fastest")
    monkeypatch.setattr(tuning, "_mode", [])
    monkeypatch.setenv("ATTNSCOPE_FLEX_TUNE", "fastest")
    with pytest.raises(ConfigError, match="ATTNSCOPE_FLEX_TUNE must be one of table, autotune, default"):
        tuning.mode()


def test_describe_names_the_options():
    assert tuning.describe({"BLOCK_M": 64, "BLOCK_N": 64}) == "BLOCK_M 64, BLOCK_N 64"
    assert tuning.describe({}) == "default"


def test_a_sparse_training_run_refuses_a_bad_tuning_mode_before_it_starts(monkeypatch, tmp_path):
    """ATTNSCOPE_FLEX_TUNE=bogus: a sparse run's config is refused in one line (on CPU too, where the variable
    would otherwise never be read and a typo go unnoticed until a CUDA run); a dense run does not read it."""
    from attnscope.training.config import TrainConfig

    monkeypatch.setattr(tuning, "_mode", [])
    monkeypatch.setenv("ATTNSCOPE_FLEX_TUNE", "bogus")
    with pytest.raises(ConfigError, match="ATTNSCOPE_FLEX_TUNE must be one of"):
        TrainConfig(out=str(tmp_path), attn_pattern="byte-sparse-8h").validate()
    TrainConfig(out=str(tmp_path)).validate()
