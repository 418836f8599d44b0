"""The hub source against a local hub, with the real huggingface_hub client (no mocks).

Every test reads the server's request log: which files were fetched, how many metadata round trips,
how many bytes. Scores are checked against the same files scored from a local directory.
"""

from __future__ import annotations

import numpy as np
import pytest
from online_repos import SHA_MAIN, TOKEN, llama_repo, qk_bytes, qk_shards

from attnscope.errors import InputError, OfflineError
from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.hub import HubRepo


def _numbers(df):  # noqa: ANN001, ANN202 - the score columns as one float array
    return df.select_dtypes("number").to_numpy(dtype=float)


@pytest.fixture
def reference(tmp_path):
    """Scores of a repo's files written to a local directory and read by the HF directory source."""

    def ref(files: dict[str, bytes]):  # noqa: ANN202
        root = tmp_path / f"local{abs(hash(files['config.json'])) % 10_000}"
        root.mkdir(exist_ok=True)
        for name, blob in files.items():
            (root / name).write_bytes(blob)
        return _numbers(score(str(root)))

    return ref


def _weights_fetched(hub) -> set[str]:  # noqa: ANN001
    return {h.path.rsplit("/", 1)[1] for h in hub.hits("GET", "/cdn/") if h.path.endswith(".safetensors")}


def test_only_the_qk_shards_are_downloaded_then_the_cache_serves(hub, reference):
    files = hub.repos["org/tiny"].files
    df = score("org/tiny")
    assert _weights_fetched(hub) == qk_shards(files)  # the extra shard (embeddings, lm_head) never
    assert len(qk_shards(files)) < sum(f.endswith(".safetensors") for f in files)
    assert len(hub.hits("GET", "/api/models/")) == 1  # resolved once
    np.testing.assert_allclose(_numbers(df), reference(files), rtol=1e-6, equal_nan=True)

    hub.clear()
    again = score("org/tiny")
    assert [h.path for h in hub.hits(contains="/api/models/")] == ["/api/models/org/tiny"]
    assert hub.hits(contains="/resolve/") == [] and hub.hits(contains="/cdn/") == []  # all from the cache
    np.testing.assert_allclose(_numbers(again), _numbers(df), equal_nan=True)


def test_a_revision_is_resolved_and_scored(hub, reference):
    df = score("org/tiny@v1")
    assert [h.path for h in hub.hits(contains="/api/models/")] == ["/api/models/org/tiny/revision/v1"]
    assert all("/" + "b" * 40 + "/" in h.path for h in hub.hits(contains="/resolve/"))
    np.testing.assert_allclose(_numbers(df), reference(hub.repos["org/tiny"].trees["b" * 40]), rtol=1e-6,
                               equal_nan=True)
    with pytest.raises(InputError, match="no revision"):
        score("org/tiny@nope")
    hub.clear()  # a commit hash is immutable: once cached, no request at all
    np.testing.assert_allclose(_numbers(score("org/tiny@" + "b" * 40)), _numbers(df), equal_nan=True)
    assert hub.log == []


def test_gated_repo_names_hf_token_and_works_with_it(hub, monkeypatch, reference):
    with pytest.raises(InputError, match="gated.*HF_TOKEN") as err:
        score("org/gated")
    assert "\n" not in str(err.value)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(InputError, match="HF_TOKEN"):
        score("org/gated")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    df = score("org/gated")
    np.testing.assert_allclose(_numbers(df), reference(hub.repos["org/gated"].files), rtol=1e-6, equal_nan=True)


def test_missing_repo_is_one_line_in_the_cli(hub, cli_inproc):
    code, out, err = cli_inproc("geometry", "score", "org/nothing")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "no such hub repo" in err


@pytest.mark.slow  # huggingface_hub retries a cut download 5 times, a second apart
def test_server_dying_mid_download_leaves_nothing_trusted(hub, reference, caplog):
    shard = sorted(qk_shards(hub.repos["org/tiny"].files))[0]
    hub.die_after[shard] = 5000
    with pytest.raises(OfflineError) as err:
        score("org/tiny")
    assert "\n" not in str(err.value) and "org/tiny" in str(err.value)
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub") and r.levelno >= 30]
    snap = HubRepo.storage("org/tiny") / "snapshots" / SHA_MAIN
    assert not (snap / shard).exists()  # no half file where a later run would look
    del hub.die_after[shard]
    df = score("org/tiny")  # the next run completes (or resumes) and scores the real bytes
    np.testing.assert_allclose(_numbers(df), reference(hub.repos["org/tiny"].files), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("offline_flag", [False, True])
def test_no_network_is_one_line(online_env, closed_port, monkeypatch, offline_flag, cli_inproc):
    monkeypatch.setenv("HF_ENDPOINT", closed_port)
    if offline_flag:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="HF_HUB_OFFLINE" if offline_flag else "cannot be reached"):
        score("org/tiny")
    code, out, err = cli_inproc("geometry", "score", "org/tiny")
    assert code == 2 and err.strip().count("\n") == 0 and "not in the hub cache" in err


