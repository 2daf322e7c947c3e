"""The Textual app: the only layer that imports textual."""
