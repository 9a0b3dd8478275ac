"""Running a prepared statement: the stages :class:`dpsql.engine.Engine` calls in order.

Owns the statement value (:mod:`.prepared`, made by :mod:`.prepare`), which path it takes
(:mod:`.classify`), the upstream PostgreSQL (:mod:`.backend`: psycopg pool, read-only
transactions, timeouts, sanitized errors), the public and catalog SQL and their Describe (:mod:`.public_sql`), the private path (:mod:`.private`:
plan (:mod:`.planning`), check before any charge (:mod:`.precheck`), charge, run the bounded SQL
of :mod:`.private_sql`, add noise in :mod:`.noise`, post-process; its free-repeat keys and
in-flight slot :mod:`.repeat_keys`; the statement being run, as the private and tree paths carry
it, with the stages they share (slot, charge, settling a failure) :mod:`.statement_run`;
:mod:`.grouping_sets`, :mod:`.group_keys`, :mod:`.auto_bounds` and its words
:mod:`.auto_bounds_text`, :mod:`.bias`), statements of
several DP leaves (:mod:`.tree_prepare`, :mod:`.tree`, the leaves of one run :mod:`.tree_leaves`,
:mod:`.tree_budget`, :mod:`.tree_post`, their notices :mod:`.tree_notices`; their intervals
:mod:`.tree_output_intervals`, :mod:`.tree_intervals`, :mod:`.tree_levels`,
:mod:`.tree_interval_text`), the privacy parameters
(:mod:`.privacy_params`), timing padding (:mod:`.timing`) and the engine's memos (:mod:`.caches`).
A stage sees the engine through :class:`.context.EngineContext` and never imports
:mod:`dpsql.engine`.
"""
