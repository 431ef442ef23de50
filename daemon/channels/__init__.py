"""Doors to the same conversation besides the socket: the Matrix channel (docs/channels.md)."""
