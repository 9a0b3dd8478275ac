"""EXPLAIN: dpsql's plan of a statement, answered before any private row is read or budget spent.

Owns the option list (:mod:`.options`: ``EXPLAIN (FORMAT JSON, ...)`` parsed and validated as
PostgreSQL does), the plan of one DP measurement (:mod:`.report`: mechanisms, epsilon split,
sensitivities, noise, accuracy), its PostgreSQL-shaped document for GUI clients (:mod:`.document`:
text, JSON, YAML, XML), the plan of a statement of several DP leaves (:mod:`.tree`), and the engine's
EXPLAIN path (:mod:`.run`: prepare, describe and answer an EXPLAIN; PostgreSQL's own EXPLAIN for
public statements). It sits beside :mod:`dpsql.execute` and may use it; ``execute`` imports only
:mod:`.options` from here (a prepared EXPLAIN carries its options).
"""
