"""Integrations with the frameworks rota's users build on (each imported on its own)."""
