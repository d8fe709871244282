"""The `rota` command line."""

import click


@click.group()
def main() -> None:
    """rota: a distributed job scheduler."""
