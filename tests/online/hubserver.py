"""A local stand-in for the Hugging Face hub's file API, for tests and benchmarks (127.0.0.1 only).

Serves in-memory repositories the way ``huggingface_hub`` expects them:

* ``GET /api/models/{repo}[/revision/{rev}]`` and ``/api/datasets/...``: the repo's commit ``sha`` and
  its ``siblings`` (file names);
* ``GET /api/models/{repo}/refs``: its branches and tags (``name``, ``ref``, ``targetCommit``), as
  ``list_repo_refs`` reads them (a revision named in ``Repo.tags`` is a tag, every other one a branch);
* ``HEAD|GET /{repo}/resolve/{rev}/{file}`` (datasets: ``/datasets/{repo}/resolve/...``): ``ETag``,
  ``X-Repo-Commit``, ``Content-Length``; weight files (``*.safetensors``, ``*.parquet``) answer with a
  302 to ``/cdn/...`` and ``X-Linked-Etag`` / ``X-Linked-Size``, as LFS files do on the hub;
* ``Range: bytes=a-b`` on any GET (206 with ``Content-Range``), unless ``ranges=False``;
* errors with the hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``,
  ``GatedRepo`` for a repo with a token and a request without it).

Every request is logged (method, path, range, body bytes sent). The server stops itself after
``max_requests`` requests or ``max_seconds`` (bounded even when a test forgets it), and
``die_after`` makes one file's body stop half-way (a server dying mid-download); ``down_after = N``
makes the hub go down for good after N requests: request N + 1 is dropped unanswered and the server
stops listening (every later connection is refused), as a hub that goes away in the middle of a sweep.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".parquet", ".bin", ".zip")


@dataclass
class Repo:
    """One repository: files by name, its commit sha, revisions (name -> sha), an optional token (gated)."""

    files: dict[str, bytes]
    sha: str = "0" * 40
    revisions: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    kind: str = "models"
    trees: dict[str, dict[str, bytes]] = field(default_factory=dict)  # files of other commits, by sha
    tags: set[str] = field(default_factory=set)  # revisions listed as tags (the others are branches)

    def __post_init__(self) -> None:
        self.revisions.setdefault("main", self.sha)

    def tree(self, sha: str) -> dict[str, bytes]:
        return self.trees.get(sha, self.files)


@dataclass
class Hit:
    method: str
    path: str
    range: str | None
    sent: int  # body bytes written
    status: int


class HubServer:
    """Threaded HTTP server on a free loopback port; ``url`` is what HF_ENDPOINT points at."""

    def __init__(self, repos: dict[str, Repo], *, ranges: bool = True, max_requests: int = 2000,
                 max_seconds: float = 120.0) -> None:
        self.repos = repos
        self.ranges = ranges
        self.max_requests = max_requests
        self.log: list[Hit] = []
        self.die_after: dict[str, int] = {}  # file name -> bytes sent before the connection drops
        self.raw: dict[str, bytes | list[bytes]] = {}  # plain URLs ("/enwik8.zip") -> body (or bodies in turn)
        self.down_after: int | None = None  # requests answered before the hub goes down for good
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(max_seconds, self.stop)
        self._timer.daemon = True
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "HubServer":
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- log queries -------------------------------------------------------------------------------

    def hits(self, method: str | None = None, contains: str = "") -> list[Hit]:
        with self._lock:
            return [h for h in self.log if (method is None or h.method == method) and contains in h.path]

    def bytes_sent(self) -> int:
        with self._lock:
            return sum(h.sent for h in self.log)

    def clear(self) -> None:
        with self._lock:
            self.log.clear()

    def _record(self, hit: Hit) -> bool:
        """Log a request; False once the request budget is spent."""
        with self._lock:
            self.log.append(hit)
            return len(self.log) <= self.max_requests


@functools.lru_cache(maxsize=256)  # a big file is hashed once, not on every range request (bytes cache their hash)
def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_RESOLVE = re.compile(r"^/(?:(datasets)/)?(.+?)/resolve/([^/]+)/(.+)$")
_TREE = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$")
_REFS = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/refs$")
_API = re.compile(r"^/api/(models|datasets)/(.+?)(?:/revision/([^/]+))?$")
_CDN = re.compile(r"^/cdn/(models|datasets)/(.+?)/([0-9a-f]{40})/(.+)$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        # -- helpers -------------------------------------------------------------------------------

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"", head: bool = False,
                  cut: int | None = None) -> None:
            sent = 0 if head else (len(body) if cut is None else min(cut, len(body)))
            ok = server._record(Hit(self.command, unquote(urlsplit(self.path).path), self.headers.get("Range"), sent,
                                    status))
            if not ok:
                status, headers, body, sent, cut = 503, {}, b"request budget spent", 0, None
            self.send_response(status)
            headers.setdefault("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            if cut is not None:
                self.send_header("Connection", "close")
            self.end_headers()
            if not head:
                self.wfile.write(body[:sent] if cut is not None else body)
            if cut is not None:
                self.wfile.flush()
                self.close_connection = True

        def _error(self, status: int, code: str, head: bool) -> None:
            body = json.dumps({"error": code}).encode()
            self._send(status, {"X-Error-Code": code, "X-Error-Message": code, "Content-Type": "application/json"},
                       body, head)

        def _repo(self, kind: str, name: str, head: bool, gate: bool = True) -> Repo | None:
            repo = server.repos.get(name)
            if repo is None or repo.kind != kind:
                self._error(401, "RepoNotFound", head)  # the hub answers 401 for missing and private repos
                return None
            if gate and repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._error(401 if self.headers.get("Authorization") is None else 403, "GatedRepo", head)
                return None
            return repo

        def _revision(self, repo: Repo, rev: str, head: bool) -> str | None:
            """The commit sha of a branch / tag name or sha; None (a 404 sent) when the repo has no such revision."""
            if rev not in repo.revisions and rev not in repo.revisions.values():
                self._error(404, "RevisionNotFound", head)
                return None
            return repo.revisions.get(rev, rev)

        def _body(self, data: bytes, headers: dict[str, str], head: bool, name: str) -> None:
            """Whole file or one byte range of it."""
            rng = self.headers.get("Range")
            cut = server.die_after.get(name)
            m = _RANGE.match(rng or "") if server.ranges else None
            if m and (m.group(1) or m.group(2)):
                n = len(data)
                if m.group(1):
                    lo, hi = int(m.group(1)), (int(m.group(2)) if m.group(2) else n - 1)
                else:
                    lo, hi = max(0, n - int(m.group(2))), n - 1
                hi = min(hi, n - 1)
                if lo > hi:
                    self._send(416, {"Content-Range": f"bytes */{n}"}, b"", head)
                    return
                headers = {**headers, "Content-Range": f"bytes {lo}-{hi}/{n}"}
                self._send(206, headers, data[lo:hi + 1], head, cut)
                return
            self._send(200, {**headers, "Accept-Ranges": "bytes" if server.ranges else "none"}, data, head, cut)

        def _entries(self, repo: Repo, sha: str, prefix: str, recursive: bool) -> list[dict]:
            """The hub's tree entries (files and directories) under ``prefix``."""
            out: dict[str, dict] = {}
            for fname, data in sorted(repo.tree(sha).items()):
                if prefix and not fname.startswith(prefix + "/") and fname != prefix:
                    continue
                rest = fname[len(prefix) + 1:] if prefix else fname
                parts = rest.split("/")
                if len(parts) > 1 and not recursive:
                    d = f"{prefix}/{parts[0]}" if prefix else parts[0]
                    out[d] = {"type": "directory", "path": d, "oid": "0" * 40, "size": 0}
                    continue
                out[fname] = {"type": "file", "path": fname, "size": len(data), "oid": etag(data)[:40]}
                if fname.endswith(LFS_SUFFIXES):
                    out[fname]["lfs"] = {"oid": etag(data), "size": len(data), "pointerSize": 130}
            return list(out.values())

        def _tree(self, kind: str, name: str, rev: str, prefix: str, head: bool) -> None:
            repo = self._repo(kind, name, head, gate=False)
            if repo is None:
                return
            sha = self._revision(repo, rev, head)
            if sha is None:
                return
            recursive = "recursive=true" in (urlsplit(self.path).query or "").lower()
            entries = self._entries(repo, sha, prefix, recursive)
            if prefix and not entries:
                self._error(404, "EntryNotFound", head)
                return
            self._send(200, {"Content-Type": "application/json"}, json.dumps(entries).encode(), head)

        def do_POST(self) -> None:  # paths-info: which of these paths exist
            from urllib.parse import parse_qs

            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            path = unquote(urlsplit(self.path).path)
            m = re.match(r"^/api/(models|datasets)/([^/]+/[^/]+)/paths-info/([^/]+)$", path)
            repo = server.repos.get(m.group(2)) if m else None
            if repo is None:
                self._error(404, "RepoNotFound", False)
                return
            sha = repo.revisions.get(m.group(3), m.group(3))
            try:
                wanted = json.loads(body).get("paths", []) if body.startswith("{") else parse_qs(body).get("paths", [])
            except json.JSONDecodeError:
                wanted = []
            entries = [e for p in wanted for e in self._entries(repo, sha, "", True) if e["path"] == p]
            found = {e["path"] for e in entries}
            entries += [{"type": "directory", "path": p, "oid": "0" * 40, "size": 0} for p in wanted
                        if p not in found and any(f.startswith(p + "/") for f in repo.tree(sha))]
            self._send(200, {"Content-Type": "application/json"}, json.dumps(entries).encode())

        def _refs(self, kind: str, name: str, head: bool) -> None:
            repo = self._repo(kind, name, head, gate=False)
            if repo is None:
                return
            out: dict[str, list] = {"branches": [], "tags": [], "converts": []}
            for rev, sha in sorted(repo.revisions.items()):
                tag = rev in repo.tags
                out["tags" if tag else "branches"].append(
                    {"name": rev, "ref": f"refs/{'tags' if tag else 'heads'}/{rev}", "targetCommit": sha})
            self._send(200, {"Content-Type": "application/json"}, json.dumps(out).encode(), head)

        def _going_down(self) -> bool:
            """True (the request dropped, the server stopping) once ``down_after`` requests were answered."""
            with server._lock:
                down = server.down_after is not None and len(server.log) >= server.down_after
            if down:
                self.close_connection = True
                threading.Thread(target=server.stop, daemon=True).start()
            return down

        def _serve(self, head: bool) -> None:
            if self._going_down():
                return
            path = unquote(urlsplit(self.path).path)
            if path in server.raw:
                data = server.raw[path]
                if isinstance(data, list):  # bodies served in turn, the last one from then on
                    data = data.pop(0) if len(data) > 1 else data[0]
                self._body(data, {"ETag": f'"{etag(data)}"'}, head, path)
                return
            m = _REFS.match(path)
            if m:
                self._refs(m.group(1), m.group(2), head)
                return
            m = _TREE.match(path)
            if m:
                self._tree(m.group(1), m.group(2), m.group(3), (m.group(4) or "").strip("/"), head)
                return
            m = _API.match(path)
            if m:
                kind, name, rev = m.group(1), m.group(2), m.group(3) or "main"
                repo = self._repo(kind, name, head, gate=False)  # metadata of gated repos is public
                if repo is None:
                    return
                sha = self._revision(repo, rev, head)
                if sha is None:
                    return
                info = {"id": name, "sha": sha, "private": False, "gated": "auto" if repo.token else False,
                        "siblings": [{"rfilename": f} for f in sorted(repo.tree(sha))]}
                self._send(200, {"Content-Type": "application/json"}, json.dumps(info).encode(), head)
                return
            m = _RESOLVE.match(path)
            if m:
                kind = "datasets" if m.group(1) else "models"
                name, rev, fname = m.group(2), m.group(3), m.group(4)
                repo = self._repo(kind, name, head)
                if repo is None:
                    return
                sha = self._revision(repo, rev, head)
                if sha is None:
                    return
                if fname not in repo.tree(sha):
                    self._error(404, "EntryNotFound", head)
                    return
                data = repo.tree(sha)[fname]
                common = {"X-Repo-Commit": sha, "ETag": f'"{etag(data)}"'}
                if fname.endswith(LFS_SUFFIXES):
                    # another origin, as the hub's CDN is: clients must not follow with the token
                    loc = f"{server.url.replace('127.0.0.1', 'localhost')}/cdn/{kind}/{name}/{sha}/{fname}"
                    self._send(302, {**common, "Location": loc, "X-Linked-Etag": f'"{etag(data)}"',
                                     "X-Linked-Size": str(len(data))}, b"", head)
                    return
                self._body(data, common, head, fname)
                return
            m = _CDN.match(path)
            if m:
                repo = server.repos.get(m.group(2))
                if repo is None or m.group(4) not in repo.tree(m.group(3)):
                    self._send(404, {}, b"", head)
                    return
                data = repo.tree(m.group(3))[m.group(4)]
                self._body(data, {"ETag": f'"{etag(data)}"'}, head, m.group(4))
                return
            self._send(404, {}, b"", head)

    return Handler
