"""What an interventions test needs of the installed transformers, skipped with its reason where it is missing."""

from __future__ import annotations

import pytest


def skip_unless_bert_calls_the_interface() -> None:
    """Skip where the installed transformers' BERT picks its attention class itself (releases before 5.0): there
    attnscope.interventions refuses a BERT-style encoder (all-MiniLM-L6-v2 included) in one line."""
    import transformers
    import transformers.models.bert.modeling_bert as bert

    if not hasattr(bert, "ALL_ATTENTION_FUNCTIONS"):  # a property of the installed release, not of a run
        pytest.skip(f"transformers {transformers.__version__}'s BERT does not call the attention interface "
                    "(from 5.0; attnscope.interventions refuses such a model in one line)")
