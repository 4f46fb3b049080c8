"""The server's configuration: ``ServerConfig``, its TOML sections, parsing, the queue-name rule.

The bottom of the server: it imports nothing of the server but ``_errors``.
"""
