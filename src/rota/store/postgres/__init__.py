"""The PostgreSQL backend: store.py (the verbs), queries.sql (the statements), migrations/."""
