"""enwik8-style downloads from a local server: verified, refused when corrupt, resumed when cut."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile

import pytest
from online_hubserver import HubServer

from attnscope.errors import FormatError, OfflineError
from attnscope.training import data as D


def _zip(blob: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:  # stored: a cut is a cut, not a bad inflate
        zf.writestr("enwik8", blob)
    return buf.getvalue()


@pytest.fixture
def corpus_server(online_env, monkeypatch):
    """A server for /enwik8.zip and an enwik8 spec of the same layout, 20 kB instead of 100 MB."""
    blob = bytes((i * 7 + i // 256) % 251 for i in range(20_000))
    spec = dataclasses.replace(
        D.ENWIK8, size=len(blob), sha1=hashlib.sha1(blob).hexdigest(), valid_at=18_000, test_at=19_000
    )
    with HubServer({}, max_requests=50, max_seconds=30) as server:
        server.raw["/enwik8.zip"] = _zip(blob)
        monkeypatch.setenv("ATTNSCOPE_ENWIK8_URL", server.url + "/enwik8.zip")
        monkeypatch.setattr(D, "ENWIK8", spec)
        yield server, blob, spec


def test_download_is_checked_and_split_90_5_5(corpus_server):
    server, blob, spec = corpus_server
    c = D.open_corpus("enwik8")
    assert bytes(c.data) == blob
    assert [len(c.split(s)) for s in D.SPLITS] == [18_000, 1_000, 1_000]  # 90% / 5% / 5%, as 90M/5M/5M
    assert c.split("valid") == blob[18_000:19_000]
    assert (D.ENWIK8.valid_at, D.ENWIK8.test_at) == (18_000, 19_000)
    assert len(server.hits("GET", "/enwik8.zip")) == 1
    D.open_corpus("enwik8")  # cached: no second request
    assert len(server.hits("GET", "/enwik8.zip")) == 1


def test_real_enwik8_layout_is_90m_5m_5m():
    e = dataclasses.replace(D.ENWIK8)  # the published numbers, not a test stand-in
    assert (e.size, e.valid_at, e.test_at) == (100_000_000, 90_000_000, 95_000_000)


def test_corrupt_download_is_refused_and_fetched_again(corpus_server):
    server, blob, spec = corpus_server
    bad = bytearray(blob)
    bad[123] ^= 0xFF
    server.raw["/enwik8.zip"] = [_zip(bytes(bad)), _zip(blob)]
    c = D.open_corpus("enwik8")
    assert bytes(c.data) == blob and len(server.hits("GET", "/enwik8.zip")) == 2


def test_corrupt_twice_is_one_error_and_nothing_cached(corpus_server, online_env):
    server, blob, spec = corpus_server
    server.raw["/enwik8.zip"] = _zip(blob[:-10] + b"x" * 10)
    with pytest.raises(FormatError, match="corrupt twice"):
        D.open_corpus("enwik8")
    cache = online_env / "attnscope"
    assert not (cache / "enwik8").exists() and not list(cache.glob("enwik8*.part"))


def test_cut_download_resumes(corpus_server, online_env):
    server, blob, spec = corpus_server
    size = len(server.raw["/enwik8.zip"])
    server.die_after["/enwik8.zip"] = 7_000
    with pytest.raises(OfflineError, match="run again to resume") as err:
        D.open_corpus("enwik8")
    assert "\n" not in str(err.value)
    part = online_env / "attnscope" / "enwik8.zip.part"
    assert part.stat().st_size == 7_000 and not (online_env / "attnscope" / "enwik8").exists()
    del server.die_after["/enwik8.zip"]
    c = D.open_corpus("enwik8")
    assert bytes(c.data) == blob
    last = server.hits("GET", "/enwik8.zip")[-1]
    assert last.range == "bytes=7000-" and last.sent == size - 7_000  # resumed, not restarted


def test_server_gone_is_one_line(online_env, closed_port, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_ENWIK8_URL", closed_port + "/enwik8.zip")
    with pytest.raises(OfflineError, match="cannot download enwik8") as err:
        D.open_corpus("enwik8")
    assert "\n" not in str(err.value)
