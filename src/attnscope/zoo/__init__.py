"""The model zoo: the registry of models to survey (a YAML data file) and the survey run over it.

``attnscope.zoo.load_registry`` / ``select(group)`` / ``groups()`` query the registry
(:mod:`attnscope.zoo.registry`); ``attnscope.zoo.survey.run_zoo`` scores a group through
:mod:`attnscope.runs` (one result file per model, resumable).
"""

from .registry import (
    DEFAULT_REGISTRY,
    Published,
    ZooEntry,
    get_entry,
    groups,
    load_registry,
    published_table,
    select,
)

__all__ = [
    "DEFAULT_REGISTRY", "Published", "ZooEntry", "get_entry", "groups", "load_registry", "published_table",
    "select", "run_zoo",
]


def run_zoo(*args, **kwargs):  # noqa: ANN002, ANN003 - thin re-export, see attnscope.zoo.survey.run_zoo
    """Score a zoo group; see :func:`attnscope.zoo.survey.run_zoo`."""
    from .survey import run_zoo as _run_zoo

    return _run_zoo(*args, **kwargs)
