"""The training lab: train small encoders (mlm) and decoders (clm) and track W_qk geometry as they learn.

Modules: :mod:`.model` (the Transformer, its config, presets, inits, save/load), :mod:`.data`
(corpora, splits, windows), :mod:`.tokenizers`, :mod:`.objectives` (mlm / clm batches and loss),
:mod:`.trainer` (the loop, checkpoints, resume, logging), :mod:`.compare` (run comparison tables).
Heavy imports (torch) happen when those modules are imported, not here.
"""
