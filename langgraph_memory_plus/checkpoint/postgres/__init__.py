"""PostgreSQL checkpointers."""

from ...drivers.connect import need

need("postgres")  # an ImportError naming the extra, before the driver's own

from .saver import AsyncPostgresSaver, PostgresSaver  # noqa: E402

__all__ = ["AsyncPostgresSaver", "PostgresSaver"]
