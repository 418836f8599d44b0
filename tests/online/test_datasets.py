"""``--data hf:NAME[:CONFIG]`` with the real ``datasets`` package, streaming from a local hub.

``datasets`` and ``huggingface_hub`` read the endpoint and the offline flags when imported, so the
corpus is opened in a child process whose environment points at the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from online_hubserver import HubServer, Repo

pytest.importorskip("datasets", reason="the optional 'datasets' extra is not installed")

README = b"""---
configs:
- config_name: default
  data_files: data/train.jsonl
- config_name: notext
  data_files: notext/train.jsonl
---
# a tiny dataset for attnscope tests
"""

ROWS = [{"id": i, "content": f"document {i}: " + "the quick brown fox " * (1 + i % 5)} for i in range(400)]

CHILD = """
import json, sys
from attnscope.errors import AttnscopeError
from attnscope.training.data import open_corpus
out = []
for spec, n in json.loads(sys.argv[1]):
    try:
        c = open_corpus(spec, max_bytes=n)
        out.append({"name": c.name, "data": bytes(c.data).decode()})
    except AttnscopeError as exc:
        out.append({"error": type(exc).__name__, "msg": str(exc)})
print(json.dumps(out))
"""


def _open(endpoint: str, tmp_path, *specs: tuple[str, int]) -> list[dict]:  # noqa: ANN001
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1",
               HF_TOKEN_PATH=str(tmp_path / "hf" / "token"), HF_DATASETS_CACHE=str(tmp_path / "ds"))
    env.pop("HF_TOKEN", None)
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(specs)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a child process importing datasets: ~5-10 s on a busy 2-core machine
def test_hf_dataset_streams_detects_the_text_field_and_cuts(tmp_path):
    jl = "\n".join(json.dumps(r) for r in ROWS).encode()
    notext = "\n".join(json.dumps({"id": i, "body": "x"}) for i in range(5)).encode()
    repo = Repo({"README.md": README, "data/train.jsonl": jl, "notext/train.jsonl": notext}, sha="d" * 40,
                kind="datasets")
    full = "\n\n".join(r["content"] for r in ROWS)
    with HubServer({"org/ds": repo}, max_requests=200, max_seconds=100) as server:
        cut, whole, bad, missing = _open(server.url, tmp_path, ("hf:org/ds", 3000), ("hf:org/ds:default", 10**6),
                                         ("hf:org/ds:notext", 1000), ("hf:org/nothing", 1000))
        streamed = [h for h in server.hits("GET", "/train.jsonl")]
    assert cut["name"] == "hf:org/ds" and cut["data"] == full[:3000]  # the `content` field, first 3000 bytes
    assert whole["data"] == full  # smaller than the cut: every row
    assert streamed and all(h.range for h in streamed)  # streamed by range, not downloaded into a cache
    assert bad["error"] == "FormatError" and "text fields" in bad["msg"] and "body" in bad["msg"]
    assert missing["error"] == "InputError" and "\n" not in missing["msg"]


@pytest.mark.slow
def test_hf_dataset_with_the_hub_unreachable_is_one_line(tmp_path, closed_port):
    (res,) = _open(closed_port, tmp_path, ("hf:org/ds", 1000))
    assert res["error"] == "OfflineError" and "\n" not in res["msg"]
