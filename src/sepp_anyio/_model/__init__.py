"""The public data model: types, errors, rejections, limits, payload codecs, checks.

One idea per module: ``_payload``, ``_trace`` (trace context), ``_enqueue`` (request and
ack), ``_retries`` (retry directive and the client's RPC retry policy), ``_retry_policy`` (a
job retry policy, ``Retry``), ``_expiry`` (a job's ``sepp.expires_at`` deadline),
``_server_info``, ``_dead_letters``, ``_job`` (a reserved job and its context),
``_results`` (a job's result on the wire, and its errors); ``_errors`` / ``_error_root``,
``_rejections``,
``_limits``, ``_codecs`` (payload codecs) and ``_checks`` (the argument rules).

Conventions, shared by every type here:

* durations are ``float`` seconds (the trio/anyio idiom); the wire carries whole
  milliseconds, so anything finer is truncated when sent;
* instants are timezone-aware ``datetime`` objects in UTC; a naive ``datetime`` is refused
  rather than guessed at;
* bad arguments raise :class:`InvalidArgumentError` (or :class:`InvalidArgumentTypeError`
  for the wrong type; both are :class:`SeppError` subclasses, and also a ``ValueError`` /
  ``TypeError``) at construction, with a message naming the field and the limit, so a
  mistake surfaces where it was made instead of as a server rejection later.

Nothing here touches the network or the generated protobuf classes; see ``_wire._convert``
for the wire mapping.
"""
