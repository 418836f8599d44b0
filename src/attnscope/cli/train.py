"""``attnscope train``: train a small encoder (mlm) or decoder (clm) and log W_qk geometry as it trains.

A thin layer over :func:`attnscope.training.trainer.train`; every option can also come from a YAML
file (``--config``), explicit flags win. Under ``torchrun`` the same command trains with DDP.
"""

from __future__ import annotations

from typing import Optional

import typer


def train(
    preset: Optional[str] = typer.Option(None, help="bert-mini | bert-base | bert-large | byte-12l (default bert-mini)."),
    objective: Optional[str] = typer.Option(None, help="mlm (encoder) or clm (decoder); default mlm."),
    init: Optional[str] = typer.Option(None, help="default | symmetric | symmetric-paper."),
    data: Optional[str] = typer.Option(None, help="builtin | text file/dir | enwik8 | PATH/enwik8.zip | hf:NAME[:CONFIG] | jigsaw:PATH."),
    tokenizer: Optional[str] = typer.Option(None, help="bytes | tokenizer.json | HF tokenizer dir | wordpiece:N | bpe:N (trained on the corpus)."),
    steps: Optional[int] = typer.Option(None, help="Optimizer updates."),
    batch_size: Optional[int] = typer.Option(None, help="Sequences per micro-batch (per process)."),
    grad_accum: Optional[int] = typer.Option(None, help="Micro-batches per update."),
    seq_len: Optional[int] = typer.Option(None, help="Tokens per sequence."),
    lr: Optional[float] = typer.Option(None, help="Peak learning rate."),
    weight_decay: Optional[float] = typer.Option(None, help="AdamW weight decay."),
    warmup: Optional[int] = typer.Option(None, help="Linear warmup steps."),
    schedule: Optional[str] = typer.Option(None, help="linear | cosine | constant decay after warmup."),
    clip: Optional[float] = typer.Option(None, help="Gradient-norm clipping (0: off)."),
    seed: Optional[int] = typer.Option(None, help="Random seed (init, data, masks, dropout)."),
    score_every: Optional[int] = typer.Option(None, help="Log geometry scores every K steps (and at step 0)."),
    checkpoint_every: Optional[int] = typer.Option(None, help="Write a checkpoint every K steps (and at the end)."),
    eval_every: Optional[int] = typer.Option(None, help="Evaluate on the held-out split every K steps."),
    eval_windows: Optional[int] = typer.Option(None, help="Held-out windows per evaluation (default 64)."),
    mask_prob: Optional[float] = typer.Option(None, help="mlm: fraction of positions selected (default 0.15)."),
    log_every: Optional[int] = typer.Option(None, help="Log the training loss every K steps."),
    keep_checkpoints: Optional[int] = typer.Option(None, help="Keep only the last N checkpoints."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Run directory (default runs/run)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    config: Optional[str] = typer.Option(None, "--config", help="YAML file with any of these options."),
    n_layers: Optional[int] = typer.Option(None, help="Override the preset's layers."),
    n_heads: Optional[int] = typer.Option(None, help="Override the preset's heads."),
    n_kv_heads: Optional[int] = typer.Option(None, help="Key/value heads (grouped-query attention)."),
    d_model: Optional[int] = typer.Option(None, help="Override the preset's model width."),
    d_ff: Optional[int] = typer.Option(None, help="Override the preset's MLP width."),
    dropout: Optional[float] = typer.Option(None, help="Override the dropout rate."),
    pos: Optional[str] = typer.Option(None, help="learned | sinusoidal | rotary positions."),
    norm: Optional[str] = typer.Option(None, help="post (BERT) | pre (GPT-2) LayerNorm."),
    attn_pattern: Optional[str] = typer.Option(None, help="Sparse attention pattern preset (e.g. byte-sparse-8h)."),
    tie_qk: bool = typer.Option(False, "--tie-qk", help="Keep W_q = W_k for all of training."),
    bf16: bool = typer.Option(False, "--bf16", help="bf16 autocast."),
    device: Optional[str] = typer.Option(None, help="cpu (default) or cuda[:N]."),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads (1 is fastest on a shared machine)."),
    wandb: Optional[str] = typer.Option(None, help="Also log to this Weights & Biases project."),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Also log to TensorBoard (RUN_DIR/tensorboard)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    json_out: bool = typer.Option(False, "--json", help="Print the final summary as JSON on stdout."),
) -> None:
    """Train a Transformer (mlm encoder or clm decoder), logging loss and W_qk geometry to RUN_DIR/metrics.jsonl."""
    options = dict(locals())  # first statement: exactly the options
    import json

    from attnscope.training.trainer import TrainConfig
    from attnscope.training.trainer import train as run_training

    for key in ("config", "json_out", "no_progress", "json"):
        options.pop(key, None)
    for flag in ("resume", "tie_qk", "bf16", "tensorboard"):  # flags only ever switch on
        if not options[flag]:
            options[flag] = None
    if no_progress:
        options["progress"] = False
    cfg = TrainConfig.from_sources(config, **options)
    summary = run_training(cfg)
    if json_out:
        from ._common import echo_json

        echo_json(json.dumps(summary))
    else:
        from ._common import stderr_console

        con = stderr_console()
        line = f"trained {summary['steps']} steps -> {cfg.out}"
        if "eval_loss" in summary:
            line += f"; held-out loss {summary['eval_loss']:.4f} ({summary['eval_bits_per_token']:.3f} bits/token)"
        line += f"; geometry logging {100 * summary['geometry_overhead']:.2f}% of training time"
        con.print(line)


app = train
