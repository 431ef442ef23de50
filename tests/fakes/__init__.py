"""Fakes of external services that speak their real wire formats over loopback HTTP."""
