"""The dashboard's modal screens: the yes/no question, quitting, help and the run picker."""
