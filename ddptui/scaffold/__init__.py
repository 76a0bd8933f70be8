"""What ``ddptui init`` asks a host and the file it writes (the command: ``faces/init.py``)."""
