"""Redis stores: plain Redis >= 6.2, Valkey and Redis Cluster, no modules."""

from ...drivers.connect import need

need("redis")  # an ImportError naming the extra, before the driver's own

from .store import AsyncRedisStore, RedisStore  # noqa: E402

__all__ = ["AsyncRedisStore", "RedisStore"]
