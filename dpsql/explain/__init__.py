"""EXPLAIN: dpsql's plan of a statement, answered before any private row is read or budget spent.

Owns the plan of one DP measurement (:mod:`.report`: mechanisms, epsilon split, sensitivities,
noise, accuracy), its PostgreSQL-shaped document for GUI clients (:mod:`.document`: text, JSON,
YAML, XML), the plan of a statement of several DP leaves (:mod:`.tree`), and the engine's EXPLAIN
path (:mod:`.run`: prepare, describe and answer an EXPLAIN; PostgreSQL's own EXPLAIN for public
statements). The EXPLAIN statement's option list is parsed with the rest of SQL
(:mod:`dpsql.sql.explain_options`). It sits above :mod:`dpsql.execute` and uses it; nothing
below imports it.
"""
