"""SQL, as pure functions over sqlglot trees: parse, resolve, analyze, plan and rewrite.

Owns parsing (:mod:`.parse`, :mod:`.prescan`, :mod:`.explain_options`, :mod:`.bind`), the tables
a statement reads (:mod:`.tables`, :mod:`.names`, :mod:`.sources`), the analysis of a private
statement (:mod:`.analyze` and its ``analyze_*`` parts -> :class:`.analysis.Analysis`: measures,
groups, contribution bounds, key domains; which ``auto`` bounds to choose: :mod:`.auto_bounds`,
what such a bound is: :mod:`.auto_bound_types`), its DP plan (:mod:`.plan`, :mod:`.sensitivity`,
:mod:`.grouping_sets`), CTEs and derived tables merged into one SELECT (:mod:`.flatten`,
:mod:`.derived`, :mod:`.filters_to_case`), statements of several DP leaves (:mod:`.tree`,
:mod:`.per_unit`, its synthetic tables :mod:`.per_unit_source` and exact filters
:mod:`.per_unit_filters`), the rewrite passes into bounded SQL (:mod:`.rewrite`, one pass per module) and
the post-processing SQL (:mod:`.postprocess`), whose nodes :mod:`.nodes` builds without parsing
or copying. Reads the policy, never the network: nothing here opens a connection or imports the
engine, the wire, the budget or the catalog emulation.
"""
