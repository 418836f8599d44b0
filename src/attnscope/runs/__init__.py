"""Long jobs: a resumable results store and the executors that fill it.

The zoo survey and the dynamics sweeps both run through here: a list of :class:`Task` (key +
payload), a top-level function ``fn(payload) -> DataFrame``, and :func:`run_tasks` with
``executor="inline" | "local" | "slurm"``. Finished tasks are never recomputed; corrupt files are
detected, moved aside and recomputed; failures are recorded one line each.
"""

from .executors import EXECUTORS, RunSummary, Task, run_tasks
from .store import ResultsStore

__all__ = ["EXECUTORS", "ResultsStore", "RunSummary", "Task", "run_tasks"]
