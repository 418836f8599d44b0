"""Plain HTTP for the online paths: the attnscope cache, verified resumable downloads, byte ranges.

* :func:`cache_dir` - ``ATTNSCOPE_CACHE``, else ``$XDG_CACHE_HOME/attnscope`` (``~/.cache/attnscope``).
* :func:`download` - a URL to a file, through ``<target>.part`` (resumed with a Range request when the
  server allows it, restarted otherwise), checked by the caller's test (size, checksum) before it is
  renamed into place; a corrupt or short file is deleted and fetched once more, never used.
* :func:`unreachable` - one quick question to a host before a client that would retry it for long.
* :func:`get_range` - bytes ``[lo, hi)`` of a URL: following the hub's redirect to its CDN by hand (the
  token is only sent to the URL's own host), ``None`` when the server ignores ``Range``.

Everything is stdlib ``urllib``; no retry loops beyond the one stated above, so a dead host is one
fast error (:class:`~attnscope.errors.OfflineError`), never a console full of retries.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

from attnscope.errors import FormatError, OfflineError

CHUNK = 1 << 20
#: seconds to wait for a connection / the next bytes (HF_HUB_DOWNLOAD_TIMEOUT overrides)
TIMEOUT = 30.0


def cache_dir() -> Path:
    """Where attnscope keeps downloads (enwik8, tensors read by range): ``ATTNSCOPE_CACHE`` or XDG."""
    root = os.environ.get("ATTNSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "attnscope"
    )
    return Path(root)


def _timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or TIMEOUT)
    except ValueError:
        return TIMEOUT


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - urllib's signature
        return None  # the caller sees the 3xx and decides where the token may go


_OPENER = urllib.request.build_opener(_NoRedirect)


def _open(url: str, headers: dict[str, str]):  # noqa: ANN202 - an http.client response
    """One request, redirects followed by hand (at most 5), the token kept on its own host only."""
    host = urlsplit(url).netloc
    for _ in range(5):
        sent = headers if urlsplit(url).netloc == host else {k: v for k, v in headers.items() if k != "Authorization"}
        try:
            return _OPENER.open(urllib.request.Request(url, headers=sent), timeout=_timeout())
        except urllib.error.HTTPError as exc:
            if exc.code in (301, 302, 303, 307, 308) and exc.headers.get("Location"):
                url = urljoin(url, exc.headers["Location"])
                exc.close()
                continue
            raise
    raise OfflineError(f"{url}: too many redirects")


def get_range(url: str, lo: int, hi: int, headers: dict[str, str] | None = None) -> tuple[bytes | None, str]:
    """(bytes ``[lo, hi)`` of ``url``, the URL that answered after redirects); the bytes are None when
    the server answers with the whole file instead (it ignores ranges)."""
    asked = {**(headers or {}), "Range": f"bytes={lo}-{max(lo, hi - 1)}", "Accept-Encoding": "identity"}
    with _open(url, asked) as resp:
        final = resp.geturl()
        if resp.status != 206:
            return None, final
        data = resp.read()
    if len(data) != hi - lo:
        raise OfflineError(f"{url}: asked for {hi - lo} bytes at {lo}, received {len(data)} (connection cut)")
    return data, final


def download(url: str, target: Path, *, verify: Callable[[Path], str | None], what: str | None = None) -> Path:
    """``url`` -> ``target``, checked by ``verify(path)`` (what is wrong, or None) before it is used.

    Resumes ``target.part`` left by an interrupted run. A file that fails the check is deleted and
    downloaded once more from scratch; a second failure is a :class:`FormatError`. Network failures
    are one :class:`OfflineError` line (the partial file stays for the next run to resume).
    ``target`` only ever appears complete and checked.
    """
    what = what or target.name
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    for attempt in (1, 2):
        _fetch(url, part, what)
        problem = verify(part)
        if problem is None:
            os.replace(part, target)
            return target
        part.unlink(missing_ok=True)  # never trusted, never resumed
        if attempt == 2:
            raise FormatError(f"{what}: the download from {url} is corrupt twice in a row ({problem})")
    raise AssertionError("unreachable")  # pragma: no cover


def _fetch(url: str, part: Path, what: str) -> None:
    """Append the rest of ``url`` to ``part`` (a Range request from its size; restart on a 200)."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        try:
            resp = _open(url, headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # nothing left to fetch: the size / checksum test decides
                exc.close()
                return
            raise
        with resp:
            mode = "ab" if have and resp.status == 206 else "wb"
            expected = int(resp.headers.get("Content-Length") or -1)
            got = 0
            with open(part, mode) as fh:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    fh.write(block)
                    got += len(block)
        if 0 <= got < expected:
            raise http.client.IncompleteRead(b"", expected - got)
    except urllib.error.HTTPError as exc:
        raise OfflineError(f"cannot download {what} from {url} (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # refused, reset, cut mid-body
        reason = getattr(exc, "reason", None) or exc
        raise OfflineError(
            f"cannot download {what} from {url} ({reason}); run again to resume, or pass a local path"
        ) from None


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why ``url``'s host cannot be reached (refused, no DNS, timed out), or None when it answers at all."""
    try:
        with _OPENER.open(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # any HTTP answer means the host is there
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        return str(getattr(exc, "reason", None) or exc)
