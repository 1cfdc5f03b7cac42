"""Serving the model to many clients: continuous batching and the HTTP API."""
