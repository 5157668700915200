"""Standard-only implementations: the reference every faster path must match bit for bit."""
