"""``python -m attnscope`` = the ``attnscope`` command."""

from attnscope.cli import main

main()
