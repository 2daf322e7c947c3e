"""Column building shared by every trace format: the typed event record, its columns, args
columns, LZ4-packed text and all-null columns. Imports the store schema only; never an importer."""
