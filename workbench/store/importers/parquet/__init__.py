"""Native Parquet input: a schema-v1 events table, or another store merged run by run.
Imports the store, columns/ and attribution/; never another importer."""
