"""The dashboard's pages: index, its static files, and the token login form.

Static files are read once from the package into an allow-list, so a path can only name a
file we ship. The login page is rendered on the server (no inline script) and escapes the one
message it shows.

Every URL these pages write, redirect to or scope a cookie to starts with the ASGI
``root_path``, so the dashboard works mounted below a prefix in a host app: the index page
carries it in ``data-root`` for the scripts, which call the API below it.
"""

from __future__ import annotations

import html
from importlib import resources
from urllib.parse import parse_qs

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from rota.api.body import media_type, read_body
from rota.api.context import ApiContext
from rota.api.errors import ApiError
from rota.api.security import SESSION_COOKIE, client_address, root_path

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
MAX_LOGIN_BODY = 4096

_LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rota: log in</title>
<link rel="stylesheet" href="{root}/login.css">
<link rel="icon" href="data:,">
</head>
<body class="login">
<main class="login-box">
<h1>rota</h1>
<form method="post" action="{root}/login">
<label for="token">Access token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form>
{message}
</main>
</body>
</html>
"""


def load_static() -> dict[str, bytes]:
    """Every file shipped in rota/api/static, by name."""
    folder = resources.files("rota.api").joinpath("static")
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and _suffix(entry.name) in CONTENT_TYPES
    }


#: Stands for the root path in index.html.
ROOT_MARK = b"{{root}}"


def login_page(message: str | None, status: int, root: str = "") -> HTMLResponse:
    shown = f'<p class="error">{html.escape(message)}</p>' if message else ""
    return HTMLResponse(
        _LOGIN_PAGE.format(message=shown, root=html.escape(root)), status_code=status
    )


def pages_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    files = load_static()
    auth = ctx.authenticator
    throttle = auth.throttle

    @router.get("/")
    async def index(request: Request) -> Response:
        return _file(files, "index.html", root=root_path(request.scope))

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        return _file(files, name)

    @router.get("/login.css")
    async def login_css() -> Response:
        return _file(files, "style.css")

    @router.get("/login")
    async def login_form(request: Request) -> Response:
        root = root_path(request.scope)
        if not auth.login_enabled:
            return RedirectResponse(f"{root}/", status_code=303)
        return login_page(None, 200, root)

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not auth.login_enabled:
            raise ApiError(404, "not found")
        if (
            media_type(request.headers.get("content-type"))[0]
            != "application/x-www-form-urlencoded"
        ):
            raise ApiError(415, "Content-Type must be application/x-www-form-urlencoded")
        raw = await read_body(request, MAX_LOGIN_BODY)
        root = root_path(request.scope)
        try:
            form = parse_qs(raw.decode("ascii"), max_num_fields=4, errors="strict")
        except (UnicodeError, ValueError):
            return login_page("The form could not be read.", 400, root)
        now = await ctx.now()
        address = client_address(request.scope)
        token = next(iter(form.get("token", [])), "")
        principal = auth.token_principal(token)
        # A right token is always accepted, even from a throttled address; wrong ones are not.
        if principal is None:
            if throttle.address_blocked(address, now):
                return login_page("Too many failed attempts; wait a minute.", 429, root)
            blocked = throttle.prefix_blocked(token, now)
            throttle.failed(address, token, now)
            if blocked:
                return login_page("Too many failed attempts; wait a minute.", 429, root)
            return login_page("Wrong token.", 401, root)
        response = RedirectResponse(f"{root}/", status_code=303)
        # Scoped to the mount point: a host app's other pages never receive the session.
        response.set_cookie(
            SESSION_COOKIE,
            auth.session_value(now, principal),
            max_age=ctx.settings.session_seconds,
            path=root or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        """Ends the session on the server too: its cookie is refused from now on."""
        auth.end_session(request.cookies.get(SESSION_COOKIE), await ctx.now())
        root = root_path(request.scope)
        response = RedirectResponse(
            f"{root}/login" if auth.login_enabled else f"{root}/", status_code=303
        )
        response.delete_cookie(
            SESSION_COOKIE,
            path=root or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    return router


def _suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def _file(files: dict[str, bytes], name: str, *, root: str | None = None) -> Response:
    """A shipped file; with ``root``, its ROOT_MARKs replaced by the (escaped) root path."""
    content = files.get(name)
    if content is None:
        raise ApiError(404, "not found")
    if root is not None:
        content = content.replace(ROOT_MARK, html.escape(root).encode())
    return Response(
        content,
        media_type=CONTENT_TYPES[_suffix(name)],
        headers={"Cache-Control": "no-cache"},
    )
