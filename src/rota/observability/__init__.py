"""Metrics and logging: what rota tells operators about itself."""
