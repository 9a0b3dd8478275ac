"""Connections to the upstream PostgreSQL, whoever opens them (the engine's pool, the ledger's, the
wire's fast path): how every connection is set up (:mod:`.settings`: output formats clients were
promised) and how a dead connection is told from a query's error (:mod:`.faults`). Imports
nothing of dpsql but :mod:`dpsql.errors`."""
