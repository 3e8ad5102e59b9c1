"""Eager execution: one operator at a time (:class:`OpRunner`), phase one cached per call
signature (:class:`ExecutorCache`), on the same runtime pieces the pipeline uses."""

from .executor_cache import CacheStats, ExecutorCache, PreparedCall, attrs_key, executor_key
from .runner import OpRunner

__all__ = ["CacheStats", "ExecutorCache", "OpRunner", "PreparedCall", "attrs_key", "executor_key"]
