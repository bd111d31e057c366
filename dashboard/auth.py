"""The live dashboard's token check: the collector's own token, when it has one.

A collector given ``--token-file`` requires the token on OTLP and the query endpoint; the
dashboard it serves (on loopback) requires it too, or anyone on the machine could read the run.
A request is let in with ``Authorization: Bearer <token>`` (any case of ``Bearer``), or with the
session cookie that a first visit with ``?token=<token>`` sets (the cookie holds a value derived
from the token, never the token). Everything else is sent to a page that answers 401 and says
how to get in. Bokeh's server applies the check to the page, its websocket and its metadata.
"""

from __future__ import annotations

import html

from bokeh.server.auth_provider import AuthProvider
from tornado.web import RequestHandler

from rolloutscope.auth import bearer_token_matches, session_value, token_matches

COOKIE = "rolloutscope_session"
LOGIN_PATH = "/token-required"
USER = "token-holder"


class _TokenRequired(RequestHandler):
    def get(self) -> None:
        self.set_status(401)
        self.set_header("WWW-Authenticate", 'Bearer realm="rolloutscope"')
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(
            "<!doctype html><title>rolloutscope: token required</title>"
            "<h1>401: this dashboard needs the collector's token</h1>"
            f"<p>Open <code>{html.escape('/?token=<token>')}</code> once (the token is in the "
            "collector's <code>--token-file</code>), or send "
            "<code>Authorization: Bearer &lt;token&gt;</code>.</p>")


class TokenAuthProvider(AuthProvider):
    def __init__(self, token: str) -> None:
        self._token = token
        self._session = session_value(token)
        super().__init__()

    @property
    def get_user(self):
        token, session = self._token, self._session

        def user_of(handler: RequestHandler) -> str | None:
            if bearer_token_matches(handler.request.headers.get("Authorization"), token):
                return USER
            if token_matches(handler.get_cookie(COOKIE), session):
                return USER
            if token_matches(handler.get_query_argument("token", None), token):
                handler.set_cookie(COOKIE, session, httponly=True, samesite="Strict", path="/")
                return USER
            return None

        return user_of

    @property
    def login_url(self) -> str:
        return LOGIN_PATH

    @property
    def login_handler(self) -> type[RequestHandler]:
        return _TokenRequired
