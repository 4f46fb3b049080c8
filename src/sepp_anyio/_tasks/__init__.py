"""Typed tasks: :class:`~sepp_anyio.Task` (``_task``), the type adapters behind its
payloads (``_typed``), the call that runs one as a handler (``_task_call``) and a
producer's reply queue for their results (``_results``: :class:`~sepp_anyio.Results`).

This ``__init__`` imports nothing, so that importing a task module loads no worker or
client code (tests/tasks/test_selection.py checks it).
"""
