"""Connections to the upstream PostgreSQL, whoever opens them (the engine's pool, the ledger's, the
wire's fast path): how every connection is set up (:mod:`.settings`: read-only autocommit, the
pinned search path and string syntax, the statement timeout, the output formats clients were
promised), how a dead connection is told from a query's error and what error a client sees
(:mod:`.faults`). The engine's client (:class:`dpsql.execute.backend.Backend`) and the fast path's
(:class:`dpsql.wire.upstream.AsyncUpstream`) both take these from here. Imports nothing of dpsql
but :mod:`dpsql.errors`."""
