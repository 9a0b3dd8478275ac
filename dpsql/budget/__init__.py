"""The privacy budget: what each analyst and the dataset may still spend, durably, in PostgreSQL.

Owns the contract the engine charges through (:mod:`.api`: ``BudgetLedger``) and its one
implementation (:mod:`.ledger`: reserve before a release runs, commit before its answer leaves,
refund only when nothing was computed, free repeats from :mod:`.answers`), over the storage
(:mod:`.store`: pool, schema, transactions; :mod:`.schema`: tables and migrations). The steps
live apart: the policy's limits (:mod:`.limits`, :mod:`.periods`), charging budget rows
(:mod:`.charging`, :mod:`.filter`: the Renyi privacy filter), what analysts see (:mod:`.views`,
:mod:`.route`: ``SHOW dpsql.budget``, ``dpsql.history``), administration (:mod:`.admin`,
:mod:`.reconcile`, :mod:`.cli`: ``dpsql budget``). Below the engine: imports nothing of the
engine, the wire or :mod:`dpsql.execute`.
"""
