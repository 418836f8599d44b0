"""Checkpoints of a training run: write (atomically), list, read, and clean up after a crash.

    RUN_DIR/checkpoints/step-<N>/   model.safetensors + config.json (+ tokenizer.json)
                                    + trainer_state.pt (optimizer, RNG states and running totals, as tensors)

A checkpoint is built under ``.tmp-step-<N>-<pid>`` and renamed into place, so a crash never leaves a
half-written ``step-<N>``; :func:`clean_leftovers` removes what a SIGKILL mid-write leaves behind.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from attnscope.errors import FormatError, StorageError
from attnscope.tables import fsync_dir, storage_error

STEP_DIR = re.compile(r"^step-(\d+)$")
#: the largest step a checkpoint's name may give (as attnscope.emergence.revisions.MAX_STEP)
MAX_STEP = 2**53
LEFTOVER = re.compile(r"^\.(tmp|old)-step-(\d+)-\d+$")
#: errors of a full or read-only disk: the user's to fix, reported as one line naming the path
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


@contextmanager
def disk_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full / read-only disk while writing ``path`` into one StorageError line naming it."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        code = disk_errno(exc)
        if code in DISK_ERRNOS:
            raise storage_error(path, OSError(code, os.strerror(code))) from None
        raise


_OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)")


def disk_errno(exc: BaseException) -> int | None:
    """The errno behind a failed write, also where a library wrapped it: torch.save raises a RuntimeError
    ("unexpected pos ...") whose context is the OSError; safetensors a SafetensorError "... (os error 28)"."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        found = _OS_ERROR_IN_TEXT.search(str(seen))
        if found:
            return int(found.group(1))
        seen = seen.__cause__ or seen.__context__
    return None


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, dir) of every complete checkpoint in a run directory, by step."""
    root = Path(run_dir) / "checkpoints"
    out: dict[int, Path] = {}
    if root.is_dir():
        for p in sorted(root.iterdir()):
            m = STEP_DIR.match(p.name)
            if m and p.is_dir():
                digits = m.group(1)
                if len(digits) > 16 or int(digits) > MAX_STEP:
                    raise FormatError(f"{root}: {p.name[:40]}{'...' if len(p.name) > 40 else ''} names a step larger than "
                                      f"any run trains (at most {MAX_STEP:,}); remove or rename it")
                step = int(digits)
                if step in out:
                    raise FormatError(f"{root}: {out[step].name} and {p.name} are both step {step}; remove one")
                out[step] = p
    return sorted(out.items())


def clean_leftovers(run_dir: str | Path) -> None:
    """Remove the temporaries of an interrupted checkpoint write.

    A kill between the two renames of a re-written step leaves ``.old-step-N`` and no ``step-N``:
    the old one is put back first, then every ``.tmp-step-*`` / ``.old-step-*`` is removed.
    """
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        m = LEFTOVER.match(p.name)
        if not m:
            continue
        final = root / f"step-{m.group(2)}"
        if m.group(1) == "old" and not final.exists():
            os.replace(p, final)
        else:
            shutil.rmtree(p, ignore_errors=True)


def write_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], extra: dict[str, Any]) -> Path:
    """Build ``checkpoints/step-<step>`` under a temporary name, fsync, then rename into place."""
    import torch

    from .model import save_model

    root = run_dir / "checkpoints"
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    with disk_errors(final):
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            save_model(model, tmp, extra_config=extra)
            tokenizer.save(tmp)
            with open(tmp / "trainer_state.pt", "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if final.exists():  # re-writing a step (a resumed run passing an old checkpoint): swap, then drop the old
        old = root / f".old-step-{step}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(root)
    return final


def _corrupt(ckpt: Path, exc: BaseException) -> FormatError:
    return FormatError(f"checkpoint {ckpt} is corrupt ({type(exc).__name__}); delete it to resume from the previous one")


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """The optimizer / RNG / totals state saved beside a checkpoint's weights."""
    import torch

    path = ckpt / "trainer_state.pt"
    if not path.is_file():
        raise FormatError(f"checkpoint {ckpt} is incomplete (no trainer_state.pt); delete it to resume from the previous one")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors of every kind: one line
        raise _corrupt(ckpt, exc) from None


def load_checkpoint(ckpt: Path, model, opt, data_gen, rank: int, world: int) -> dict[str, Any]:
    """Restore weights, optimizer, data-sampler and dropout RNG from ``ckpt``; returns the saved totals."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from .model import import_state_dict

    state = read_trainer_state(ckpt)
    try:
        weights = load_file(str(ckpt / "model.safetensors"))
        bad = next((name for name, w in weights.items() if w.is_floating_point() and not torch.isfinite(w).all()), None)
        if bad is not None:  # training stops before saving such weights: the file was damaged
            raise FormatError(f"checkpoint {ckpt} is corrupt ({bad} holds non-finite values); delete it to resume "
                              "from the previous one")
        import_state_dict(model, weights)
        opt.load_state_dict(state["optimizer"])
        data_gen.set_state(state["rng_data"])
        rng = state["rng_torch"]
        torch.set_rng_state(rng[rank] if rng.shape[0] == world else rng[0])
        return {k: float(v) for k, v in state["accumulators"].items()}
    except (SafetensorError, OSError, KeyError, ValueError, RuntimeError, AttributeError) as exc:
        raise _corrupt(ckpt, exc) from None
