"""Catalog emulation: what an analyst's client may see of ``pg_catalog``, ``information_schema``
and "this session", answered through the upstream with hidden objects filtered out.

Owns the check-and-rewrite of catalog queries (:mod:`dpsql.catalog.check`, the entry point:
``check_catalog_query``, ``is_catalog_query``), the allow lists as data (:mod:`.rules`,
:mod:`.function_rules`), the SQL it adds (:mod:`.build`, :mod:`.visibility`, :mod:`.objects`,
:mod:`.overrides`), the analyst's one role (:mod:`.roles`, :mod:`.regrole`), refused literals
(:mod:`.literals`) and session-information functions (:mod:`.session_functions`). It reads the
policy and sqlglot trees only: nothing of the engine, the wire or the budget.
"""
