"""HF directory and hub sources: every layout reads the same tensors; bad input is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import AttnscopeError, FormatError, InputError, OfflineError
from attnscope.sources import open_source
from attnscope.sources.hf import HFDirectorySource
from attnscope.sources.hub import HubSource

Q0 = "model.layers.0.self_attn.q_proj.weight"


@pytest.mark.parametrize("layout", ["single", "sharded", "bin"])
def test_layouts_read_the_same_tensors(hf_llama_dirs, hf_tiny_llama, layout):
    src = open_source(str(hf_llama_dirs[layout]))
    assert isinstance(src, HFDirectorySource)
    assert src.config["model_type"] == "llama"
    sd = hf_tiny_llama.state_dict()
    assert Q0 in src.keys() and src.has(Q0)
    for name in (Q0, "model.layers.1.self_attn.k_proj.weight"):
        np.testing.assert_array_equal(src.get(name).numpy(), sd[name].numpy())
    with pytest.raises(FormatError, match="no tensor named"):
        src.get("nope.weight")


def test_a_weights_file_path_opens_its_directory(hf_llama_dirs):
    src = open_source(str(hf_llama_dirs["sharded"] / "model.safetensors.index.json"))
    assert isinstance(src, HFDirectorySource) and Q0 in src.keys()


def test_missing_path():
    with pytest.raises(InputError, match="no such file or directory"):
        open_source("/nonexistent/model/dir")
    with pytest.raises(InputError, match="no such file or directory"):
        open_source("./not-here/")


def test_directory_without_config(hf_llama_dirs, tmp_path):
    d = tmp_path / "noconfig"
    shutil.copytree(hf_llama_dirs["single"], d)
    (d / "config.json").unlink()
    with pytest.raises(InputError, match="no config.json"):
        open_source(str(d))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no config.json"):
        open_source(str(empty))


def test_directory_without_weights(hf_llama_dirs, tmp_path):
    d = tmp_path / "noweights"
    d.mkdir()
    shutil.copy(hf_llama_dirs["single"] / "config.json", d)
    with pytest.raises(InputError, match="no weights found"):
        open_source(str(d))


def test_config_without_model_type(hf_llama_dirs, tmp_path):
    d = tmp_path / "nomt"
    shutil.copytree(hf_llama_dirs["single"], d)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["model_type"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError, match="model_type"):
        open_source(str(d))


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_corrupt_safetensors(hf_llama_dirs, tmp_path, how):
    d = tmp_path / how
    shutil.copytree(hf_llama_dirs["single"], d)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if how == "truncated" else b"\x00garbage" * 10)
    with pytest.raises(FormatError, match="safetensors file") as ei:
        src = open_source(str(d))
        src.get(Q0)
    assert "\n" not in str(ei.value) and str(f) in str(ei.value)


def test_absent_shard(hf_llama_dirs, tmp_path):
    d = tmp_path / "absent"
    shutil.copytree(hf_llama_dirs["sharded"], d)
    wmap = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    (d / wmap[Q0]).unlink()
    src = open_source(str(d))  # opening is fine: shards are read lazily
    with pytest.raises(FormatError, match="named in the index but missing"):
        src.get(Q0)


def test_corrupt_bin(hf_llama_dirs, tmp_path):
    d = tmp_path / "badbin"
    shutil.copytree(hf_llama_dirs["bin"], d)
    (d / "pytorch_model.bin").write_bytes(b"not a torch file at all")
    with pytest.raises(FormatError, match="cannot load torch weights"):
        open_source(str(d))


def test_bin_with_code_is_refused(tmp_path, hf_llama_dirs):
    """weights_only=True: a pickle that would run code is rejected, never executed."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (Path(tmp_path / "pwned").touch, ())

    d = tmp_path / "evil"
    d.mkdir()
    shutil.copy(hf_llama_dirs["bin"] / "config.json", d)
    import torch

    torch.save({"x": Evil()}, d / "pytorch_model.bin", pickle_module=pickle)
    with pytest.raises(FormatError):
        open_source(str(d))
    assert not (tmp_path / "pwned").exists()


# ---- hub -------------------------------------------------------------------------------------


def test_hub_id_detection(tmp_path):
    assert HubSource.detect("meta-llama/Llama-3.2-1B")
    assert HubSource.detect("gpt2") and HubSource.detect("org/name@main") and HubSource.detect("hub:gpt2")
    assert not HubSource.detect("/abs/path") and not HubSource.detect("./rel") and not HubSource.detect(str(tmp_path))


def test_hub_offline_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(OfflineError, match="offline") as info:
        open_source("someorg/some-model")
    assert "\n" not in str(info.value)


# fetching only the needed shards, layouts, revisions, gated repos, caching and offline use are tested
# with the real huggingface_hub client against a local hub in tests/online/test_hub.py


def test_errors_are_attnscope_errors():
    assert issubclass(OfflineError, AttnscopeError) and issubclass(FormatError, AttnscopeError)


@pytest.mark.parametrize(
    "err, expected, needle",
    [
        ("GatedRepoError", InputError, "HF_TOKEN"),
        ("RepositoryNotFoundError", InputError, "no such hub repo"),
        ("RemoteEntryNotFoundError", InputError, "has no"),
        ("OfflineModeIsEnabled", OfflineError, "offline"),
    ],
)
def test_hub_errors_are_one_line(err, expected, needle):
    httpx2 = pytest.importorskip("httpx2")
    from huggingface_hub import errors as hub_errors

    from attnscope.sources.hub import _hub_error

    cls = getattr(hub_errors, err)
    if err == "OfflineModeIsEnabled":
        exc = cls("offline mode is enabled")
    else:
        resp = httpx2.Response(404, request=httpx2.Request("GET", "https://hf.co/org/model/config.json"))
        exc = cls("boom", response=resp)
    mapped = _hub_error("org/model", "config.json", exc)
    assert isinstance(mapped, expected) and needle in str(mapped) and "\n" not in str(mapped)
