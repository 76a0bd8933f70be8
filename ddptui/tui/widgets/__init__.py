"""The dashboard's widgets, one a module."""
