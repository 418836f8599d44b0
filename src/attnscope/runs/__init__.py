"""Long jobs: a resumable results store and the executors that fill it.

The zoo survey and the dynamics sweeps both run through here: a list of :class:`Task` (key +
payload), a top-level function ``fn(payload) -> DataFrame``, and :func:`run_tasks` with
``executor="inline" | "local" | "slurm"``. Finished tasks are never recomputed; every stored
result is validated (key, settings, columns) before reuse, and corrupt or foreign files are moved
aside and recomputed; failures are recorded one line each; pool workers die with their parent.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".executors": ["EXECUTORS", "RunSummary", "Task", "run_tasks"],
    ".store": ["ResultsStore"],
})
