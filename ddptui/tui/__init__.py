"""The Textual dashboard: reads the store on a timer, drives the controller from key bindings."""