@pytest.mark.parametrize("ranges", [False, True])
def test_cached_model_is_scored_when_the_hub_is_unreachable(hub, closed_port, monkeypatch, ranges):
    first = score(open_source("org/tiny", ranges=ranges))
    monkeypatch.setenv("HF_ENDPOINT", closed_port)
    src = open_source("org/tiny", ranges=ranges)
    assert not src.repo.online and src.repo.sha == SHA_MAIN  # the commit recorded by the first run
    np.testing.assert_allclose(_numbers(score(src)), _numbers(first), equal_nan=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    np.testing.assert_allclose(_numbers(score(open_source("org/tiny", ranges=ranges))), _numbers(first),
                               equal_nan=True)


def test_ranges_read_only_the_qk_bytes(hub, reference):
    files = hub.repos["org/tiny"].files
    src = open_source("org/tiny", ranges=True)
    df = score(src)
    src.close()
    weight_gets = [h for h in hub.hits("GET", "/cdn/") if h.path.endswith(".safetensors")]
    assert weight_gets and all(h.range is not None and h.status == 206 for h in weight_gets)
    sent = sum(h.sent for h in weight_gets)
    n_files = len(qk_shards(files))
    header_bytes = sum(8 + int.from_bytes(files[f][:8], "little") for f in qk_shards(files))
    assert sent == qk_bytes(files) + header_bytes  # exactly the q/k tensors plus each header, once
    assert sent < sum(len(files[f]) for f in qk_shards(files)) / 3
    assert n_files >= 2
    np.testing.assert_allclose(_numbers(df), reference(files), rtol=1e-6, equal_nan=True)

    hub.clear()  # every tensor is cached: a second run sends only the metadata request
    src = open_source("org/tiny", ranges=True)
    np.testing.assert_allclose(_numbers(score(src)), _numbers(df), equal_nan=True)
    assert hub.hits(contains="/cdn/") == []


def test_ranges_refused_fall_back_to_whole_shards(hub, reference):
    hub.ranges = False
    df = score(open_source("org/tiny", ranges=True))
    assert _weights_fetched(hub) == qk_shards(hub.repos["org/tiny"].files)
    np.testing.assert_allclose(_numbers(df), reference(hub.repos["org/tiny"].files), rtol=1e-6, equal_nan=True)


def test_big_sharded_models_use_ranges_by_default(hub, monkeypatch):
    import attnscope.sources.hub as hubmod

    monkeypatch.setattr(hubmod, "RANGES_MIN_BYTES", 1000)
    src = open_source("org/tiny")
    assert src.ranges
    src.close()
    monkeypatch.setenv("ATTNSCOPE_HUB_RANGES", "0")
    src = open_source("org/tiny")
    assert not src.ranges
    src.close()


def test_gated_ranges_need_the_token_too(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    src = open_source("org/gated", ranges=True)
    score(src)
    src.close()
    cdn = hub.hits("GET", "/cdn/")
    assert cdn and all(h.status == 206 for h in cdn)


@pytest.mark.parametrize("ranges", [False, True])
def test_single_file_layout(hub, reference, ranges):
    files = hub.repos["org/single"].files
    src = open_source("hub:org/single@main", ranges=ranges)
    df = score(src)
    src.close()
    np.testing.assert_allclose(_numbers(df), reference(files), rtol=1e-6, equal_nan=True)
    sent = sum(h.sent for h in hub.hits("GET", "/cdn/"))
    assert (sent < len(files["model.safetensors"]) / 2) if ranges else (sent == len(files["model.safetensors"]))


def test_repo_builder_spreads_qk_over_shards():
    files = llama_repo(n_layers=6, layers_per_shard=2)
    assert len(qk_shards(files)) == 3


def test_server_dying_mid_range_read_is_one_line_then_recovers(hub, reference):
    files = hub.repos["org/tiny"].files
    shard = sorted(qk_shards(files))[0]
    hub.die_after[shard] = 100  # the header arrives cut short
    with pytest.raises(OfflineError, match="connection cut|failed") as err:
        score(open_source("org/tiny", ranges=True))
    assert "\n" not in str(err.value)
    assert len(hub.hits(contains=shard)) <= 3  # no retry storm: the hub, the CDN, and stop
    del hub.die_after[shard]
    df = score(open_source("org/tiny", ranges=True))
    np.testing.assert_allclose(_numbers(df), reference(files), rtol=1e-6, equal_nan=True)
