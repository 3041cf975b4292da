"""`python -m disagg` is the same as the `disagg` command."""

from .cli import main

main()
