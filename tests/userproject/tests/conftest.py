from __future__ import annotations

import pytest
from shop.jobs import OUTBOX


@pytest.fixture(autouse=True)
def empty_outbox() -> None:
    OUTBOX.clear()
