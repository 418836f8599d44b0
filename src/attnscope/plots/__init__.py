"""Figures: matplotlib, one module per area (geometry, survey, training, heads, dynamics), one function
per figure, each taking tidy tables (the same tables the CLI writes) and returning or saving a figure.
Drawn with the Agg backend, so they work without a screen."""
