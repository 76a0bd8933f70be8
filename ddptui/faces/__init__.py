"""The plain-terminal faces of the controller: the headless printer and past-run logs."""
