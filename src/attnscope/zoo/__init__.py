"""The model zoo: the registry of models to survey (a YAML data file) and the survey run over it.

``attnscope.zoo.load_registry`` / ``select(group)`` / ``groups()`` query the registry
(:mod:`attnscope.zoo.registry`); ``attnscope.zoo.survey.run_zoo`` scores a group through
:mod:`attnscope.runs` (one result file per model, resumable); ``attnscope.zoo.survey_summary`` and the
Markdown/LaTeX tables of :mod:`attnscope.zoo.report` set a survey's results next to the paper's.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".registry": ["DEFAULT_REGISTRY", "Published", "ZooEntry", "get_entry", "groups", "load_registry",
                  "published_table", "select"],
    ".survey": ["run_zoo"],
    ".report": ["attach_zoo_columns", "load_results", "summary_latex", "summary_markdown", "survey_summary"],
})
