"""Redis checkpointers: plain Redis, Valkey and Redis Cluster, no modules."""

from ...drivers.connect import need

need("redis")  # an ImportError naming the extra, before the driver's own

from .saver import AsyncRedisSaver, RedisSaver  # noqa: E402

__all__ = ["AsyncRedisSaver", "RedisSaver"]
