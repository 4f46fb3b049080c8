"""The engine: every semantic of the sepp server, on anyio, with an injectable clock.

``_engine`` (one async handler per RPC, reached through ``rpc_of``), the in-memory
``_state`` and its indexes, the group ``_committer``, request ``_validate`` and the protobuf
``_convert`` boundary, the retry ``_policy`` and the ``_clock``. It stands on ``_config``
and ``_store`` and knows nothing of the network.
"""
