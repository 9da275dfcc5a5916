"""Plugin module (placeholder)."""
