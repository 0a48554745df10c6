"""The engine: from requests to results, fast and resumable. Knows no benchmark."""

from proctor.engine.cache import ResultCache
from proctor.engine.engine import Engine, EngineStats
from proctor.engine.tokens import POLICY_VERSION, EncodedPair, TokenizationPolicy, Window

__all__ = ["Engine", "EngineStats", "ResultCache", "TokenizationPolicy", "EncodedPair", "Window", "POLICY_VERSION"]
