"""rota: a distributed job scheduler for Python."""
