"""Settings of the test Django project. Its databases come from the environment:

- DJANGOPROJECT_DB: Django's own database, ``sqlite:///path`` or a ``postgresql://`` URL;
- DJANGOPROJECT_ROTA: ``join`` (rota's tables in Django's PostgreSQL database, enqueues on its
  connection) or rota's own database URL.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any
from urllib.parse import unquote, urlsplit


def database(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


SECRET_KEY = "a test project's key"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": database(os.environ["DJANGOPROJECT_DB"])}

# Django 6 has django.tasks built in; Django 5.2 has the django-tasks backport as an app.
INSTALLED_APPS = [
    *(["django_tasks"] if importlib.util.find_spec("django.tasks") is None else []),
    "tests.djangoproject.notes",
]

_rota = os.environ["DJANGOPROJECT_ROTA"]
TASKS = {
    "default": {
        "BACKEND": "rota.contrib.django.RotaBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            **({"DATABASE": "default"} if _rota == "join" else {"DATABASE_URL": _rota}),
            "MAX_ATTEMPTS": 2,
        },
    }
}
