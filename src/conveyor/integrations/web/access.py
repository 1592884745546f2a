"""Who may see the dashboard (an auth hook, a token, basic auth) and the CSRF
check every action passes: a double-submit token, kept in a SameSite=Strict
cookie and sent back in each action's form."""

from __future__ import annotations

import base64
import binascii
import inspect
import secrets
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

AuthHook = Callable[[Request], bool | Awaitable[bool]]
CSRF_COOKIE = "conveyor_csrf"
TOKEN_COOKIE = "conveyor_token"


class Access:
    """Run `auth`, and check `token` (Bearer header, cookie, or `?token=` once,
    which sets the cookie) or `basic` ("user:password") before any page."""

    def __init__(
        self, app: ASGIApp, *, auth: AuthHook | None, token: str | None, basic: str | None
    ) -> None:
        self.app = app
        self.auth = auth
        self.token = token
        self.basic = basic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = await self.refusal(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if self.token and request.query_params.get("token") == self.token:
            await self._remember_token(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def refusal(self, request: Request) -> Response | None:
        if self.basic and not _basic_matches(request, self.basic):
            return PlainTextResponse(
                "authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="conveyor"'},
            )
        if self.token and not _token_matches(request, self.token):
            return PlainTextResponse("a token is required (?token=...)", status_code=401)
        if self.auth is not None:
            allowed = self.auth(request)
            if inspect.isawaitable(allowed):
                allowed = await allowed
            if not allowed:
                return PlainTextResponse("forbidden", status_code=403)
        return None

    async def _remember_token(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The page asked for, with the token kept in a cookie (and not in links)."""

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                cookie = Response()
                cookie.set_cookie(
                    TOKEN_COOKIE, self.token or "", httponly=True, samesite="strict",
                    path=scope.get("root_path") or "/",
                )  # fmt: skip
                # only the cookie: the blank Response's own Content-Length would conflict
                cookies = [(k, v) for k, v in cookie.raw_headers if k == b"set-cookie"]
                message["headers"] = [*message["headers"], *cookies]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _token_matches(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    offered = [
        header.removeprefix("Bearer ") if header.startswith("Bearer ") else "",
        request.cookies.get(TOKEN_COOKIE, ""),
        request.query_params.get("token", ""),
    ]
    return any(secrets.compare_digest(o.encode(), token.encode()) for o in offered if o)


def _basic_matches(request: Request, expected: str) -> bool:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        offered = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return False
    return secrets.compare_digest(offered, expected.encode())


def csrf_token(request: Request) -> str:
    """This browser's token (made on its first page; the cookie is set by the page)."""
    token = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "csrf", None)
    if not token:
        token = secrets.token_urlsafe(24)
        request.state.csrf = token
    return str(token)


def remember_csrf(request: Request, response: Response) -> None:
    if request.cookies.get(CSRF_COOKIE) is None:
        response.set_cookie(
            CSRF_COOKIE, csrf_token(request), httponly=True, samesite="strict",
            path=request.scope.get("root_path") or "/",
        )  # fmt: skip


def csrf_ok(request: Request, offered: str) -> bool:
    """The form's token matches the cookie, and a cross-site Origin is refused."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return False
    return bool(cookie) and secrets.compare_digest(cookie.encode(), offered.encode())
