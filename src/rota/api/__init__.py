"""The HTTP API and the dashboard: ``create_app(client, settings=...)`` and its settings."""

from rota.api.app import create_app
from rota.api.settings import ApiSettings, BindRefused, check_bind

__all__ = ["ApiSettings", "BindRefused", "check_bind", "create_app"]
