"""Replay shards as Ray actors, with Reverb-style rate limiters (the optional ``ray`` extra).

:class:`ShardedReplay` starts ``n_shards`` :class:`ReplayShard` actors and is the picklable
client writers and the learner share; :class:`RateLimiter` holds samples-per-insert within
an error buffer, per shard.  See docs/scale.md.
"""

from numbatraj.ray.rate_limiter import RateLimiter
from numbatraj.ray.shard import ReplayShard
from numbatraj.ray.sharded import ShardedReplay

__all__ = ["RateLimiter", "ReplayShard", "ShardedReplay"]
