"""Training objectives: masked LM (BERT) and causal LM (GPT), never mixed.

Einstein legend: b batch, t sequence position, v vocabulary.

``mlm``: 15% of positions are selected; of those 80% become the mask token, 10% a random token,
10% stay; the loss is taken on the selected positions only. ``clm``: every position predicts the
next token. Labels use -100 for "no loss here" (the ``cross_entropy`` ignore index).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnscope.errors import ConfigError

OBJECTIVES = ("mlm", "clm")
IGNORE = -100


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is unknown; choose mlm or clm", params="objective")
    return objective


def window_length(objective: str, seq_len: int) -> int:
    """Tokens drawn per example: clm needs one more for the shifted targets."""
    return seq_len + 1 if objective == "clm" else seq_len


def mlm_mask(
    ids: torch.Tensor, mask_id: int, n_random: int, generator: torch.Generator, p: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [b, t] -> (inputs [b, t], labels [b, t]); random replacements drawn from [0, n_random)."""
    sel = torch.rand(ids.shape, generator=generator) < p  # [b, t]
    r = torch.rand(ids.shape, generator=generator)
    rand_tok = torch.randint(0, n_random, ids.shape, generator=generator)
    inputs = ids.clone()
    inputs[sel & (r < 0.8)] = mask_id
    swap = sel & (r >= 0.8) & (r < 0.9)
    inputs[swap] = rand_tok[swap]
    labels = torch.where(sel, ids, torch.full_like(ids, IGNORE))
    return inputs, labels


def make_batch(
    objective: str, windows: torch.Tensor, mask_id: int | None, n_random: int, generator: torch.Generator, p: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows [b, window_length] -> (inputs [b, t], labels [b, t]) for the objective."""
    if objective == "clm":
        return windows[:, :-1], windows[:, 1:]
    if mask_id is None:
        raise ConfigError("mlm needs a mask token id")
    return mlm_mask(windows, mask_id, n_random, generator, p)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over positions with a label; logits [..., v], labels [...]."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)


def model_loss(model, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The training loss of a batch; only labelled positions reach the output projection.

    inputs, labels [b, t]; equal to ``lm_loss(model(inputs), labels)`` (for clm every position is
    labelled, so nothing is skipped; for mlm ~85% of the vocabulary projection is saved).
    """
    sel = labels != IGNORE  # [b, t]
    if bool(sel.all()):
        return lm_loss(model(inputs), labels)
    return lm_loss(model(inputs, select=sel), labels[sel])
