"""The plain-terminal faces of a run's session: the headless printer and past-run logs."""
