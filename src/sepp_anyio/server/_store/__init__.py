"""The engine's durable storage: the ``Store`` protocol, ``MemoryStore`` and ``SqliteStore``.

Also the ``_records`` a store holds and commits. A store knows only its records: it imports
nothing else of the server.
"""
