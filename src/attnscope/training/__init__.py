"""The training lab: train small encoders (mlm) and decoders (clm) and track W_qk geometry as they learn.

Modules: :mod:`.model` (the Transformer, its config, presets, inits, save/load), :mod:`.data`
(corpora, splits, windows), :mod:`.tokenizers`, :mod:`.objectives` (mlm / clm batches and loss),
:mod:`.config` (TrainConfig, the schedule), :mod:`.trainer` (the loop), :mod:`.checkpoints`,
:mod:`.runlog` (metrics.jsonl, W&B / TensorBoard), :mod:`.distributed`, :mod:`.compare` (run
comparison tables; reading in :mod:`.compare_read`, statistics in :mod:`.compare_stats`, text in
:mod:`.compare_report`), :mod:`.grid` (several seeds as one experiment). Names load on first use, so
importing the package does not import torch.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".config": ["TrainConfig", "lr_at"],
    ".trainer": ["train"],
    ".checkpoints": ["list_checkpoints"],
    ".model": ["ModelConfig", "Transformer", "PRESETS", "load_model", "save_model", "preset_config", "init_weights"],
    ".data": ["open_corpus", "heldout_windows"],
    ".tokenizers": ["load_tokenizer"],
    ".compare": ["compare", "Comparison"],
    ".grid": ["run_grid", "Grid"],
})
