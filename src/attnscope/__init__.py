"""attnscope: a toolkit for the structure and dynamics of self-attention.

Rooms (each a subpackage, data flows one way):
  sources   where weights come from (files, hub, checkpoints), tensors by name, lazily
  families  one declarative spec per architecture: where W_q and W_k live
  geometry  symmetry / directionality of W_qk = W_q W_k^T (pure math + ``score``)
  training  a readable Transformer, corpora, tokenizers, trainer, run comparison
  heads     per-head attention metrics, probes, clustering, sparse attention patterns
  atlas     every head's W_qk geometry beside its behaviour (``attnscope.atlas(model)``)
  dynamics  the mean-field theory of a 1-bit self-attention network
  zoo       the registry of the paper's models
  runs      results store and executors shared by long jobs
  plots     matplotlib figures from tidy tables
  cli       the ``attnscope`` command, a thin layer over the above

Heavy modules (torch, transformers) are imported lazily by the subpackages that need them.
"""

__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - ``attnscope.atlas(...)`` without importing the room first
    if name == "atlas":
        import importlib

        return importlib.import_module(".atlas", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
