"""PostgreSQL names shared by the savers' and the stores' schemas.

Savers and stores are independent layers; what both need of PostgreSQL lives here, below
them. No psycopg import: the schemas are read without the driver installed.
"""

from __future__ import annotations

import re

from ..errors import InvalidConfigError

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def quote_schema(schema: str) -> str:
    """The schema as a quoted SQL identifier, after checking it is a plain name."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise InvalidConfigError(
            f"schema must be a plain SQL name (letters, digits, _ and $), got {schema!r}"
        )
    if schema.startswith("pg_") or schema == "information_schema":
        raise InvalidConfigError(f"schema {schema!r} is a PostgreSQL system schema: use your own")
    return f'"{schema}"'
