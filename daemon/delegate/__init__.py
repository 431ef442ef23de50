"""delegate."""
