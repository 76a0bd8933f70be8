"""`ddptui clean`: which finished runs and code caches go (pure), and removing them."""
