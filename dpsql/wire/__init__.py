"""The PostgreSQL v3 frontend/backend protocol server: framing, messages, startup, auth, sessions."""
