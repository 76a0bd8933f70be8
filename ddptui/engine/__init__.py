"""The dashboard's controller in a process of its own, and the compact wire between them."""
