"""PostgreSQL stores."""

from ...drivers.connect import need

need("postgres")  # an ImportError naming the extra, before the driver's own

from .store import AsyncPostgresStore, PostgresStore  # noqa: E402

__all__ = ["AsyncPostgresStore", "PostgresStore"]
