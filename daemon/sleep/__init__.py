"""sleep."""
