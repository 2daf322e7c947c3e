"""The app's screens and modal dialogs, one per file, each posting messages to the app.
Imports widgets/, the tui helpers and the layers below; never another screen's internals."""
