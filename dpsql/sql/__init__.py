"""SQL: parsing, analysis, rewriting and catalog introspection."""
