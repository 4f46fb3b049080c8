"""The server on the network: HTTP/2 (``sepp_anyio._http2``'s server role) over anyio.

``_network`` (listening, graceful shutdown, ``ServerThread``), one ``_served`` connection and
its ``_call``\\ s, the gRPC ``_service`` layer and ``_auth``, connection ``_admission``, the
limits (``_netlimits``) and the request-bytes budget (``_reqbytes``). The top of the server:
it stands on the engine, the stores and the configuration.
"""
