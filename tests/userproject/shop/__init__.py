"""A small shop that sends emails through rota."""
