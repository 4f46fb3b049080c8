"""The distribution version (read by hatch and sent in the user agent)."""

from __future__ import annotations

__version__ = "0.1.0"
