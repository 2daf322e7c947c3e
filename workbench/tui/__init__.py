"""The Textual app (screens/, widgets/, keys, palette) and the server that puts it in a browser tab
(web_server.py): the only layer that imports textual. Imports every layer below it."""
