"""The query parameters of keyset-paged listings: how many per page, and where to go on."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from rota.api.schemas import MAX_CURSOR_LENGTH
from rota.store.records import JOB_CURSOR_PATTERN, MAX_PAGE_SIZE

#: ``limit``: rows per page.
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]

#: ``cursor`` of a listing ordered by id, newest first (jobs, the audit log).
IdCursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_LENGTH,
        pattern=f"^{JOB_CURSOR_PATTERN.pattern}$",
        description="next_cursor of the previous page.",
    ),
]
