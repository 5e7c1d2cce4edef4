"""Redis checkpointers: plain Redis, Valkey and Redis Cluster, no modules."""

from .saver import AsyncRedisSaver, RedisSaver

__all__ = ["AsyncRedisSaver", "RedisSaver"]
