"""`python -m disagg.cli` is the same as the `disagg` command."""

from . import main

main()
