"""The dashboard's session in a process of its own, and the compact wire between them."""
