"""The Textual app, and the server that puts it in a browser tab (web_server.py): the only
layer that imports textual or textual-serve."""
