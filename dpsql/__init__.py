"""dpsql: a differentially private SQL proxy for PostgreSQL."""

__version__ = "0.1.0"
