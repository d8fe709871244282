"""A small Django project whose tasks run on rota (tests/integration/test_django.py)."""
