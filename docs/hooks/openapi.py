"""Build hook: write the HTTP API's OpenAPI document (as `rota serve` serves it at
/openapi.json) where the HTTP reference page renders it, and into the site for download.

Generated from the package at build time, so the reference cannot drift from the code and the
build needs no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store.memory import MemoryStore

#: Where the reference page's [OAD(...)] marker reads it (relative to mkdocs.yml).
GENERATED = Path("build/docs/openapi.json")


def openapi_document() -> dict[str, Any]:
    """The document `rota serve` answers GET /openapi.json with."""
    app = create_app(Client(MemoryStore()), settings=ApiSettings())
    return app.openapi()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    GENERATED.parent.mkdir(parents=True, exist_ok=True)
    GENERATED.write_text(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(
        File.generated(config, "reference/openapi.json", abs_src_path=str(GENERATED.resolve()))
    )
    return files
