"""Redis stores: plain Redis >= 6.2, Valkey and Redis Cluster, no modules."""

from .store import AsyncRedisStore, RedisStore

__all__ = ["AsyncRedisStore", "RedisStore"]
