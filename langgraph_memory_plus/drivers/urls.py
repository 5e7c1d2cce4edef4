"""Connection strings: masking their secrets, and the checks that keep secrets out of errors.

Shared by ``from_url`` and the drivers' ``from_conn_string``. A URL's password ends at the
*last* ``@`` of the authority: a password with an unencoded ``/``, ``?`` or ``#`` makes
``urlsplit`` (and libpq, which stops the user info at the first ``@`` or ``/``) take part of
it for a host, a port or a path, and their error messages then quote it. So the checks here
run before any parser does, raise messages of our own that never quote a parser, and
:func:`redact` masks by the last-``@`` rule, which over-masks an ``@`` that belongs to the
path or query but never shows a password.

These errors are raised outside the ``except`` block that caught the parser's error, so
not even ``__context__`` holds text that may quote the password.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import InvalidConfigError

MASK = "***"
# ``password=`` (also ``sslpassword=``) in a query string: up to the next ``&`` (a ``#`` in
# the value is part of it as far as masking goes).
_QUERY_SECRET = re.compile(r"(?i)([?&;](?:ssl)?password=)([^&]*)")
# ``password = value`` in a libpq key=value string, quoted or not.
_KEYWORD_SECRET = re.compile(r"(?i)\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
ENCODING_HINT = (
    "percent-encode these characters in the user name and password: / as %2F, ? as %3F, "
    "# as %23, @ as %40, % as %25 (urllib.parse.quote(password, safe=''))"
)


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """``(scheme://, user info, the rest after its @)`` by the last-``@`` rule, or None."""
    head, sep, rest = url.partition("://")
    if not sep:
        return None
    userinfo, at, tail = rest.rpartition("@")
    if not at:
        return None
    return head + sep, userinfo, tail


def redact(text: str) -> str:
    """``text`` (a URL, or a libpq ``key=value`` string) with every password masked.

    In a URL everything between ``://`` and the last ``@`` is masked except a plain user
    name before the first ``:``; ``password=`` parameters are masked too.
    """
    if "://" not in text:
        return _KEYWORD_SECRET.sub(rf"\1{MASK}", text)
    parts = _userinfo(text)
    if parts is not None:
        head, userinfo, tail = parts
        user, colon, _ = userinfo.partition(":")
        shown = f"{user}:{MASK}" if colon else user
        if re.search(r"[/?#]", user):  # not a user name: the URL is malformed
            shown = MASK
        text = f"{head}{shown}@{tail}"
    return _QUERY_SECRET.sub(rf"\1{MASK}", text)


def secrets(text: str) -> list[str]:
    """The passwords ``text`` holds, as written and decoded, longest first."""
    found: set[str] = set()
    parts = _userinfo(text) if "://" in text else None
    if parts is not None:
        _, userinfo, _ = parts
        _, colon, password = userinfo.partition(":")
        if colon:
            found.update({password, unquote(password)})
        elif re.search(r"[/?#]", userinfo):
            found.add(userinfo)
    for match in _QUERY_SECRET.finditer(text):
        found.update({match.group(2), unquote(match.group(2))})
    for match in _KEYWORD_SECRET.finditer(text):
        value = match.group(2)
        found.update({value, value.strip("'")})
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(message: str, text: str) -> str:
    """``message`` (a driver's, which may quote ``text``) with ``text``'s passwords masked."""
    for secret in secrets(text):
        message = message.replace(secret, MASK)
    return message


def check_userinfo(url: str) -> None:
    """Refuse a URL whose user name or password holds characters a parser would misread.

    An unencoded ``/``, ``?``, ``#`` or ``@`` moves the end of the authority, so the
    drivers would connect to a host named after part of the password (or quote it in an
    error); an unencoded ``%`` makes libpq's error quote the password.
    """
    parts = _userinfo(url)
    if parts is None:
        return
    userinfo = parts[1]
    if re.search(r"[/?#@]", userinfo) or _BAD_ESCAPE.search(userinfo):
        raise InvalidConfigError(f"bad URL {redact(url)}: {ENCODING_HINT}")


def check_port(url: str) -> None:
    """A port that is not a number is our error, not ``urlsplit``'s (which quotes it)."""
    try:
        urlsplit(url).port  # noqa: B018  (reading it checks it)
    except ValueError:
        bad = True
    else:
        bad = False
    if bad:
        raise InvalidConfigError(
            f"bad URL {redact(url)}: the port must be a number from 0 to 65535 ({ENCODING_HINT})"
        )


def redis_database(url: str) -> int | None:
    """The database number a Redis URL names (path ``/N`` or ``?db=N``), None for none.

    redis-py ignores a path that is not a number (``redis://h:6379/abc`` opens database
    0); a typo there must not silently mix two applications' keys. Redis Cluster has only
    database 0.
    """
    check_userinfo(url)
    check_port(url)
    parts = urlsplit(url)
    found: list[str] = []
    path = unquote(parts.path).strip("/")
    if path:
        found.append(path)
    found.extend(value for name, value in parse_qsl(parts.query) if name == "db")
    if not found:
        return None
    for value in found:
        if not re.fullmatch(r"\d+", value):
            raise InvalidConfigError(
                f"the database in {redact(url)} must be a number, as in redis://host:6379/0; "
                f"got {value!r}"
            )
    if len(set(map(int, found))) > 1:
        raise InvalidConfigError(f"{redact(url)} names two different databases")
    number = int(found[0])
    if "+cluster" in parts.scheme and number:
        raise InvalidConfigError(f"{redact(url)}: Redis Cluster has only database 0")
    return number


def check_conninfo(conninfo: str) -> None:
    """Parse a PostgreSQL connection string as libpq will, with an error of ours.

    libpq's parse errors quote the text around the fault (``invalid percent-encoded token:
    "<password>"``), and a pool logs them at every retry.
    """
    from psycopg.conninfo import conninfo_to_dict

    if "://" in conninfo:
        check_userinfo(conninfo)
    try:
        conninfo_to_dict(conninfo)
    except Exception:  # psycopg.ProgrammingError: its text may hold the password
        bad = True
    else:
        bad = False
    if bad:
        raise InvalidConfigError(
            f"the PostgreSQL connection string {redact(conninfo)} cannot be parsed: use "
            f"postgresql://user:password@host:5432/dbname and {ENCODING_HINT}, or key=value "
            "pairs with values in single quotes"
        )
