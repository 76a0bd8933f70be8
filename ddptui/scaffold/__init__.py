"""``ddptui init``: ask each host what it has, and write a hosts file that says so."""
