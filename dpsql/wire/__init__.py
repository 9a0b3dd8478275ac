"""The PostgreSQL v3 frontend/backend protocol, one client connection at a time.

Owns framing (:mod:`.framing`) and the messages (:mod:`.messages`, one class per message, named
as in the PostgreSQL docs), the connection as bytes in and out (:mod:`.conn`: the only I/O layer),
startup, TLS negotiation and authentication (:mod:`.startup`, :mod:`.startup_options`,
:mod:`.auth`), the query protocols as a sans-IO state machine (:mod:`.protocol`, and what it asks
of its driver: :mod:`.requests`, where :func:`~.requests.route` decides where each statement runs;
its prepared statements, portals and their columns: :mod:`.portals`; how rows go out:
:mod:`.rows_out`)
driven by the session (:mod:`.session`: simple and extended query, portals, errors until Sync;
what a statement's text is before it runs: :mod:`.preparing`; the client's statement_timeout:
:mod:`.timeouts`; cancelling the running statement: :mod:`.cancelling`),
the statements a
session answers itself (:mod:`.statements`, :mod:`.state`; the settings and how SET reads
their values: :mod:`.setting_values`) and ``COPY ... TO STDOUT`` (:mod:`.copy_out`), both read
with the tokens of :mod:`.sql_tokens`, encoding values (:mod:`.encode`), the
public fast path (:mod:`.fastpath`, :mod:`.upstream`), the asyncio listener (:mod:`.server`) and
the structured statement log (:mod:`.log`). What it needs of the engine is a typed Protocol
(:mod:`.engine_api`); the process around it (settings, workers, /metrics) is :mod:`dpsql.server`.
"""
