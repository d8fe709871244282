"""`python -m rota` runs the CLI."""

from rota.cli import main

main()
