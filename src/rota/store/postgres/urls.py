"""A ``postgresql://`` URL taken apart: libpq's connection string and rota's own options
(pool_min, pool_max, prepare, pooler) from its query string."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from rota.domain.errors import InvalidInput

#: The values of the URL's ``pooler`` setting.
POOLER_MODES = ("auto", "transaction", "none")
_OUR_PARAMS = {"pool_min", "pool_max", "prepare", "pooler"}
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class UrlSettings:
    """A ``postgresql://`` URL taken apart: libpq's connection string and rota's own options."""

    conninfo: str
    pool_min: int
    pool_max: int
    prepare: bool | None
    pooler: str
    listen_conninfo: str | None


def url_settings(url: str, *, listen_url: str | None = None) -> UrlSettings:
    """The settings of ``url`` (our options pool_min, pool_max, prepare and pooler taken out of
    its query string, the rest left to libpq) and of a direct ``listen_url``; InvalidInput for
    values that cannot work."""
    conninfo, ours = _split_url(url)
    try:
        pool_min = int(ours.get("pool_min", "1"))
        pool_max = int(ours.get("pool_max", "10"))
    except ValueError:
        raise InvalidInput("pool_min and pool_max must be integers") from None
    if not 0 <= pool_min <= pool_max or pool_max < 1:
        raise InvalidInput("need 0 <= pool_min <= pool_max and pool_max >= 1")
    pooler = ours.get("pooler", "auto").lower()
    if pooler not in POOLER_MODES:
        raise InvalidInput(f"pooler must be one of {', '.join(POOLER_MODES)}")
    listen_conninfo = None
    if listen_url is not None:
        if urlsplit(listen_url).scheme.lower() not in ("postgresql", "postgres"):
            raise InvalidInput("the listen database URL must be a postgresql:// URL")
        listen_conninfo, _ = _split_url(listen_url)
    return UrlSettings(
        conninfo=conninfo,
        pool_min=pool_min,
        pool_max=pool_max,
        prepare=ours["prepare"].lower() not in _FALSE if "prepare" in ours else None,
        pooler=pooler,
        listen_conninfo=listen_conninfo,
    )


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """(libpq conninfo, our own options) of a ``postgresql://`` URL."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(key, value) if key in _OUR_PARAMS else theirs.append((key, value)))
    # quote, not quote_plus: libpq reads "+" literally, so a space must travel as %20.
    query = urlencode(theirs, quote_via=quote)
    return parts._replace(scheme="postgresql", query=query).geturl(), ours
